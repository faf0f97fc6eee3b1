/* eerld's lease table and its journal writes (see leases.h). The rules it keeps:
 * - A GPU has at most one holder. Every way a lease ends (release, reset, the holder's
 *   connection closing for any reason, a policy reload that bars it) resets the GPU's clocks at
 *   once.
 * - The journal names a GPU before its clock first changes under a lease (journal_add, called
 *   by the handlers before they set a clock) and drops it only after its reset succeeded; a
 *   failed reset keeps it there, marked dirty, and eerld_leases_retry tries again.
 * - Nothing here reads or writes a socket: the handlers and connections decide when. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"

#include "journal.h"
#include "leases.h"
#include "log.h"

int eerld_leases_sync(struct eerld_leases *t)
{
    struct eerld_journal_entry *e = calloc(t->n + 1, sizeof(*e));
    size_t k = 0;
    unsigned i;
    int r;

    if (!e) {
        snprintf(t->why, sizeof(t->why), "out of memory");
        return -1;
    }
    for (i = 0; i < t->n; i++) {
        if (!t->g[i].journaled)
            continue;
        e[k].gpu = i;
        snprintf(e[k].uuid, sizeof(e[k].uuid), "%s", t->g[i].uuid);
        e[k].uid = t->g[i].holder_uid;
        e[k].pid = t->g[i].holder_pid;
        k++;
    }
    r = eerld_journal_write(t->state_fd, t->state_dir, e, k, t->why, sizeof(t->why));
    free(e);
    if (r < 0)
        eerld_log(LOG_ERR, "%s", t->why);
    return r;
}

int eerld_leases_load(struct eerld_leases *t)
{
    unsigned i;
    int e;

    if ((e = eerl_device_count(t->dev, &t->n)) < 0) {
        eerld_log(LOG_ERR, "cannot count GPUs: %s (%s)", eerl_strerror(e),
                  eerl_device_last_error(t->dev));
        return -1;
    }
    if (t->n == 0) {
        eerld_log(LOG_ERR, "no GPUs found");
        return -1;
    }
    if (t->n > EERL_AGENT_GPUS_MAX) { /* the protocol names GPUs 0-1023 */
        eerld_log(LOG_ERR, "the node has %u GPUs; eerld serves at most %d (GPU indices 0-%d)", t->n,
                  EERL_AGENT_GPUS_MAX, EERL_AGENT_GPUS_MAX - 1);
        return -1;
    }
    t->g = calloc(t->n, sizeof(*t->g));
    if (!t->g)
        return -1;
    for (i = 0; i < t->n; i++) {
        struct eerld_gpu *g = &t->g[i];

        if (eerl_device_uuid(t->dev, i, g->uuid, sizeof(g->uuid)) < 0)
            snprintf(g->uuid, sizeof(g->uuid), "unknown-%u", i);
        if (eerl_device_name(t->dev, i, g->name, sizeof(g->name)) < 0)
            snprintf(g->name, sizeof(g->name), "unknown");
        if ((e = eerl_device_supported_sm_clocks(t->dev, i, g->clocks, EERL_DEVICE_CLOCKS_MAX,
                                                 &g->n_clocks)) < 0)
            eerld_log(LOG_WARNING, "GPU %u: cannot read supported clocks: %s (%s)", i,
                      eerl_strerror(e), eerl_device_last_error(t->dev));
        if ((e = eerl_actuator_new(t->dev, 0, &g->act)) < 0) {
            eerld_log(LOG_ERR, "GPU %u: %s", i, eerl_strerror(e));
            return -1;
        }
    }
    return 0;
}

/* Resets GPU i, which the journal (e, n, or every GPU when it could not be read) names; it
 * stays journaled and dirty if the reset fails. */
static void recover_gpu(struct eerld_leases *t, unsigned i, const struct eerld_journal_entry *e,
                        size_t n)
{
    struct eerld_gpu *g = &t->g[i];
    size_t k;

    g->journaled = 1;
    g->dirty = 1;
    for (k = 0; k < n; k++)
        if (!strcmp(e[k].uuid, g->uuid)) {
            g->holder_uid = e[k].uid;
            g->holder_pid = e[k].pid;
        }
    if (eerl_device_reset_sm_clocks(t->dev, i) == 0) {
        eerld_log(LOG_INFO, "journal: reset GPU %u (%s), left changed for uid %u pid %u", i,
                  g->uuid, g->holder_uid, g->holder_pid);
        g->journaled = 0;
        g->dirty = 0;
        return;
    }
    eerld_log(LOG_ERR, "journal: reset of GPU %u (%s) failed: %s; retrying", i, g->uuid,
              eerl_device_last_error(t->dev));
}

int eerld_leases_recover(struct eerld_leases *t)
{
    struct eerld_journal_entry *e = NULL;
    size_t n = 0, k;
    unsigned i;
    int all = 0;

    if (eerld_journal_read(t->state_fd, t->state_dir, &e, &n, t->why, sizeof(t->why)) < 0) {
        eerld_log(LOG_WARNING, "%s; resetting every GPU", t->why);
        all = 1;
    }
    for (i = 0; i < t->n; i++) {
        int named = all;

        for (k = 0; k < n && !named; k++)
            named = !strcmp(e[k].uuid, t->g[i].uuid);
        if (named)
            recover_gpu(t, i, e, n);
    }
    for (k = 0; k < n; k++) {
        for (i = 0; i < t->n; i++)
            if (!strcmp(e[k].uuid, t->g[i].uuid))
                break;
        if (i == t->n)
            eerld_log(LOG_WARNING, "journal names GPU %s (index %u), which is not present",
                      e[k].uuid, e[k].gpu);
    }
    free(e);
    return eerld_leases_sync(t); /* also proves the state dir is writable before serving */
}

int eerld_leases_journal_add(struct eerld_leases *t, const struct eerld_holder *h,
                             const unsigned *gpus, size_t n)
{
    size_t k;
    int need = 0;

    for (k = 0; k < n; k++) {
        struct eerld_gpu *g = &t->g[gpus[k]];

        if (!g->journaled) {
            g->journaled = 2; /* 2: added by this call, undone if the write fails */
            need = 1;
        }
        g->holder_uid = (unsigned)h->uid;
        g->holder_pid = (unsigned)h->pid;
    }
    if (!need)
        return 0;
    if (eerld_leases_sync(t) < 0) {
        for (k = 0; k < n; k++)
            if (t->g[gpus[k]].journaled == 2)
                t->g[gpus[k]].journaled = 0;
        return -1;
    }
    for (k = 0; k < n; k++)
        t->g[gpus[k]].journaled = 1;
    return 0;
}

void eerld_leases_grant(struct eerld_leases *t, struct eerld_holder *h, const unsigned *gpus,
                        size_t n)
{
    char msg[512] = "";
    size_t k;

    for (k = 0; k < n; k++) {
        struct eerld_gpu *g = &t->g[gpus[k]];
        size_t used = strlen(msg);

        if (g->holder == h)
            continue;
        g->holder = h;
        g->holder_uid = (unsigned)h->uid;
        g->holder_pid = (unsigned)h->pid;
        h->n_leased++;
        snprintf(msg + used, sizeof(msg) - used, "%s%u", used ? "," : "", gpus[k]);
    }
    if (msg[0]) /* grants are logged as their ends are (disconnect, release, reset) */
        eerld_log(LOG_INFO, "uid %u pid %u: leased GPU%s %s", (unsigned)h->uid, (unsigned)h->pid,
                  strchr(msg, ',') ? "s" : "", msg);
}

/* Resets gpu's clocks. Returns 1 if its journal entry can go (caller syncs the journal). */
static int reset_gpu(struct eerld_leases *t, unsigned i, const char *why)
{
    struct eerld_gpu *g = &t->g[i];
    int e = eerl_actuator_restore(g->act);

    if (e == 0 && g->dirty)
        e = eerl_device_reset_sm_clocks(t->dev, i);
    if (e < 0) {
        eerld_log(LOG_ERR, "GPU %u (%s): reset after %s failed: %s (%s); retrying every %d ms", i,
                  g->uuid, why, eerl_strerror(e), eerl_device_last_error(t->dev), EERLD_RETRY_MS);
        g->dirty = 1;
        return 0;
    }
    g->dirty = 0;
    return g->journaled;
}

int eerld_leases_drop(struct eerld_leases *t, unsigned i, const char *why)
{
    struct eerld_gpu *g = &t->g[i];
    int gone;

    if (g->holder) {
        g->holder->n_leased--;
        g->holder = NULL;
    }
    gone = reset_gpu(t, i, why);
    if (gone)
        g->journaled = 0;
    return gone;
}

/* Ends every lease of h. Returns 1 if the journal must be rewritten. */
static int drop_all(struct eerld_leases *t, struct eerld_holder *h, const char *why)
{
    unsigned i;
    int changed = 0;

    for (i = 0; i < t->n && h->n_leased; i++)
        if (t->g[i].holder == h)
            changed |= eerld_leases_drop(t, i, why);
    return changed;
}

void eerld_leases_end_holder(struct eerld_leases *t, struct eerld_holder *h, const char *why)
{
    int had = h->n_leased > 0;

    if (drop_all(t, h, why))
        eerld_leases_sync(t);
    if (had)
        eerld_log(LOG_INFO, "uid %u pid %u: %s; its GPUs are reset", (unsigned)h->uid,
                  (unsigned)h->pid, why);
}

int eerld_leases_revoke(struct eerld_leases *t, struct eerld_holder *h)
{
    if (!h->n_leased || eerld_policy_may_lease(&t->policy, h->uid, h->gid, h->groups, h->n_groups))
        return 0;
    eerld_log(LOG_INFO,
              "uid %u pid %u may no longer lease GPUs (policy %s reloaded): its "
              "leases end and its GPUs are reset",
              (unsigned)h->uid, (unsigned)h->pid, t->policy_path);
    return drop_all(t, h, "policy reload");
}

void eerld_leases_recheck_clocks(struct eerld_leases *t, int changed)
{
    unsigned i;

    for (i = 0; i < t->n; i++) {
        struct eerld_gpu *g = &t->g[i];
        eerl_actuator_gpu_state st;
        unsigned f, ce;

        if (!g->holder || g->holder->uid == 0)
            continue;
        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(g->act, i, &st);
        eerld_policy_bounds(&t->policy, i, &f, &ce);
        if (!st.locked_max_mhz || !((f && st.locked_min_mhz < f) || (ce && st.locked_max_mhz > ce)))
            continue;
        eerld_log(LOG_INFO,
                  "GPU %u: locked %u-%u MHz for uid %u pid %u is outside the reloaded policy's "
                  "%u-%u MHz: back to the default governor (the lease stays)",
                  i, st.locked_min_mhz, st.locked_max_mhz, g->holder_uid, g->holder_pid, f, ce);
        if (eerl_actuator_restore(g->act) < 0) {
            eerld_log(LOG_ERR, "GPU %u: reset failed: %s; retrying every %d ms", i,
                      eerl_actuator_last_error(g->act), EERLD_RETRY_MS);
            g->dirty = 1;
        }
    }
    if (changed)
        eerld_leases_sync(t);
}

void eerld_leases_retry(struct eerld_leases *t)
{
    unsigned i;
    int changed = 0;

    for (i = 0; i < t->n; i++) {
        struct eerld_gpu *g = &t->g[i];

        if (!g->dirty || g->holder)
            continue;
        if (eerl_device_reset_sm_clocks(t->dev, i) == 0) {
            eerld_log(LOG_INFO, "GPU %u (%s): reset succeeded on retry", i, g->uuid);
            g->dirty = 0;
            if (g->journaled) {
                g->journaled = 0;
                changed = 1;
            }
        }
    }
    if (changed)
        eerld_leases_sync(t);
}

int eerld_leases_shutdown(struct eerld_leases *t)
{
    unsigned i;
    int bad = 0;

    for (i = 0; i < t->n; i++) {
        struct eerld_gpu *g = &t->g[i];

        /* Everything eerld changed, and anything it was still retrying. */
        if (!g->journaled && !g->dirty)
            continue;
        if (eerl_device_reset_sm_clocks(t->dev, i) == 0) {
            g->journaled = 0;
            g->dirty = 0;
        } else {
            eerld_log(LOG_ERR,
                      "GPU %u (%s): reset at exit failed: %s; it stays in the "
                      "journal for the next start",
                      i, g->uuid, eerl_device_last_error(t->dev));
            bad = 1;
        }
    }
    eerld_leases_sync(t);
    return bad;
}

struct eerld_metrics_gpu *eerld_leases_snapshot(const struct eerld_leases *t)
{
    struct eerld_metrics_gpu *m = calloc(t->n, sizeof(*m));
    unsigned i;

    for (i = 0; m && i < t->n; i++) {
        eerl_actuator_gpu_state st;

        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(t->g[i].act, i, &st);
        m[i].uuid = t->g[i].uuid;
        m[i].locked_max_mhz = st.locked_max_mhz;
        m[i].leased = t->g[i].holder != NULL;
        m[i].uid = t->g[i].holder_uid;
        m[i].pid = t->g[i].holder_pid;
    }
    return m;
}

void eerld_leases_free(struct eerld_leases *t)
{
    unsigned i;

    for (i = 0; t->g && i < t->n; i++)
        eerl_actuator_free(t->g[i].act);
    free(t->g);
    t->g = NULL;
}
