/* Read-only access to a controller from code beside the core's decisions (the runtime's check
 * of how much of the update time the work explains, runtime/unexplained.c): the controller's
 * const context (context.h: configuration, grid, references with the predictor and its fit
 * options, mode and layout). Judges, proposers and the life cycle get the same context from the
 * controller itself; nothing outside controller.c sees the controller's struct. */
#ifndef EERL_CORE_CONTROLLER_H
#define EERL_CORE_CONTROLLER_H

#include "eerl/core.h"
#include "core/context.h"

const struct eerl__ctx *eerl__ctl_context(const eerl_ctl *ctl);

#endif
