/* A node of N idle simulated GPUs of one of the twin's GPU models, each with its own clock lock,
 * for eerld's `--devices twin:MODELxN` and its tests: no workload, no virtual time. Owns its GPU
 * table; borrows nothing from a twin (it copies what it needs out of a preset and frees it). */
#ifndef EERL_TWIN_IDLE_DEVICE_H
#define EERL_TWIN_IDLE_DEVICE_H

#include "eerl/device.h"

/* gpu: a twin GPU name ("h100", "gb200", "h200"; EERL_ENOENT otherwise), n: 1-1024 GPUs.
 * Clocks are the preset's supported list; an unlocked GPU reports the governor's peak clock,
 * a locked one its upper bound; power is the preset's idle draw at that clock; the energy
 * counter integrates it over CLOCK_MONOTONIC in whole millijoules, from a per-GPU offset. */
int eerl__twin_idle_device(const char *gpu, unsigned n, eerl_device **ret_dev);

#endif
