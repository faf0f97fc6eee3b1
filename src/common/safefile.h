/* Files the library writes (a saved controller state, a trace) in directories other users might
 * reach: where to write one, checked. The checks and opens it is built on, which eerld shares
 * for its state, metrics and socket directories and its policy file, are eerl/tools/safefile.h,
 * whose rules this follows. */
#ifndef EERL_COMMON_SAFEFILE_H
#define EERL_COMMON_SAFEFILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "eerl/tools/safefile.h"

/* Where the library writes a file: path's directory, open and checked, and the file's name. */
struct eerl__wdir {
    int fd;     /* the directory, O_DIRECTORY; -1 when closed */
    int shared; /* 1: a sticky directory others may write: a file there must be the caller's */
    char name[256];
};

/* Opens the directory of path ("what" names the file in messages: "trace", "saved state") and
 * checks it: trusted, or sticky (shared). A path ending in '/' or naming "." or ".." is no file.
 * 0, or EERL_EUNSAFE / EERL_EINVAL / EERL_ESYS with why naming the directory and what to do. */
int eerl__wdir_open(const char *what, const char *path, struct eerl__wdir *ret, char *why,
                    size_t why_len);
void eerl__wdir_close(struct eerl__wdir *d);

/* Whether d's entry name may be replaced or written: 1 when absent; 0 for a regular file that is
 * not a link and, in a shared directory, is the caller's; else EERL_EUNSAFE (a link, another
 * user's file), EERL_EINVAL (not a regular file) or EERL_ESYS with why naming path. */
int eerl__wdir_check_entry(const struct eerl__wdir *d, const char *what, const char *path,
                           char *why, size_t why_len);

#endif
