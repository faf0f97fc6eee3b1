/* The parts of libeerl without a stability promise, as zstd keeps ZSTD_STATIC_LINKING_ONLY apart
 * from its stable API: they may change in any release, and a program that uses them should be
 * built against the same eerl version it runs with: the functions among them are in libeerl.a
 * only (libeerl.so exports the stable API).
 *
 * - In eerl/core.h: eerl_ctl_describe (the construction arguments, for trace headers), the
 *   predictor's forward test (Appendix B), the name parsers and a few helpers.
 * - In eerl/options.h: eerl_ctl_set_option and eerl_ctl_get_option, which set and read the
 *   controller's research knobs by name: the experimental options of the table (flagged
 *   EERL_OPTION_EXPERIMENTAL): the revisions of the paper's and eerl's own decision rules (a
 *   trace header names them; this eerl decides as the current ones only) and the start-up
 *   updates the paper's strategies leave out. They are fields of no public struct, so
 *   eerl_ctl_config is the same struct in the stable and the experimental view.
 * - In eerl/meter.h, eerl/agent.h, eerl/device.h and eerl/doctor.h: what only eerl's own tools
 *   call (the meter's manual ticks, eerld's admin calls, the raw clock locks).
 *
 * Include this header before any other eerl header (or define EERL_EXPERIMENTAL for the whole
 * build, as eerl itself does): each header shows its experimental declarations only when it is
 * first included with EERL_EXPERIMENTAL defined. The stable headers are the rest: version.h,
 * error.h, export.h, runtime.h (the session a framework drives), core.h, agent.h (the eerld
 * client), device.h, meter.h, clock.h, estimate.h, doctor.h and options.h (the table of
 * options), without these parts. */
#ifndef EERL_EXPERIMENTAL_H
#define EERL_EXPERIMENTAL_H

#if !defined(EERL_EXPERIMENTAL) &&                                                                 \
    (defined(EERL_CORE_H) || defined(EERL_OPTIONS_H) || defined(EERL_METER_H) ||                   \
     defined(EERL_AGENT_H) || defined(EERL_DEVICE_H) || defined(EERL_DOCTOR_H))
#error                                                                                             \
    "an eerl header was included before eerl/experimental.h, without its experimental declarations: include eerl/experimental.h first"
#endif
#ifndef EERL_EXPERIMENTAL
#define EERL_EXPERIMENTAL 1
#endif

#include "eerl/core.h"
#include "eerl/options.h"

#endif
