/* Files written or trusted in directories other users might reach: eerld's state, metrics and
 * socket directories and policy file, and every file the library writes (a saved controller
 * state, a trace). A directory is trusted when it is owned by root (or by this process's
 * effective user) and nobody else may write it; a sticky one (such as /tmp) may be shared when
 * the caller allows it, since nobody else can remove or rename what is put there, and then a file
 * already there must be the caller's. A file is created afresh relative to the directory's fd
 * (O_EXCL | O_NOFOLLOW) and renamed into place, or opened with O_NOFOLLOW, so a link planted by
 * someone else is never followed. Owns only these checks and opens; callers decide what to
 * write. Every refusal comes with why: the path, its owner and mode, and what to change. The code
 * is libeerl's (src/common/safefile.c); not exported by libeerl.so, linked from libeerl.a. */
#ifndef EERL_TOOLS_SAFEFILE_H
#define EERL_TOOLS_SAFEFILE_H

#include <stddef.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 if st (a directory's fstat) is safe to trust: a directory owned by uid 0 or the effective
 * uid, not writable by group or others (allow_sticky: a sticky directory may be). Else
 * EERL_EUNSAFE (EERL_EINVAL: not a directory) with why naming what, path, owner and mode. */
int eerl_safe_dir(const struct stat *st, const char *what, const char *path, int allow_sticky,
                  char *why, size_t why_len);

/* Opens directory path (O_DIRECTORY | O_CLOEXEC) and checks it with eerl_safe_dir. 0 and
 * *ret_fd, or EERL_E* with why. */
int eerl_safe_dir_open(const char *what, const char *path, int allow_sticky, int *ret_fd, char *why,
                       size_t why_len);

/* 0 if the open file fd (path, for messages) is a regular file owned by uid 0 or the effective
 * uid and not writable by group or others, like sshd's StrictModes. Else EERL_EUNSAFE with why. */
int eerl_safe_file(int fd, const char *what, const char *path, char *why, size_t why_len);

/* Creates name in dfd for writing: O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC with mode, exactly
 * (whatever the umask). An entry already there (a temp file a crash left, or a link someone
 * planted) is unlinked (the entry, never what it points to) and creation tried once more. An fd,
 * or -1 with errno. */
int eerl_safe_create(int dfd, const char *name, mode_t mode);

#ifdef __cplusplus
}
#endif
#endif
