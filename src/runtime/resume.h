/* Resume: the controller's learned state in a file next to the training
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
/* The most bytes a saved state file can hold: a bigger file is none (and is not read). */
size_t eerl__resume_max(void);
/* Reads a saved state file into a malloc'd buffer (*ret_buf, *ret_len; the caller frees).
 * 0; 1 when there is no file (why: "no saved state at 'path': fresh search"); EERL_EIO,
 * EERL_EPARSE (empty, not a regular file, bigger than eerl__resume_max) or EERL_ENOMEM with why
 * naming the file. */
int eerl__resume_read(const char *path, unsigned char **ret_buf, size_t *ret_len, char *why,
                      size_t why_len);
/* Restores buf (read from path, named in why) into a controller that has not observed yet.
 * 0 when it resumed; 1 when the controller starts a fresh search instead: the state was learned
 * on another GPU model, allocation, clock list, mode, strategy, configuration or eerl version,
 * or the strategy does not resume (why says which, and the controller's first events carry a
 * "resume refused" record); EERL_EPARSE for a damaged state; EERL_ESTATE when the controller
 * has observed already. */
int eerl__resume_apply(eerl_ctl *ctl, const char *tag, const void *buf, size_t len,
                       const char *path, char *why, size_t why_len);
/* eerl__resume_read then eerl__resume_apply: 0 resumed, 1 fresh search (no file, or the state
 * was learned elsewhere), EERL_E* on an unreadable or damaged file or a controller that has
 * observed already. */
int eerl__resume_load(eerl_ctl *ctl, const char *tag, const char *path, char *why, size_t why_len);

#endif
