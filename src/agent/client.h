/* Internal: what the runtime (src/runtime/session.c, node.c) asks of an eerld connection beyond
 * include/eerl/agent.h, to notice a lost link and take its lease again (client.c, "Deadlines"). */
#ifndef EERL_AGENT_CLIENT_H
#define EERL_AGENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/agent.h"

/* The link's state: *ret_lost counts the connections lost so far (a missed deadline, a broken
 * stream), *ret_up is 1 while a connection is open. why (may be NULL) receives the last loss's
 * reason, "" when none. */
int eerl__agent_link(eerl_agent *a, uint64_t *ret_lost, int *ret_up, char *why, size_t why_len);

/* The eerl_agent behind a device of the "eerld" backend (eerl_agent_device); NULL for any
 * other device. */
eerl_agent *eerl__agent_of_device(eerl_device *dev);

/* The socket the connection dials (for messages). Owned by the handle. */
const char *eerl__agent_path(const eerl_agent *a);

#endif
