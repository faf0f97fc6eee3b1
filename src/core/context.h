/* What a judge, a proposer or the life cycle sees of the controller: a const context. It reads
 * the configuration, the clock grid, the governor references and their predictor, the layout
 * and the update being decided on; it acts only through the record's calls (record.h) on
 * cx->rec, and reaches the proposer only through propose.h's calls. The controller's own struct
 * (controller.c) is named nowhere else, so no part of a strategy can read or write a field it
 * does not own (docs/internals/design.md, "The core's layout"). The controller fills the context at
 * construction and sets `update` before each observation. */
#ifndef EERL_CORE_CONTEXT_H
#define EERL_CORE_CONTEXT_H

#include <stdint.h>

#include "eerl/core.h"
#include "core/grid.h"
#include "core/predictor.h"
#include "core/record.h"
#include "core/refs.h"
#include "core/setting.h"

struct eerl__proposer_ops;

struct eerl__ctx {
    eerl_mode mode;
    int layout; /* enum eerl__layout: how an update's time is made of its parts */
    const eerl_ctl_config *cfg;
    const struct eerl__grid *grid;
    const struct eerl__refs *refs; /* the governor references and the predictor (refs->pred) */
    uint64_t update;               /* the update whose observation is being decided on */
    struct eerl__rec *rec;         /* the record: where every action goes */
    /* The strategy's proposer and its state (NULL: none), for propose.h's calls. */
    const struct eerl__proposer_ops *prop;
    void *pst;
};

#endif
