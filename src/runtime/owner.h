/* The in-process clock owner (owner.c): an eerl_rt_clock_owner over one eerl_actuator. The
 * session creates one when its configuration names no owner; the simulated-cluster driver
 * creates one itself to watch what the session locks. The owner owns its actuator. */
#ifndef EERL_RUNTIME_OWNER_H
#define EERL_RUNTIME_OWNER_H

#include <stdio.h>

#include "eerl/tools/actuator.h"
#include "eerl/runtime.h"

struct eerl__rt_owner;

int eerl__rt_owner_new(eerl_device *dev, int observe_only, struct eerl__rt_owner **ret);
/* Claims gpus (device indices) for this owner in the process-wide list (owner.c): EERL_EBUSY,
 * with why naming the GPU and the session's pid, when another live owner of this process (or of
 * the parent, in a forked child) drives one of them. Released by eerl__rt_owner_free. */
int eerl__rt_owner_claim(struct eerl__rt_owner *o, const unsigned *gpus, size_t n, char *why,
                         size_t why_len);
const eerl_rt_clock_owner *eerl__rt_owner_iface(struct eerl__rt_owner *o);
eerl_actuator *eerl__rt_owner_actuator(struct eerl__rt_owner *o);
/* Restores what the actuator still holds, then frees. NULL is a no-op. */
void eerl__rt_owner_free(struct eerl__rt_owner *o);

#endif
