/* The energy meter: samples the power and energy counters of a set of GPUs and answers "how
 * much energy did these GPUs use between time A and time B", per GPU, per pool and in total.
 *
 * Two rates. Every tick reads power (cheap: microseconds per GPU); the energy counter (4 ms of CPU
 * per GPU and read on an H200) is read only every "energy interval" and at every mark. Between two
 * counter readings the counter's energy is shared out in proportion to the integrated power
 * samples, so energy between two marks is the counter's, and a time between counter readings gets
 * its share by the power's shape. docs/meter.md has the figures and the trade-off.
 *
 * Sampling entry points: eerl_meter_tick(m, now) reads power and, when the energy interval is
 * due, the counters, and stores a sample at time `now`; eerl_meter_tick_energy(m, now) always
 * reads the counters (a mark in virtual time); eerl_meter_mark(m, &now) marks a phase boundary in
 * real time (with the sampler thread running, the thread reads for it). A simulation ticks in
 * virtual time; eerl_meter_start() runs a thread that ticks every interval in real time. Between
 * samples the cumulative energy of each GPU is interpolated linearly, so a mark that falls between
 * two samples is exact when the power is constant between them. Anomalies (counter reset or stuck,
 * counter unsupported, GPU lost, a failed read, an interval outside the sampled range) never fail a
 * query: they are handled as docs/meter.md describes and reported in the reading's flags.
 *
 * Ownership: the meter borrows the device handle (the caller keeps it open until
 * eerl_meter_free). Thread safety: tick, tick_now and the queries may be called from any thread
 * at the same time; the device handle must not be used for reads from another thread while the
 * sampler runs unless the backend is thread-safe (NVML is). */
#ifndef EERL_METER_H
#define EERL_METER_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/clock.h"
#include "eerl/device.h"
#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eerl_meter eerl_meter;

/* A meter samples any number of GPUs; more than this is refused (EERL_EINVAL) as a count no
 * machine has, not a size the meter needs. Memory and the cost of a tick or a query grow
 * linearly with the GPUs (docs/meter.md has the figures). */
#define EERL_METER_GPUS_LIMIT (1u << 20)
/* The per-GPU arrays of an eerl_meter_reading hold the first this many GPUs of the query (its
 * totals, flags and peak cover them all); eerl_meter_energy_each gives every GPU's. */
#define EERL_METER_READING_GPUS 64
/* Sampling interval when 0 is given. */
#define EERL_METER_DEFAULT_INTERVAL_MS 200u
/* eerl_meter_set_energy_interval(m, EERL_METER_ENERGY_AUTO), the default: the energy interval is
 * EERL_METER_ENERGY_MIN_S, lengthened so that the scheduled counter reads cost at most
 * EERL_METER_ENERGY_CPU_BUDGET of one core (timed on the meter's own reads), up to
 * EERL_METER_ENERGY_MAX_S. On an H200 (4 ms a read) that is 8 s per GPU metered. */
#define EERL_METER_ENERGY_AUTO (-1.0)
#define EERL_METER_ENERGY_MIN_S 2.0
#define EERL_METER_ENERGY_MAX_S 120.0
#define EERL_METER_ENERGY_CPU_BUDGET 0.0005

/* Reading flags, per GPU and OR-ed over the reading. Each says something about how the energy of
 * the interval was obtained; a reading with no flags came from the energy counter alone. */
#define EERL_METER_RESET 0x1u /* the counter went backwards (driver reset); rebased, see docs */
#define EERL_METER_STUCK 0x2u /* the counter stopped moving while the GPU drew power */
#define EERL_METER_POWER 0x4u /* part of the energy is integrated power (trapezoid) */
#define EERL_METER_LOST 0x8u  /* the GPU was lost: nothing counted after its last good read */
#define EERL_METER_PARTIAL                                                                         \
    0x10u                       /* interval outside the samples: before the first sample not       \
                                 * counted, after the last extrapolated at the last power */
#define EERL_METER_MISSED 0x20u /* a read failed; the gap was interpolated across */
#define EERL_METER_SUSPECT                                                                         \
    0x40u /* the counter counted far less than power says over a stretch too short for the stuck   \
           * test (a fraction of a second): it may have stopped, the energy may be low */
#define EERL_METER_SLOWED                                                                          \
    0x80u /* the GPU slowed itself (NVML's hardware slowdown, hardware or software thermal         \
           * slowdown, hardware power brake): its time says nothing of a clock eerl set */
#define EERL_METER_LIMIT                                                                           \
    0x100u /* the enforced power limit changed (an operator, a power manager) */
#define EERL_METER_FLAGS_ALL 0x1ffu
/* The flags that make a reading unfit to judge a clock setting by: the GPU, not the setting,
 * decided its speed. */
#define EERL_METER_SELF_SLOWED (EERL_METER_SLOWED | EERL_METER_LIMIT)

/* Energy between two marks. Arrays are indexed by position in the query (gpu[i] is the device
 * index of entry i) and hold its first min(n_gpus, EERL_METER_READING_GPUS) GPUs. */
typedef struct eerl_meter_reading {
    double t0, t1;                          /* the interval asked for, seconds */
    size_t n_gpus;                          /* GPUs of the query (all of them in the totals) */
    unsigned gpu[EERL_METER_READING_GPUS];  /* device index */
    double joules[EERL_METER_READING_GPUS]; /* energy of that GPU over [t0, t1] */
    double peak_w[EERL_METER_READING_GPUS]; /* highest power sampled inside [t0, t1]; 0: none */
    unsigned gpu_flags[EERL_METER_READING_GPUS]; /* EERL_METER_* for that GPU */
    double total_joules;                         /* sum over the GPUs of the query */
    double peak_total_w;                         /* highest sum of simultaneous power samples */
    unsigned flags;                              /* OR of gpu_flags */
    size_t n_samples;                            /* samples taken inside [t0, t1] */
    /* Share of the samples inside [t0, t1] that read the clock event reasons at which a GPU of
     * the query was at its software power cap (NVML's SwPowerCap: a compute-bound phase at the
     * governor's clocks sits there, the normal state the training clock acts on); -1 where no
     * sample read them. */
    double capped_share;
} eerl_meter_reading;

/* Meters GPUs gpus[0..n_gpus-1] (1 to EERL_METER_GPUS_LIMIT device indices, distinct, each must
 * exist: EERL_ENODEV names the bad one in eerl_device_last_error) with a sampling interval of
 * interval_ms (0: 200 ms). The history kept is one hour of samples at that interval
 * (eerl_meter_set_history changes it). */
EERL_EXPORT int eerl_meter_new(eerl_device *dev, const unsigned *gpus, size_t n_gpus,
                               unsigned interval_ms, eerl_meter **ret_meter);

/* Stops the sampler thread if it runs, then frees. NULL is a no-op. In a forked child whose
 * parent runs the thread: frees memory only (no join, no inherited lock touched), and marks there
 * fail with EERL_ESTATE. */
EERL_EXPORT void eerl_meter_free(eerl_meter *m);

/* Keeps at least `seconds` of samples at the meter's interval (more samples than that are kept
 * when ticks come faster). Only before the first tick: EERL_ESTATE after. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_set_history(eerl_meter *m, double seconds);
#endif

/* The clock eerl_meter_tick_now() and the sampler thread use for timestamps (default
 * eerl_clock_monotonic). The thread always waits in real time. Only while the thread is stopped. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_set_clock(eerl_meter *m, eerl_clock_fn clock, void *clock_ctx);
#endif

/* How often ticks read the energy counters: every `seconds` (the first tick at or after the last
 * counter reading + seconds - half a sampling interval), 0 for every tick, or
 * EERL_METER_ENERGY_AUTO (the default; see above). Marks always read them, and restart the
 * count. Anything else (negative, NaN, infinite): EERL_EINVAL. Any time. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_set_energy_interval(eerl_meter *m, double seconds);
#endif

/* The energy interval in force now, in seconds (in auto mode: what the measured read cost gives
 * so far; EERL_METER_ENERGY_MIN_S before the first counter reading). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_energy_interval(eerl_meter *m, double *ret_seconds);
#endif

/* Reads every GPU's power, and the energy counters when the energy interval is due, and stores
 * the sample at now_s. Times must not decrease (EERL_EINVAL); a tick at the same time as the last
 * sample is ignored. Per-GPU read failures do not fail the tick: they are recorded and show up in
 * the flags of readings. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_tick(eerl_meter *m, double now_s);
#endif

/* A mark in virtual time: like eerl_meter_tick, but the energy counters are always read, so the
 * energy up to now_s is the counter's. At the time of the last sample (which read only power),
 * it reads the counters for that sample. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_tick_energy(eerl_meter *m, double now_s);
#endif

/* A mark in real time, for phase boundaries. ret_now_s (may be NULL) receives the mark's time
 * (the meter's clock): pass it to the queries.
 * While the sampler thread runs (eerl_meter_start) on the default clock (real time), a mark reads
 * no device: it takes the time,
 * queues it and returns (about a microsecond, whatever the number of GPUs); the thread stores a
 * sample at that time and reads the counters right after (marks within the quiet period of each
 * other share one reading; docs/meter.md), so the energy up to the mark is the counter's,
 * attributed to the mark's time by the power's shape. A query that ends at or after a mark not
 * yet served waits for that reading.
 * Without the thread, or on an injected clock (virtual time), it is eerl_meter_tick_energy at the
 * meter's clock on the caller's thread (under the tick lock, so it stays in order with other
 * ticks): one counter read per GPU (4 ms each on an H200). */
EERL_EXPORT int eerl_meter_mark(eerl_meter *m, double *ret_now_s);

/* Marks closer together than this (seconds; default EERL_METER_MARK_QUIET_S) share one counter
 * reading: the thread reads once no mark has come for this long, at the latest
 * EERL_METER_MARK_WAIT_MAX_S (or five quiet periods, if longer) after the first unserved one, at
 * once when a query waits, and at a scheduled tick that falls due. 0: as soon as the thread sees
 * a mark. EERL_EINVAL outside [0, 1] s. */
#define EERL_METER_MARK_QUIET_S 0.005
#define EERL_METER_MARK_WAIT_MAX_S 0.025
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_set_mark_quiet(eerl_meter *m, double seconds);
#endif

/* How many marks were made and how many counter readings (of every GPU) were taken for them. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_mark_stats(eerl_meter *m, uint64_t *ret_marks, uint64_t *ret_reads);
#endif

/* The same as eerl_meter_mark (its older name). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_tick_now(eerl_meter *m, double *ret_now_s);
#endif

/* Starts the sampler thread (EERL_ESTATE if it runs). It ticks at once (a meter with no sample
 * yet takes its first one on the caller's thread, before the thread starts), then every interval
 * on a fixed schedule, and serves marks. Signals are blocked in it. */
EERL_EXPORT int eerl_meter_start(eerl_meter *m);

/* Stops and joins the sampler thread; it wakes at once, serves the marks still queued, and
 * exits. EERL_ESTATE if it was not running. */
EERL_EXPORT int eerl_meter_stop(eerl_meter *m);

/* Energy of every metered GPU (the whole allocation) between t0 and t1 (t0 <= t1). EERL_ENODATA
 * when there is no sample after t0, or when t0 is older than the history still kept. */
EERL_EXPORT int eerl_meter_energy(eerl_meter *m, double t0, double t1, eerl_meter_reading *ret);

/* The same over a pool: the device indices gpus[0..n-1], each one the meter samples (else
 * EERL_ENODEV). */
EERL_EXPORT int eerl_meter_energy_gpus(eerl_meter *m, double t0, double t1, const unsigned *gpus,
                                       size_t n, eerl_meter_reading *ret);

/* The same for every GPU of a query of any size: ret_joules, ret_peak_w and ret_flags (each may
 * be NULL) receive n entries, one per GPU of gpus[0..n-1] (gpus NULL: every metered GPU in the
 * order eerl_meter_new got them, n must then be their count), untouched on failure; *ret gets
 * the totals (and its own arrays their first entries). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_energy_each(eerl_meter *m, double t0, double t1, const unsigned *gpus, size_t n,
                           double *ret_joules, double *ret_peak_w, unsigned *ret_flags,
                           eerl_meter_reading *ret);
#endif

/* Time of the latest sample, EERL_ENODATA before the first tick. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_meter_last_time(eerl_meter *m, double *ret_t);
#endif

/* Number of samples stored so far (including ones dropped from the history). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
size_t eerl_meter_sample_count(eerl_meter *m);
#endif

/* Writes the names of the flags ("reset,power") into buf (always NUL-terminated; "" for none).
 * Returns the length it needed, like snprintf. */
EERL_EXPORT int eerl_meter_flags_str(unsigned flags, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
