/* Workload drift scenarios by name (docs/twin.md, "Workload drift scenarios"): steady (the
 * preset's fitted drift, the default), growing, collapsing and step, their defaults for a run of
 * a given length, and setting one on a preset. The shapes themselves are workload.c's
 * (eerl__wl_scenario_at); this module owns only the names, the defaults and where each comes
 * from. Knows nothing of clocks. */
#ifndef EERL_TWIN_SCENARIO_H
#define EERL_TWIN_SCENARIO_H

#include "eerl/tools/twin.h"
#include "twin/workload.h"

/* "steady, growing, collapsing, step" (static). */
const char *eerl__wl_scenario_names(void);
/* The name of a kind ("?" for none). */
const char *eerl__wl_scenario_name(int kind);
/* A name to its kind; EERL_ENOENT for another name. */
int eerl__wl_scenario_parse(const char *name, int *ret_kind);

/* The scenario of a kind with its defaults for a run of `updates` updates: growing x2.5 over the
 * run, collapsing to x0.4 of the median and x0.5 of the spread with a 12-update time constant
 * (the H200 colocated-long run), step x2 at the run's middle. */
void eerl__wl_scenario_default(int kind, unsigned updates, struct eerl__wl_scenario *ret);

/* Gives the preset the scenario (its expected batches follow). EERL_EINVAL for an invalid one;
 * the preset is unchanged then. */
int eerl__preset_set_scenario(eerl_twin_preset *p, const struct eerl__wl_scenario *s);

#endif
