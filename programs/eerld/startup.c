/* eerld's start-up (see startup.h). Files are opened relative to checked directory fds, never
 * through a link (safefile.h). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"

#include "log.h"
#include "eerl/tools/safefile.h"
#include "startup.h"

#define LOCK_FILE "eerld.lock"

int eerld_load_policy(const struct eerld_config *cfg, struct eerld_policy *p, int *ret_have_file)
{
    char why[512];

    if (access(cfg->policy_path, F_OK) < 0 && !cfg->policy_explicit) {
        eerld_log(LOG_WARNING, "no policy file %s: only root may lease GPUs", cfg->policy_path);
        eerld_policy_default(p);
        *ret_have_file = 0;
        return 0;
    }
    if (eerld_policy_load(cfg->policy_path, p, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    *ret_have_file = 1;
    return 0;
}

static int make_dirs(const struct eerld_config *cfg)
{
    char dir[4096];
    char *slash;

    if (mkdir(cfg->state_dir, 0700) < 0 && errno != EEXIST) {
        eerld_log(LOG_ERR, "cannot create state dir %s: %s", cfg->state_dir, strerror(errno));
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s", cfg->socket_path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
            eerld_log(LOG_ERR, "cannot create socket dir %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The state dir: checked (root's, writable by nobody else), then locked, before anything in
 * it is read or any GPU touched: a second eerld on the same state dir stops here. */
static int lock_state_dir(const struct eerld_config *cfg, struct eerld_files *f)
{
    char why[600], pid[32];
    ssize_t n;

    if (eerl_safe_dir_open("state dir", cfg->state_dir, 0, &f->state_fd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    f->lock_fd = openat(f->state_fd, LOCK_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f->lock_fd < 0) {
        eerld_log(LOG_ERR, "cannot open %s/%s: %s", cfg->state_dir, LOCK_FILE, strerror(errno));
        return -1;
    }
    if (flock(f->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;

        n = pread(f->lock_fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (err == EWOULDBLOCK)
            eerld_log(LOG_ERR,
                      "another eerld (pid %s) holds the state dir %s: refusing to start; nothing "
                      "was reset or changed",
                      pid[0] ? pid : "unknown", cfg->state_dir);
        else
            eerld_log(LOG_ERR, "cannot lock %s/%s: %s", cfg->state_dir, LOCK_FILE, strerror(err));
        close(f->lock_fd);
        f->lock_fd = -1;
        return -1;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(f->lock_fd, 0) < 0 || pwrite(f->lock_fd, pid, (size_t)n, 0) != n)
        eerld_log(LOG_WARNING, "cannot write the pid to %s/%s: %s", cfg->state_dir, LOCK_FILE,
                  strerror(errno));
    return 0;
}

/* The socket's directory must be one nobody else can write (or a sticky one, like /tmp): the
 * owner and mode are set by path after bind, and nobody may swap the path meanwhile. And a
 * daemon already serving the socket means this one must not start: checked before any GPU
 * is touched. */
static int check_socket_path(const struct eerld_config *cfg, struct eerld_files *f)
{
    char dir[4096], why[600];
    const char *path = cfg->socket_path, *slash = strrchr(path, '/');
    struct sockaddr_un sa;
    struct stat st;
    int dfd, probe;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        eerld_log(LOG_ERR, "--socket '%s' is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
        return -1;
    }
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (eerl_safe_dir_open("socket dir", dir, 1, &dfd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    close(dfd);
    if (cfg->socket_group) {
        struct group *gr = getgrnam(cfg->socket_group);

        if (!gr && cfg->group_explicit) {
            eerld_log(LOG_ERR, "--socket-group '%s': no such group", cfg->socket_group);
            return -1;
        }
        if (!gr)
            eerld_log(LOG_WARNING,
                      "group '%s' does not exist: the socket stays root's only (create it with "
                      "'groupadd --system %s' and add the users who may talk to eerld)",
                      cfg->socket_group, cfg->socket_group);
        else {
            f->sock_gid = gr->gr_gid;
            f->have_sock_gid = 1;
        }
    }
    if (lstat(path, &st) < 0)
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        eerld_log(LOG_ERR, "%s exists and is not a socket; refusing to replace it", path);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        close(probe);
        eerld_log(LOG_ERR,
                  "another eerld is serving %s: refusing to start; nothing was reset or "
                  "changed",
                  path);
        return -1;
    }
    if (probe >= 0)
        close(probe);
    return 0;
}

/* The metrics file's directory, checked like the state dir and kept open: the file is
 * written relative to it. */
static int open_metrics_dir(const struct eerld_config *cfg, struct eerld_files *f)
{
    char dir[4096], why[600];
    const char *path = cfg->metrics_path, *slash;

    if (!path)
        return 0;
    slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    f->metrics_name = slash ? slash + 1 : path;
    if (!f->metrics_name[0]) {
        eerld_log(LOG_ERR, "--metrics-textfile '%s' names a directory, not a file", path);
        return -1;
    }
    if (eerl_safe_dir_open("metrics textfile dir", dir, 0, &f->metrics_fd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    return 0;
}

int eerld_open_devices(const struct eerld_config *cfg, eerl_device **ret)
{
    const char *d = cfg->devices;
    char why[512] = "";
    int e;

    if (!strcmp(d, "nvml")) {
        e = eerl_device_open_nvml_ex(why, sizeof(why), ret);
        if (e < 0) {
            eerld_log(LOG_ERR, "cannot open NVML: %s%s%s", eerl_strerror(e), why[0] ? ": " : "",
                      why);
            return -1;
        }
    } else if (!strncmp(d, "twin:", 5)) {
        char model[16];
        const char *x = strrchr(d, 'x');
        unsigned long n;
        char *end;

        if (!x || x <= d + 5 || (size_t)(x - d - 5) >= sizeof(model) || x[1] < '0' || x[1] > '9')
            goto bad_twin;
        n = strtoul(x + 1, &end, 10);
        if (*end || n == 0 || n > 1024)
            goto bad_twin;
        memcpy(model, d + 5, (size_t)(x - d - 5));
        model[x - d - 5] = '\0';
        e = eerl_twin_idle_device(model, (unsigned)n, ret);
        if (e < 0) {
            eerld_log(LOG_ERR, "--devices %s: unknown twin GPU '%s' (valid: %s)", d, model,
                      eerl_twin_gpu_names());
            return -1;
        }
    } else {
        goto bad_twin;
    }
    return 0;
bad_twin:
    eerld_log(LOG_ERR, "--devices '%s' is not valid: give nvml or twin:GPUxN (e.g. twin:h100x8)",
              d);
    return -1;
}

int eerld_listen(const struct eerld_config *cfg, const struct eerld_files *f, int *ret_fd)
{
    struct sockaddr_un sa;
    const char *path = cfg->socket_path;
    struct stat st;
    mode_t old;
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        eerld_log(LOG_ERR, "--socket '%s' is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (lstat(path, &st) == 0) {
        int probe;

        if (!S_ISSOCK(st.st_mode)) {
            eerld_log(LOG_ERR, "%s exists and is not a socket; refusing to replace it", path);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(probe);
            eerld_log(LOG_ERR, "another eerld is serving %s", path);
            return -1;
        }
        if (probe >= 0)
            close(probe);
        unlink(path); /* stale, from a daemon that was killed */
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        eerld_log(LOG_ERR, "socket: %s", strerror(errno));
        return -1;
    }
    old = umask(0177); /* never world-accessible, not even for an instant */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        umask(old);
        eerld_log(LOG_ERR, "cannot bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    umask(old);
    /* The directory is checked (check_socket_path): nobody else can swap the path between the
     * bind and these; lchown would not follow a link anyway. */
    if ((f->have_sock_gid && lchown(path, (uid_t)-1, f->sock_gid) < 0) ||
        chmod(path, cfg->socket_mode) < 0) {
        eerld_log(LOG_ERR, "cannot set owner/mode of %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (listen(fd, 128) < 0) {
        eerld_log(LOG_ERR, "listen: %s", strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    *ret_fd = fd;
    return 0;
}

int eerld_startup_check(const struct eerld_config *cfg, struct eerld_policy *p,
                        int *ret_have_policy, struct eerld_files *f)
{
    if (eerld_load_policy(cfg, p, ret_have_policy) < 0 || make_dirs(cfg) < 0 ||
        lock_state_dir(cfg, f) < 0 || check_socket_path(cfg, f) < 0 || open_metrics_dir(cfg, f) < 0)
        return -1;
    return 0;
}

void eerld_files_close(struct eerld_files *f)
{
    if (f->metrics_fd >= 0)
        close(f->metrics_fd);
    if (f->state_fd >= 0)
        close(f->state_fd);
    if (f->lock_fd >= 0)
        close(f->lock_fd); /* the lock goes last: the journal is final by now */
    f->metrics_fd = f->state_fd = f->lock_fd = -1;
}
