/* eerl doctor's checks (include/eerl/doctor.h): one pass over what decides whether a run on this
 * node can work, written as a list of checks for the CLI and the Python package to print.
 *
 * It owns only the caller's list while it fills it, and an NVML handle and an eerld connection
 * for the length of one call. It must not change a clock, lease a GPU or print. eerld is asked
 * first because two lines depend on it: NVML failing in this process is only a warning where
 * eerld serves the GPUs, and lacking root or CAP_SYS_ADMIN is only an error where no eerld
 * leases to this uid. The route it checks is the one a session takes (src/runtime/session.c,
 * python/eerl/session.py): eerld when $EERL_SOCKET is set or its default socket exists, else
 * NVML in-process. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/path_access.h"
#include "eerl/agent.h"
#include "eerl/device.h"
#include "eerl/doctor.h"
#include "eerl/error.h"
#include "eerl/version.h"

/* linux/capability.h's CAP_SYS_ADMIN: what nvmlDeviceSetGpuLockedClocks asks of a non-root
 * caller. */
#define CAP_SYS_ADMIN_BIT 21
/* Holders named in the lease line before "and N more". */
#define HOLDERS_SHOWN 4

struct list {
    struct eerl_doctor_check *out;
    size_t cap, n;
};

/* What eerld said, gathered before any line is written. */
struct probe {
    const char *path;
    int wanted;   /* a session would go through eerld */
    int from_env; /* the path was given ($EERL_SOCKET or the caller), not the default's presence */
    int err;      /* eerl_agent_connect's result */
    char why[512];
    eerl_agent *agent; /* NULL unless it answered */
    struct eerl_agent_info info;
};

/* Appends a check; NULL once the list is full (the check is still counted). */
static struct eerl_doctor_check *add(struct list *l, eerl_doctor_level level, const char *name,
                                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static struct eerl_doctor_check *add(struct list *l, eerl_doctor_level level, const char *name,
                                     const char *fmt, ...)
{
    struct eerl_doctor_check *c = l->n < l->cap ? &l->out[l->n] : NULL;
    va_list ap;

    l->n++;
    if (!c)
        return NULL;
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->level = level;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof(c->message), fmt, ap);
    va_end(ap);
    return c;
}

static void fix(struct eerl_doctor_check *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fix(struct eerl_doctor_check *c, const char *fmt, ...)
{
    va_list ap;

    if (!c)
        return;
    va_start(ap, fmt);
    vsnprintf(c->fix, sizeof(c->fix), fmt, ap);
    va_end(ap);
}

const char *eerl_doctor_level_name(eerl_doctor_level level)
{
    switch (level) {
    case EERL_DOCTOR_OK:
        return "ok";
    case EERL_DOCTOR_WARNING:
        return "warning";
    case EERL_DOCTOR_ERROR:
        return "error";
    }
    return "unknown";
}

/* Connecting has the hello's deadline (src/agent/client.c): a stopped, hung or trickling eerld
 * is an error line, never a doctor that does not return. */
static void probe_eerld(const char *socket, struct probe *p)
{
    const char *env = getenv("EERL_SOCKET");

    memset(p, 0, sizeof(*p));
    p->path = socket ? socket : eerl_agent_socket_path();
    p->from_env = socket || (env && *env);
    p->wanted = socket || eerl_agent_wanted();
    if (!p->wanted)
        return;
    p->err = eerl_agent_connect(p->path, "eerl doctor", p->why, sizeof(p->why), &p->agent);
    if (p->err == 0)
        eerl_agent_info(p->agent, &p->info);
}

/* NVML in this process; the device, or NULL after writing why not. */
static eerl_device *check_nvml(struct list *l, const struct probe *p)
{
    const char *lib = getenv("EERL_NVML_LIBRARY");
    struct eerl_doctor_check *c;
    eerl_device *dev = NULL;
    char why[512] = "";
    int e = eerl_device_open_nvml_ex(why, sizeof(why), &dev);

    if (e == 0) {
        if (lib && *lib)
            add(l, EERL_DOCTOR_OK, "nvml", "NVML loads (EERL_NVML_LIBRARY=%s)", lib);
        else
            add(l, EERL_DOCTOR_OK, "nvml", "NVML loads (the driver's libnvidia-ml.so.1)");
        return dev;
    }
    if (!why[0])
        snprintf(why, sizeof(why), "%s", eerl_strerror(e));
    if (p->agent) {
        c = add(l, EERL_DOCTOR_WARNING, "nvml", "NVML does not load in this process: %s", why);
        fix(c, "sessions reach the GPUs through eerld, which works; eerl devices and eerl meter "
               "need --socket here");
        return NULL;
    }
    c = add(l, EERL_DOCTOR_ERROR, "nvml", "%s", why);
    if (e == EERL_ENODRIVER)
        fix(c, "install the NVIDIA driver, or set EERL_NVML_LIBRARY to the path of "
               "libnvidia-ml.so.1; without a driver only the simulated cluster (eerl sim) runs");
    else
        fix(c, "check the driver with nvidia-smi: it fails the same way if the driver is broken");
    return NULL;
}

static void check_driver(struct list *l, eerl_device *dev)
{
    char v[96];
    int e = eerl_device_driver_version(dev, v, sizeof(v));
    struct eerl_doctor_check *c;

    if (e == 0) {
        add(l, EERL_DOCTOR_OK, "driver", "NVIDIA driver %s", v);
        return;
    }
    c = add(l, EERL_DOCTOR_WARNING, "driver", "the driver's version is unknown: %s",
            eerl_device_last_error(dev)[0] ? eerl_device_last_error(dev) : eerl_strerror(e));
    fix(c, "nvidia-smi shows it; a driver too old to say may lack the energy counter eerl reads "
           "(eerl devices shows n/a then)");
}

static void check_gpu(struct list *l, eerl_device *dev, unsigned gpu)
{
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX], mhz;
    char name[EERL_DOCTOR_NAME_MAX], uuid[EERL_DEVICE_UUID_MAX], model[EERL_DEVICE_NAME_MAX];
    char now[32] = "n/a";
    struct eerl_doctor_check *c;
    size_t n = 0;
    int e;

    snprintf(name, sizeof(name), "gpu %u", gpu);
    e = eerl_device_uuid(dev, gpu, uuid, sizeof(uuid));
    if (e == 0)
        e = eerl_device_name(dev, gpu, model, sizeof(model));
    if (e < 0) {
        c = add(l, EERL_DOCTOR_ERROR, name, "GPU %u cannot be read: %s (%s)", gpu, eerl_strerror(e),
                eerl_device_last_error(dev));
        if (e == EERL_EGPULOST)
            fix(c,
                "the GPU is lost: reset it (nvidia-smi -r -i %u) or reboot the node; leave "
                "it out of runs until then",
                gpu);
        else
            fix(c, "check it with nvidia-smi -i %u; leave it out of runs until it reads", gpu);
        return;
    }
    if (eerl_device_sm_clock(dev, gpu, &mhz) == 0)
        snprintf(now, sizeof(now), "%u MHz", mhz);
    e = eerl_device_supported_sm_clocks(dev, gpu, clocks, EERL_DEVICE_CLOCKS_MAX, &n);
    if (e < 0 || n == 0) {
        c = add(l, EERL_DOCTOR_ERROR, name, "%s %s lists no supported SM clocks (%s); now %s", uuid,
                model, e < 0 ? eerl_device_last_error(dev) : "an empty list", now);
        fix(c, "eerl cannot pick clocks on this GPU: a controlling run on it fails, "
               "observe_only=True works");
        return;
    }
    if (n == 1) {
        c = add(l, EERL_DOCTOR_WARNING, name, "%s %s supports one SM clock (%u MHz); now %s", uuid,
                model, clocks[0], now);
        fix(c, "eerl has no clock to pick on this GPU and saves nothing there");
        return;
    }
    add(l, EERL_DOCTOR_OK, name, "%s %s: SM clocks %u-%u MHz (%zu values), now %s", uuid, model,
        clocks[n - 1], clocks[0], n, now);
}

static void check_gpus(struct list *l, eerl_device *dev, const char *via)
{
    struct eerl_doctor_check *c;
    unsigned n = 0, i;
    int e = eerl_device_count(dev, &n);

    if (e < 0) {
        c = add(l, EERL_DOCTOR_ERROR, "gpus", "counting the GPUs%s failed: %s (%s)", via,
                eerl_strerror(e), eerl_device_last_error(dev));
        fix(c, "check that nvidia-smi lists the GPUs");
        return;
    }
    if (n == 0) {
        c = add(l, EERL_DOCTOR_ERROR, "gpus", "no GPU%s", via);
        fix(c, "check that nvidia-smi lists the GPUs and that this container or job was given "
               "them");
        return;
    }
    add(l, EERL_DOCTOR_OK, "gpus", "%u GPU%s%s", n, n == 1 ? "" : "s", via);
    for (i = 0; i < n; i++)
        check_gpu(l, dev, i);
}

/* The fix for a socket this process may not connect to: what the refusing component needs. */
static void fix_refused(struct eerl_doctor_check *c, const char *path)
{
    struct eerl__path_refusal r;
    char how[PATH_MAX + 400];

    if (eerl__path_refusal(path, &r) != 0) {
        fix(c, "ask the node's admin for access to %s (eerld's socket), or run as root", path);
        return;
    }
    eerl__path_refusal_fix(&r, how, sizeof(how));
    fix(c, "%s", how);
}

static void check_eerld(struct list *l, const struct probe *p)
{
    struct eerl_doctor_check *c;
    char mine[80];

    if (!p->wanted) {
        add(l, EERL_DOCTOR_OK, "eerld",
            "no eerld (no socket at %s, EERL_SOCKET unset): sessions set clocks in-process",
            EERL_AGENT_DEFAULT_SOCKET);
        return;
    }
    if (!p->agent) {
        c = add(l, EERL_DOCTOR_ERROR, "eerld", "%s; sessions go through eerld because %s",
                p->why[0] ? p->why : eerl_strerror(p->err),
                p->from_env ? "its socket was named" : "its default socket exists");
        if (p->err == EERL_ENOPERM)
            fix_refused(c, p->path);
        else if (p->err == EERL_EVERSION)
            fix(c, "install eerl and eerld of one release: they speak different protocols");
        else if (p->err == EERL_ETIMEDOUT || p->err == EERL_EPARSE)
            fix(c, "eerld is stopped, hung, or something else listens there: systemctl status "
                   "eerld and its log (journalctl -u eerld) say which; restart it (systemctl "
                   "restart eerld)");
        else if (p->from_env)
            fix(c, "start eerld (systemctl start eerld), or unset EERL_SOCKET to set clocks "
                   "in-process");
        else
            fix(c, "start eerld (systemctl start eerld), or remove its stale socket %s", p->path);
        return;
    }
    snprintf(mine, sizeof(mine), "eerld %s", eerl_version_string());
    if (strcmp(p->info.server, mine) != 0) {
        c = add(l, EERL_DOCTOR_WARNING, "eerld",
                "%s answers at %s (%u GPUs, sees uid %u), but this library is %s",
                p->info.server[0] ? p->info.server : "an unnamed eerld", p->path, p->info.gpus,
                p->info.uid, eerl_version_string());
        fix(c,
            "it speaks protocol %d as this library does, so runs work; install one eerl "
            "release for both when convenient",
            EERL_AGENT_PROTOCOL_VERSION);
        return;
    }
    add(l, EERL_DOCTOR_OK, "eerld", "%s answers at %s (protocol %d, %u GPUs, sees uid %u)",
        p->info.server, p->path, EERL_AGENT_PROTOCOL_VERSION, p->info.gpus, p->info.uid);
}

/* "0-3,5,7-9" of the GPUs nobody leases, into buf; the number of them. */
static unsigned free_gpus(const struct eerl_agent_gpu_status *st, size_t n, char *buf, size_t len)
{
    size_t i, used = 0, start;
    unsigned count = 0;

    buf[0] = '\0';
    for (i = 0; i < n; i++) {
        if (st[i].leased)
            continue;
        for (start = i; i + 1 < n && !st[i + 1].leased; i++)
            ;
        count += (unsigned)(i - start + 1);
        if (used < len)
            used +=
                (size_t)snprintf(buf + used, len - used, "%s%u", used ? "," : "", st[start].gpu);
        if (i > start && used < len)
            used += (size_t)snprintf(buf + used, len - used, "-%u", st[i].gpu);
    }
    return count;
}

/* "; leased now: 6 (uid 1001 pid 42), ..." into buf, or "" when nothing is leased. */
static void holders(const struct eerl_agent_gpu_status *st, size_t n, char *buf, size_t len)
{
    size_t i, used = 0, shown = 0, more = 0;

    buf[0] = '\0';
    for (i = 0; i < n; i++) {
        if (!st[i].leased)
            continue;
        if (shown == HOLDERS_SHOWN) {
            more++;
            continue;
        }
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%u (uid %u pid %u)",
                                     shown ? ", " : "; leased now: GPU ", st[i].gpu,
                                     st[i].holder_uid, st[i].holder_pid);
        shown++;
    }
    if (more && used < len)
        snprintf(buf + used, len - used, " and %zu more", more);
}

/* Which GPUs eerld would lease to this uid. The protocol answers "may this uid lease" for the
 * whole node (the policy has no per-GPU access), so the GPUs are those nobody holds now. */
static void check_lease(struct list *l, const struct probe *p)
{
    struct eerl_agent_gpu_status *st;
    struct eerl_doctor_check *c;
    char freelist[160], held[200];
    size_t n = 0;
    unsigned nfree;
    int e;

    if (!p->agent)
        return;
    if (!p->info.may_lease) {
        c = add(l, EERL_DOCTOR_ERROR, "eerld lease",
                "eerld's policy does not let uid %u lease GPUs: a controlling run through eerld "
                "is refused",
                p->info.uid);
        fix(c,
            "ask the node's admin to list this user or one of its groups under [access] in "
            "eerld's policy file (default /etc/eerl/eerld.conf); observe_only=True works without "
            "a lease");
        return;
    }
    st = calloc(p->info.gpus + 1, sizeof(*st));
    e = st ? eerl_agent_status(p->agent, st, p->info.gpus + 1, &n) : EERL_ENOMEM;
    if (e < 0) {
        c = add(l, EERL_DOCTOR_WARNING, "eerld lease",
                "eerld lets uid %u lease, but its status could not be read: %s (%s)", p->info.uid,
                eerl_strerror(e), eerl_agent_last_error(p->agent));
        fix(c, "eerl status shows the same; eerld's log (journalctl -u eerld) says why");
        free(st);
        return;
    }
    nfree = free_gpus(st, n, freelist, sizeof(freelist));
    holders(st, n, held, sizeof(held));
    if (nfree == 0) {
        c = add(l, EERL_DOCTOR_WARNING, "eerld lease",
                "eerld lets uid %u lease, but no GPU is free%s", p->info.uid, held);
        fix(c, "wait for those runs to end (eerl status shows them)");
    } else {
        add(l, EERL_DOCTOR_OK, "eerld lease",
            "eerld lets uid %u lease GPUs %s (its policy grants a user every GPU or none)%s",
            p->info.uid, freelist, held);
    }
    free(st);
}

/* CapEff of this process; -1 when /proc does not say. */
static int read_cap_eff(uint64_t *ret)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256], *end;
    unsigned long long v;
    int r = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "CapEff:", 7) != 0)
            continue;
        errno = 0;
        v = strtoull(line + 7, &end, 16);
        if (end != line + 7 && errno == 0) {
            *ret = v;
            r = 0;
        }
        break;
    }
    fclose(f);
    return r;
}

static void check_permission(struct list *l, const struct probe *p)
{
    const char *route =
        p->wanted ? "; sessions lock them through eerld while it is configured" : " in-process";
    unsigned uid = (unsigned)geteuid();
    struct eerl_doctor_check *c;
    uint64_t caps = 0;
    char capeff[40] = "CapEff unknown";
    int known = read_cap_eff(&caps) == 0;

    if (known)
        snprintf(capeff, sizeof(capeff), "CapEff %016llx", (unsigned long long)caps);
    if (uid == 0) {
        add(l, EERL_DOCTOR_OK, "permission",
            "running as root: privileged to lock clocks%s; whether the driver allows it is "
            "untested (NVML has no query that says so, and the doctor changes no clock)",
            route);
    } else if (known && (caps >> CAP_SYS_ADMIN_BIT & 1)) {
        add(l, EERL_DOCTOR_OK, "permission",
            "uid %u has CAP_SYS_ADMIN (%s): privileged to lock clocks%s; whether the driver "
            "allows it is untested (the doctor changes no clock)",
            uid, capeff, route);
    } else if (p->agent && p->info.may_lease) {
        add(l, EERL_DOCTOR_OK, "permission",
            "uid %u is neither root nor has CAP_SYS_ADMIN (%s), and needs neither: eerld locks "
            "the clocks it leases",
            uid, capeff);
    } else {
        c = add(l, EERL_DOCTOR_ERROR, "permission",
                "a controlling run cannot lock clocks: uid %u is not root, lacks CAP_SYS_ADMIN "
                "(%s), and %s",
                uid, capeff,
                !p->wanted  ? "no eerld runs here"
                : !p->agent ? "eerld does not answer"
                            : "eerld's policy does not let it lease");
        fix(c, "run eerld with a policy that lists this user (docs/eerld.md), or run as root or "
               "with CAP_SYS_ADMIN; observe_only=True (measure and trace, no clock change) works "
               "as is");
    }
}

int eerl_doctor_run(const char *socket, struct eerl_doctor_check *out, size_t cap, size_t *ret_n)
{
    struct list l = {out, cap, 0};
    eerl_device *dev, *via_eerld = NULL;
    struct probe p;

    if ((!out && cap) || !ret_n)
        return EERL_EINVAL;
    probe_eerld(socket, &p);
    add(&l, EERL_DOCTOR_OK, "library", "libeerl %s", eerl_version_string());
    dev = check_nvml(&l, &p);
    if (dev) {
        check_driver(&l, dev);
        check_gpus(&l, dev, "");
    } else if (p.agent && eerl_agent_device(p.agent, &via_eerld) == 0) {
        check_gpus(&l, via_eerld, " (read through eerld)");
    }
    eerl_device_free(via_eerld);
    eerl_device_free(dev);
    check_eerld(&l, &p);
    check_lease(&l, &p);
    check_permission(&l, &p);
    eerl_agent_free(p.agent);
    *ret_n = l.n < cap ? l.n : cap;
    return l.n > cap ? EERL_EOVERFLOW : 0;
}
