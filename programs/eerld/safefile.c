/* Safe directories and fresh files for eerld (see safefile.h). */
#define _GNU_SOURCE /* O_NOFOLLOW, O_DIRECTORY, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"

static int owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

int eerld_dir_safe(const struct stat *st, const char *what, const char *path, int allow_sticky,
                   char *why, size_t why_len)
{
    if (!S_ISDIR(st->st_mode)) {
        snprintf(why, why_len, "%s %s is not a directory", what, path);
        return -1;
    }
    if (!owner_ok(st->st_uid)) {
        snprintf(why, why_len,
                 "%s %s is owned by uid %u, not root: another user could swap what eerld "
                 "writes there; chown root it (or give another directory)",
                 what, path, (unsigned)st->st_uid);
        return -1;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(allow_sticky && (st->st_mode & S_ISVTX))) {
        snprintf(why, why_len,
                 "%s %s is writable by %s (mode %04o): another user could plant links there "
                 "that make eerld overwrite other files; chmod go-w it (or give another "
                 "directory)",
                 what, path, (st->st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777));
        return -1;
    }
    return 0;
}

int eerld_dir_open(const char *what, const char *path, int allow_sticky, int *ret_fd, char *why,
                   size_t why_len)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0) {
        snprintf(why, why_len, "cannot open %s %s: %s", what, path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(why, why_len, "cannot stat %s %s: %s", what, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (eerld_dir_safe(&st, what, path, allow_sticky, why, why_len) < 0) {
        close(fd);
        return -1;
    }
    *ret_fd = fd;
    return 0;
}

int eerld_file_safe(int fd, const char *what, const char *path, char *why, size_t why_len)
{
    struct stat st;

    if (fstat(fd, &st) < 0) {
        snprintf(why, why_len, "cannot stat %s %s: %s", what, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s %s is not a regular file", what, path);
        return -1;
    }
    if (!owner_ok(st.st_uid)) {
        snprintf(why, why_len,
                 "%s %s is owned by uid %u, not root: its owner could grant itself any "
                 "clock; chown root it",
                 what, path, (unsigned)st.st_uid);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_len,
                 "%s %s is writable by %s (mode %04o): they could grant themselves any "
                 "clock; chmod go-w it",
                 what, path, (st.st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

int eerld_create_fresh(int dfd, const char *name, mode_t mode)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);

    if (fd < 0 && errno == EEXIST) {
        if (unlinkat(dfd, name, 0) < 0)
            return -1;
        fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    }
    if (fd >= 0 && fchmod(fd, mode) < 0) { /* the mode asked for, whatever the umask */
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}
