/* eerld's lease table: one row per GPU (its static facts, its actuator, who holds it, whether the
 * journal names it and whether a reset is pending), the policy that governs it, and the journal
 * writes that keep the table's promise: before a GPU's clock first changes under a lease the
 * journal names it (fsync'd); it leaves the journal only after its reset succeeded; a reset that
 * fails is retried every EERLD_RETRY_MS. Owns the rows and their actuators; borrows the device
 * handle and the state dir's fd. Used on the event loop's thread only, so it takes no locks.
 * A holder is whoever the caller says it is (a connection's identity, from SO_PEERCRED): the
 * table keeps a pointer to it while it holds a GPU and never frees it. */
#ifndef EERLD_LEASES_H
#define EERLD_LEASES_H

#include <stddef.h>
#include <sys/types.h>

#include "eerl/tools/actuator.h"
#include "eerl/device.h"
#include "eerl/tools/protocol.h"

#include "metrics.h"
#include "policy.h"

#define EERLD_RETRY_MS 1000

struct eerld_holder {
    uid_t uid;
    gid_t gid;
    pid_t pid;
    gid_t *groups; /* the peer's supplementary groups (SO_PEERGROUPS) */
    size_t n_groups;
    char client[EERL_AGENT_CLIENT_MAX + 1];
    unsigned n_leased; /* GPUs of the table it holds */
};

struct eerld_gpu {
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX];
    size_t n_clocks;
    eerl_actuator *act; /* one per GPU, so a GPU can be reset alone */
    struct eerld_holder *holder;
    unsigned holder_uid, holder_pid; /* of the holder, or the last one while dirty */
    int journaled;                   /* named in the journal */
    int dirty;                       /* a reset failed: retry */
};

struct eerld_leases {
    eerl_device *dev; /* borrowed */
    unsigned n;
    struct eerld_gpu *g;
    struct eerld_policy policy;
    int have_policy_file;
    const char *policy_path;
    int state_fd; /* borrowed: the checked and locked state dir */
    const char *state_dir;
    char why[512];
};

/* Reads every GPU of dev into the table (t's dev, state_fd, state_dir, policy_path set by the
 * caller). -1 (logged) if dev has no GPUs, too many, or an actuator cannot be made. */
int eerld_leases_load(struct eerld_leases *t);

/* Resets every GPU the journal names (all of them if it cannot be read), before anyone is
 * served, then writes the journal: -1 if the state dir is not writable. */
int eerld_leases_recover(struct eerld_leases *t);

/* Writes the journal: the GPUs marked journaled. -1 (logged, why in t->why) on failure. */
int eerld_leases_sync(struct eerld_leases *t);

/* Names gpus in the journal (one write) for h, before their clocks change. -1: none added. */
int eerld_leases_journal_add(struct eerld_leases *t, const struct eerld_holder *h,
                             const unsigned *gpus, size_t n);

/* Gives h the GPUs it does not hold yet (the caller checked none is held by another) and logs
 * the grant, as the ends of leases are logged. */
void eerld_leases_grant(struct eerld_leases *t, struct eerld_holder *h, const unsigned *gpus,
                        size_t n);

/* Ends the lease on GPU i (if any) and resets it. Returns 1 if the journal must be rewritten
 * (the caller syncs once for many). */
int eerld_leases_drop(struct eerld_leases *t, unsigned i, const char *why);

/* Ends every lease h holds (its GPUs reset at once), syncs the journal, and logs why. */
void eerld_leases_end_holder(struct eerld_leases *t, struct eerld_holder *h, const char *why);

/* After a policy reload: if h may no longer lease, logs it and ends its leases. Returns 1 if
 * the journal must be rewritten (pass it to eerld_leases_recheck_clocks). */
int eerld_leases_revoke(struct eerld_leases *t, struct eerld_holder *h);

/* After a policy reload: a clock locked outside the new floor or ceiling goes back to the
 * governor (the lease stays). Syncs the journal if changed. */
void eerld_leases_recheck_clocks(struct eerld_leases *t, int changed);

/* Retries the resets that failed (GPUs not held). */
void eerld_leases_retry(struct eerld_leases *t);

/* At exit, after every holder ended: resets what eerld changed and anything it was still
 * retrying, and writes the final journal. Returns 1 if a reset failed. */
int eerld_leases_shutdown(struct eerld_leases *t);

/* A snapshot of the lease state for the metrics file (malloc'd, t->n rows; NULL: no memory).
 * Its uuids point into the table. */
struct eerld_metrics_gpu *eerld_leases_snapshot(const struct eerld_leases *t);

/* Frees the actuators and the rows. */
void eerld_leases_free(struct eerld_leases *t);

#endif
