/* eerld's policy: who may lease GPUs, the clock floor and ceiling non-root clients may request
 * per GPU, and connection limits. Parsed from an INI file with libinih (docs/eerld.md has the
 * format). Owns the parsed policy; resolves user and group names only when a decision is asked
 * for (so the parser does no NSS lookups and a user added later is seen). Root (uid 0) may do
 * anything: lease, any clock, any number of connections. */
#ifndef EERLD_POLICY_H
#define EERLD_POLICY_H

#include <stddef.h>
#include <sys/types.h>

#define EERLD_POLICY_NAMES_MAX 256
#define EERLD_POLICY_NAME_LEN 32
#define EERLD_POLICY_GPUS_MAX 1024

struct eerld_policy {
    char users[EERLD_POLICY_NAMES_MAX][EERLD_POLICY_NAME_LEN + 1]; /* names or numeric uids */
    size_t n_users;
    char groups[EERLD_POLICY_NAMES_MAX][EERLD_POLICY_NAME_LEN + 1];
    size_t n_groups;
    unsigned max_connections, max_connections_per_user;
    unsigned floor_mhz, ceiling_mhz; /* for every GPU; 0: none */
    struct {
        unsigned floor_mhz, ceiling_mhz; /* 0: the [clocks] value */
    } gpu[EERLD_POLICY_GPUS_MAX];
};

/* The policy of a missing file: only root leases; default limits; no clock bounds. */
void eerld_policy_default(struct eerld_policy *p);

/* Parses INI text (len bytes, need not be NUL-terminated) into *p (filled with defaults first).
 * -1 on error with why naming the line, section, key and value. */
int eerld_policy_parse(const char *text, size_t len, struct eerld_policy *p, char *why,
                       size_t why_len);

/* Reads and parses a file; -1 on error (why says so, including a missing file, and a file or
 * directory owned by another user than root or writable by group or others). */
int eerld_policy_load(const char *path, struct eerld_policy *p, char *why, size_t why_len);

/* 1 if the peer may lease: root, a listed user, or a process whose group (gid) or one of whose
 * supplementary groups (groups, n_groups: the peer's own, from SO_PEERGROUPS, never the user's
 * groups in /etc/group) is listed. */
int eerld_policy_may_lease(const struct eerld_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                           size_t n_groups);

/* The floor and ceiling for gpu (0: none). */
void eerld_policy_bounds(const struct eerld_policy *p, unsigned gpu, unsigned *ret_floor,
                         unsigned *ret_ceiling);

#endif
