/* The parts of libeerl without a stability promise, as zstd keeps ZSTD_STATIC_LINKING_ONLY apart
 * from its stable API: they may change in any release, and a program that uses them should be
 * built against the same eerl version it runs with: the functions among them are in libeerl.a
 * only (libeerl.so exports the stable API).
 *
 * - The controller's research knobs: eerl_ctl_config's revisions of the paper's and eerl's own
 *   decision rules (a trace header names them; this eerl decides as the current ones only), and
 *   the start-up updates the paper's strategies leave out; eerl_ctl_describe (the whole
 *   struct, for trace headers); the predictor's forward test (Appendix B). In eerl/core.h,
 *   shown with EERL_EXPERIMENTAL.
 *
 * Include this header before any other eerl header (or define EERL_EXPERIMENTAL for the whole
 * build, as eerl itself does): eerl_ctl_config is one struct in a translation unit, and the
 * stable view of it is shorter. The stable headers are the rest: version.h, error.h, export.h,
 * runtime.h (the session a framework drives), core.h without these parts, agent.h (the eerld
 * client), device.h, meter.h, clock.h, estimate.h, doctor.h and options.h (the table of
 * options, whose experimental rows carry the research knobs by name). */
#ifndef EERL_EXPERIMENTAL_H
#define EERL_EXPERIMENTAL_H

#if defined(EERL_CORE_H) && !defined(EERL_CORE_H_EXPERIMENTAL)
#error "eerl/core.h was included without its experimental parts: include eerl/experimental.h first"
#endif
#ifndef EERL_EXPERIMENTAL
#define EERL_EXPERIMENTAL 1
#endif

#include "eerl/core.h"

#endif
