/* Internal: which component of a Unix socket's path refuses this process (like namei -l), so
 * that a refused connection (client.c) and eerl doctor (src/doctor/doctor.c) name the directory
 * or socket that refuses and the fix that helps, not a guess. */
#ifndef EERL_AGENT_PATH_ACCESS_H
#define EERL_AGENT_PATH_ACCESS_H

#include <limits.h>
#include <stddef.h>

struct eerl__path_refusal {
    char path[PATH_MAX]; /* the component that refuses */
    int is_socket;       /* 1: the socket (write refused), 0: a directory (search refused) */
    unsigned mode;       /* its permission bits */
    unsigned uid, gid;   /* its owner and group */
    unsigned me;         /* the caller's effective uid */
    int group_helps;     /* the caller is not in its group, and its group is let through */
};

/* 0 with *ret filled when a directory on path does not let this process (effective ids,
 * supplementary groups, ACLs) search it, or the socket does not let it write; EERL_ENOENT
 * when none refuses (or a component is missing). */
int eerl__path_refusal(const char *path, struct eerl__path_refusal *ret);

/* "the directory /run/eerl (mode 0700, owner root, group root) does not let uid 1000 through" */
void eerl__path_refusal_say(const struct eerl__path_refusal *r, char *buf, size_t len);

/* What fixes it: joining the group only where the group is let through. */
void eerl__path_refusal_fix(const struct eerl__path_refusal *r, char *buf, size_t len);

#endif
