/* A prior from earlier jobs (docs/controller.md "Starting from earlier jobs: the prior"): the
 * states earlier jobs saved (eerl_rt_save_state), read from a file or a directory and handed to
 * the controller (eerl_ctl_set_prior), which picks the entries of this job's key. The format and
 * its checks are the saved state's own (core/save.c); the files are read by resume.c's reader.
 * This module only finds the files. Owns nothing beyond one call. */
#ifndef EERL_RUNTIME_PRIOR_H
#define EERL_RUNTIME_PRIOR_H

#include <stddef.h>

#include "eerl/core.h"

/* Reads the prior at path into ctl (fresh, before its first update): a saved state file, or a
 * directory whose files named *.state and whose subdirectories' eerl-controller.state (the
 * checkpoint directories of earlier jobs) are its entries. Each file's type and size are checked
 * before it is read: what cannot be a saved state (another type, empty, bigger than any state)
 * is skipped, and of more than 4096 states the most recently written 4096 are read; detail says
 * what was skipped. Names that are no state (a README) are ignored. 0: a prior was taken (detail:
 * how many entries matched, at what setting); 1: no entry matches this job, or the directory holds
 * none (detail says which; the controller's first events say so too); EERL_EINVAL, EERL_EIO,
 * EERL_EPARSE with detail naming the path for a path that does not exist or cannot be read, or
 * an entry that is not a saved state. */
int eerl__prior_load(eerl_ctl *ctl, const char *tag, const char *path, char *detail,
                     size_t detail_len);

#endif
