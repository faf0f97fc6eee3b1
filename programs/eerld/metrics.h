/* node_exporter textfile metrics of eerld (docs/eerld.md): energy, power, SM clock, locked
 * clock and lease holder per GPU, labelled gpu="N",UUID="..." like DCGM-exporter. Writes the
 * whole file to PATH.tmp and renames it over PATH, so the exporter never reads half a file.
 * Owns nothing between calls. */
#ifndef EERLD_METRICS_H
#define EERLD_METRICS_H

#include "eerl/device.h"

struct eerld_metrics_gpu {
    const char *uuid;
    unsigned locked_max_mhz; /* 0: not locked by eerld */
    int leased;
    unsigned uid, pid;
};

/* Writes the file name in the directory open as dfd (path: the whole path, for messages): the
 * temp file name.tmp is created afresh (O_EXCL | O_NOFOLLOW), then renamed over name. -1 with
 * why on a write failure; a GPU that cannot be read just lacks that sample. */
int eerld_metrics_write(int dfd, const char *path, const char *name, eerl_device *dev,
                        const struct eerld_metrics_gpu *g, unsigned n, char *why, size_t why_len);

#endif
