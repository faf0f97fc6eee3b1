/* See resume.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/safefile.h"
#include "eerl/error.h"
#include "runtime/resume.h"

/* The largest a saved state can be: its head (under 64 KiB) and at most 1024 references (the
 * largest ref_window); a bigger file is no state and is never read. */
#define RESUME_MAX (1024u * sizeof(eerl_obs) + (64u << 10))

int eerl__resume_path(const char *dir, char *buf, size_t len)
{
    int n;

    if (!dir || !buf || len == 0)
        return EERL_EINVAL;
    n = snprintf(buf, len, "%s/%s", dir, EERL__RESUME_FILE);
    return n < 0 || (size_t)n >= len ? EERL_EOVERFLOW : 0;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes buf to a fresh temporary beside path in d (never through a link someone planted, never
 * over another user's file), then renames it over path: a crash mid-save leaves the previous
 * state. */
static int save_bytes(const struct eerl__wdir *d, const char *path, const unsigned char *buf,
                      size_t n, char *why, size_t why_len)
{
    char tmp[sizeof(d->name) + 8];
    int e, fd;

    e = eerl__wdir_check_entry(d, "saved state", path, why, why_len);
    if (e < 0)
        return e;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", d->name) >= sizeof(tmp)) {
        snprintf(why, why_len, "path '%s' is too long", path);
        return EERL_EINVAL;
    }
    fd = eerl_safe_create(d->fd, tmp, 0644);
    if (fd < 0) {
        snprintf(why, why_len, "creating '%s.tmp': %s", path, strerror(errno));
        return EERL_ESYS;
    }
    if (write_all(fd, buf, n) < 0 || fsync(fd) < 0) {
        snprintf(why, why_len, "writing '%s.tmp': %s", path, strerror(errno));
        close(fd);
        unlinkat(d->fd, tmp, 0);
        return EERL_ESYS;
    }
    if (close(fd) < 0 || renameat(d->fd, tmp, d->fd, d->name) < 0) {
        snprintf(why, why_len, "writing '%s.tmp' and renaming it to '%s': %s", path, path,
                 strerror(errno));
        unlinkat(d->fd, tmp, 0);
        return EERL_ESYS;
    }
    return 0;
}

int eerl__resume_save(const eerl_ctl *ctl, const char *tag, const char *path, char *why,
                      size_t why_len)
{
    struct eerl__wdir d = {.fd = -1};
    unsigned char *buf = NULL;
    size_t need = 0;
    int e;

    if (!ctl || !path) {
        snprintf(why, why_len, "no controller or path");
        return EERL_EINVAL;
    }
    e = eerl_ctl_save(ctl, tag, NULL, 0, &need);
    if (e != EERL_EOVERFLOW) {
        snprintf(why, why_len, "saving the controller: %s", eerl_strerror(e));
        return e < 0 ? e : EERL_EINVAL;
    }
    buf = malloc(need);
    if (!buf)
        return EERL_ENOMEM;
    e = eerl_ctl_save(ctl, tag, buf, need, &need);
    if (e < 0) {
        snprintf(why, why_len, "saving the controller: %s", eerl_strerror(e));
        goto out;
    }
    e = eerl__wdir_open("saved state", path, &d, why, why_len);
    if (e == 0)
        e = save_bytes(&d, path, buf, need, why, why_len);
out:
    eerl__wdir_close(&d);
    free(buf);
    return e;
}

/* Reads n bytes of fd into p; -1 with errno on failure, -2 when the file ended early. */
static int read_all(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return -2;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

size_t eerl__resume_max(void)
{
    return RESUME_MAX;
}

int eerl__resume_read(const char *path, unsigned char **ret_buf, size_t *ret_len, char *why,
                      size_t why_len)
{
    unsigned char *buf = NULL;
    struct stat sb;
    int e, fd, r;

    if (!path || !ret_buf || !ret_len) {
        snprintf(why, why_len, "no path");
        return EERL_EINVAL;
    }
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the type is checked
     * before anything is read. */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT) {
            snprintf(why, why_len, "no saved state at '%s': fresh search", path);
            return 1;
        }
        snprintf(why, why_len, "reading saved state '%s': %s", path, strerror(errno));
        return EERL_EIO;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, why_len,
                 "'%s' is not a regular file (a saved controller state is one); refusing to "
                 "read it",
                 path);
        e = EERL_EPARSE;
        goto out;
    }
    if (sb.st_size <= 0 || (unsigned long long)sb.st_size > RESUME_MAX) {
        snprintf(why, why_len, "'%s' is %s, not a saved controller state", path,
                 sb.st_size <= 0 ? "empty" : "bigger than any saved state can be");
        e = EERL_EPARSE;
        goto out;
    }
    buf = malloc((size_t)sb.st_size);
    if (!buf) {
        snprintf(why, why_len, "out of memory reading '%s'", path);
        e = EERL_ENOMEM;
        goto out;
    }
    r = read_all(fd, buf, (size_t)sb.st_size);
    if (r < 0) {
        snprintf(why, why_len, "reading saved state '%s': %s", path,
                 r == -2 ? "short read (the file shrank)" : strerror(errno));
        e = EERL_EIO;
        goto out;
    }
    *ret_buf = buf;
    *ret_len = (size_t)sb.st_size;
    buf = NULL;
    e = 0;
out:
    close(fd);
    free(buf);
    return e;
}

int eerl__resume_apply(eerl_ctl *ctl, const char *tag, const void *buf, size_t len,
                       const char *path, char *why, size_t why_len)
{
    char r[400] = "";
    int e = eerl_ctl_restore(ctl, tag, buf, len, r, sizeof(r));

    if (e == 0) {
        /* r: a note on a state of an older format, else empty */
        snprintf(why, why_len, r[0] ? "resumed from '%s' (%s)" : "resumed from '%s'%s", path, r);
        return 0;
    }
    if (e == EERL_EPARSE) {
        snprintf(why, why_len, "'%s': %s", path, r);
        return e;
    }
    if (e == EERL_ESTATE || e == EERL_ENOTSUP || e == EERL_EVERSION) {
        eerl_ctl_status st;
        /* Refused after the first observation is the caller's mistake, not a fresh search. */
        if (eerl_ctl_get_status(ctl, &st) == 0 && st.observed + st.rejected > 0) {
            snprintf(why, why_len, "%s", r);
            return EERL_ESTATE;
        }
        snprintf(why, why_len, "'%s': %s", path, r);
        return 1;
    }
    snprintf(why, why_len, "'%s': %s", path, r);
    return e;
}

int eerl__resume_load(eerl_ctl *ctl, const char *tag, const char *path, char *why, size_t why_len)
{
    unsigned char *buf = NULL;
    eerl_ctl_status st;
    size_t len = 0;
    int e;

    if (!ctl || !path) {
        snprintf(why, why_len, "no controller or path");
        return EERL_EINVAL;
    }
    if (eerl_ctl_get_status(ctl, &st) == 0 && st.observed + st.rejected > 0) {
        snprintf(why, why_len, "the controller has observed already; load before the first update");
        return EERL_ESTATE;
    }
    e = eerl__resume_read(path, &buf, &len, why, why_len);
    if (e != 0)
        return e;
    e = eerl__resume_apply(ctl, tag, buf, len, path, why, why_len);
    free(buf);
    return e;
}
