/* Resume (issue 9 item 6): the controller's learned state in a file next to the training
 * checkpoint. The bytes come from eerl_ctl_save / go to eerl_ctl_restore (core/ does no I/O);
 * this module only writes them atomically (temporary file, fsync, rename: a crash mid-save
 * leaves the previous state) and reads them back. Owns nothing beyond one call. */
#ifndef EERL_RUNTIME_RESUME_H
#define EERL_RUNTIME_RESUME_H

#include <stddef.h>

#include "eerl/core.h"

/* The file name used inside a checkpoint directory. */
#define EERL__RESUME_FILE "eerl-controller.state"

/* dir/EERL__RESUME_FILE into buf; EERL_EOVERFLOW if it does not fit. */
int eerl__resume_path(const char *dir, char *buf, size_t len);
/* Saves ctl's learned state (see eerl_ctl_save for tag) to path. 0 or EERL_E* with why. */
int eerl__resume_save(const eerl_ctl *ctl, const char *tag, const char *path, char *why,
                      size_t why_len);
/* Loads path into a controller that has not observed yet. Returns 0 when it resumed; 1 when it
 * starts a fresh search instead (no file, or the state was learned on another GPU model,
 * allocation, mode or strategy: why says which); EERL_E* on an unreadable or damaged file, a
 * strategy that does not resume (EERL_ENOTSUP) or a controller that has observed already. */
int eerl__resume_load(eerl_ctl *ctl, const char *tag, const char *path, char *why, size_t why_len);

#endif
