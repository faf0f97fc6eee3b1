/* Safe directories and fresh files (see safefile.h). */
#define _GNU_SOURCE /* O_NOFOLLOW, O_DIRECTORY, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/safefile.h"
#include "eerl/error.h"

static int owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* ", not root" and, for a process that is not root, its own uid too. */
static const char *not_ours(char *buf, size_t len)
{
    if (geteuid() == 0)
        snprintf(buf, len, "not root");
    else
        snprintf(buf, len, "not root or uid %u (this process)", (unsigned)geteuid());
    return buf;
}

int eerl_safe_dir(const struct stat *st, const char *what, const char *path, int allow_sticky,
                  char *why, size_t why_len)
{
    char who[64];

    if (!S_ISDIR(st->st_mode)) {
        snprintf(why, why_len, "%s %s is not a directory", what, path);
        return EERL_EINVAL;
    }
    if (!owner_ok(st->st_uid)) {
        snprintf(why, why_len,
                 "%s %s is owned by uid %u, %s: its owner could swap or link what is written "
                 "there; chown it (or give another directory)",
                 what, path, (unsigned)st->st_uid, not_ours(who, sizeof(who)));
        return EERL_EUNSAFE;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(allow_sticky && (st->st_mode & S_ISVTX))) {
        snprintf(why, why_len,
                 "%s %s is writable by %s (mode %04o): another user could plant links there "
                 "that make this process overwrite other files; chmod go-w it%s (or give "
                 "another directory)",
                 what, path, (st->st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777),
                 allow_sticky ? ", or make it sticky (chmod +t)" : "");
        return EERL_EUNSAFE;
    }
    return 0;
}

int eerl_safe_dir_open(const char *what, const char *path, int allow_sticky, int *ret_fd, char *why,
                       size_t why_len)
{
    struct stat st;
    int e, fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0) {
        snprintf(why, why_len, "cannot open %s %s: %s", what, path, strerror(errno));
        return EERL_ESYS;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(why, why_len, "cannot stat %s %s: %s", what, path, strerror(errno));
        close(fd);
        return EERL_ESYS;
    }
    e = eerl_safe_dir(&st, what, path, allow_sticky, why, why_len);
    if (e < 0) {
        close(fd);
        return e;
    }
    *ret_fd = fd;
    return 0;
}

int eerl_safe_file(int fd, const char *what, const char *path, char *why, size_t why_len)
{
    struct stat st;
    char who[64];

    if (fstat(fd, &st) < 0) {
        snprintf(why, why_len, "cannot stat %s %s: %s", what, path, strerror(errno));
        return EERL_ESYS;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s %s is not a regular file", what, path);
        return EERL_EINVAL;
    }
    if (!owner_ok(st.st_uid)) {
        snprintf(why, why_len,
                 "%s %s is owned by uid %u, %s: its owner could grant itself any clock; chown "
                 "root it",
                 what, path, (unsigned)st.st_uid, not_ours(who, sizeof(who)));
        return EERL_EUNSAFE;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_len,
                 "%s %s is writable by %s (mode %04o): they could grant themselves any "
                 "clock; chmod go-w it",
                 what, path, (st.st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st.st_mode & 07777));
        return EERL_EUNSAFE;
    }
    return 0;
}

int eerl_safe_create(int dfd, const char *name, mode_t mode)
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

/* path's directory part ("." for none) into dir and its last part into name. */
static int split(const char *path, char *dir, size_t dir_len, char *name, size_t name_len)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path) : 0;

    if (!base[0] || !strcmp(base, ".") || !strcmp(base, "..") || strlen(base) >= name_len ||
        n + 2 > dir_len)
        return EERL_EINVAL;
    if (!slash)
        snprintf(dir, dir_len, ".");
    else if (n == 0)
        snprintf(dir, dir_len, "/");
    else
        snprintf(dir, dir_len, "%.*s", (int)n, path);
    snprintf(name, name_len, "%s", base);
    return 0;
}

int eerl__wdir_open(const char *what, const char *path, struct eerl__wdir *ret, char *why,
                    size_t why_len)
{
    char dir[4096], label[64], inner[600];
    struct stat st;
    int e;

    ret->fd = -1;
    ret->shared = 0;
    if (!path || split(path, dir, sizeof(dir), ret->name, sizeof(ret->name)) < 0) {
        snprintf(why, why_len, "%s path '%s' names no file (or is too long)", what,
                 path ? path : "");
        return EERL_EINVAL;
    }
    snprintf(label, sizeof(label), "%s directory", what);
    e = eerl_safe_dir_open(label, dir, 1, &ret->fd, inner, sizeof(inner));
    if (e < 0) {
        snprintf(why, why_len, "%s '%s': %s", what, path, inner);
        return e;
    }
    if (fstat(ret->fd, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)))
        ret->shared = 1; /* sticky, or eerl_safe_dir would have refused it */
    return 0;
}

void eerl__wdir_close(struct eerl__wdir *d)
{
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
}

int eerl__wdir_check_entry(const struct eerl__wdir *d, const char *what, const char *path,
                           char *why, size_t why_len)
{
    struct stat st;

    if (fstatat(d->fd, d->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 1;
        snprintf(why, why_len, "cannot stat %s '%s': %s", what, path, strerror(errno));
        return EERL_ESYS;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(why, why_len,
                 "%s '%s' is a symbolic link: eerl never writes through one (someone could "
                 "point it at another file); remove the link or give the real path",
                 what, path);
        return EERL_EUNSAFE;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s '%s' is not a regular file; give a file path", what, path);
        return EERL_EINVAL;
    }
    if (d->shared && st.st_uid != geteuid()) {
        snprintf(why, why_len,
                 "%s '%s' belongs to uid %u, not to this process (uid %u), in a directory "
                 "others can write: refusing to replace it; give a path of your own",
                 what, path, (unsigned)st.st_uid, (unsigned)geteuid());
        return EERL_EUNSAFE;
    }
    return 0;
}
