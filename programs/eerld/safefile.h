/* Files eerld (root) writes or trusts in directories it does not create itself: the state dir
 * (journal, lock), the metrics textfile dir, the socket dir, and the policy file. A directory is
 * trusted when it is owned by root (or by the user eerld runs as) and nobody else may write it;
 * a file eerld writes is created afresh relative to such a directory's fd (O_EXCL | O_NOFOLLOW),
 * then renamed into place, so a link planted by someone else is never followed. Owns only these
 * checks and opens; the callers decide what to write. */
#ifndef EERLD_SAFEFILE_H
#define EERLD_SAFEFILE_H

#include <stddef.h>
#include <sys/stat.h>

/* 0 if st (a directory's fstat) is safe to trust: a directory owned by uid 0 or the effective
 * uid, not writable by group or others (allow_sticky: a sticky directory such as /tmp may be,
 * since nobody else can remove or rename what eerld puts there). Else -1 with why naming path,
 * owner and mode and saying what to change. */
int eerld_dir_safe(const struct stat *st, const char *what, const char *path, int allow_sticky,
                   char *why, size_t why_len);

/* Opens directory path (O_DIRECTORY | O_CLOEXEC) and checks it with eerld_dir_safe. 0 and
 * *ret_fd, or -1 with why. */
int eerld_dir_open(const char *what, const char *path, int allow_sticky, int *ret_fd, char *why,
                   size_t why_len);

/* 0 if the open file fd (path, for messages) is a regular file owned by uid 0 or the effective
 * uid and not writable by group or others, like sshd's StrictModes. Else -1 with why. */
int eerld_file_safe(int fd, const char *what, const char *path, char *why, size_t why_len);

/* Creates name in dfd for writing: O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC with mode. An
 * entry already there (a temp file a crash left, or a link someone planted) is unlinked (the
 * entry, never what it points to) and creation tried once more. An fd, or -1 with errno. */
int eerld_create_fresh(int dfd, const char *name, mode_t mode);

#endif
