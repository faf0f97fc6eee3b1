/* Files written or trusted in directories other users might reach: eerld's state, metrics and
 * socket directories and policy file, and every file the library writes (a saved controller
 * state, a trace). A directory is trusted when it is owned by root (or by this process's
 * effective user) and nobody else may write it; a sticky one (such as /tmp) may be shared when
 * the caller allows it, since nobody else can remove or rename what is put there, and then a file
 * already there must be the caller's. A file is created afresh relative to the directory's fd
 * (O_EXCL | O_NOFOLLOW) and renamed into place, or opened with O_NOFOLLOW, so a link planted by
 * someone else is never followed. Owns only these checks and opens; callers decide what to
 * write. Every refusal comes with why: the path, its owner and mode, and what to change. */
#ifndef EERL_COMMON_SAFEFILE_H
#define EERL_COMMON_SAFEFILE_H

#include <stddef.h>
#include <sys/stat.h>

/* 0 if st (a directory's fstat) is safe to trust: a directory owned by uid 0 or the effective
 * uid, not writable by group or others (allow_sticky: a sticky directory may be). Else
 * EERL_EUNSAFE (EERL_EINVAL: not a directory) with why naming what, path, owner and mode. */
int eerl__dir_safe(const struct stat *st, const char *what, const char *path, int allow_sticky,
                   char *why, size_t why_len);

/* Opens directory path (O_DIRECTORY | O_CLOEXEC) and checks it with eerl__dir_safe. 0 and
 * *ret_fd, or EERL_E* with why. */
int eerl__dir_open(const char *what, const char *path, int allow_sticky, int *ret_fd, char *why,
                   size_t why_len);

/* 0 if the open file fd (path, for messages) is a regular file owned by uid 0 or the effective
 * uid and not writable by group or others, like sshd's StrictModes. Else EERL_EUNSAFE with why. */
int eerl__file_safe(int fd, const char *what, const char *path, char *why, size_t why_len);

/* Creates name in dfd for writing: O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC with mode, exactly
 * (whatever the umask). An entry already there (a temp file a crash left, or a link someone
 * planted) is unlinked (the entry, never what it points to) and creation tried once more. An fd,
 * or -1 with errno. */
int eerl__create_fresh(int dfd, const char *name, mode_t mode);

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
