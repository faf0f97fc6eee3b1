/* The controller's learned state in bytes (eerl_ctl_save, eerl_ctl_restore):
 * the header that says what it was learned on, the governor references, whether it locked and
 * at what, and a checksum. save.c owns the format (the magic, its version letter, the hash of
 * the decision settings) and every check a saved state must pass; the controller (controller.c)
 * calls it and hands the result to its judge. Reads the controller through a const context;
 * writes only through the record (the references, the HOLD event of a refusal). */
#ifndef EERL_CORE_SAVE_H
#define EERL_CORE_SAVE_H

#include <stddef.h>

#include "eerl/core.h"
#include "core/context.h"

/* The state format this eerl writes (the last letter of its magic); 2 is read too. */
#define EERL__SAVE_FORMAT "3"
/* The longest tag (with its terminating 0). */
#define EERL__SAVE_TAG 64

/* Writes the state of cx (tag: at most EERL__SAVE_TAG - 1 characters) into buf; EERL_EOVERFLOW
 * with *ret_len the size needed when buf is NULL or cap is short. */
int eerl__save(const struct eerl__ctx *cx, const char *tag, void *buf, size_t cap, size_t *ret_len);

/* A saved state that passed every check. */
struct eerl__saved {
    int locked;
    eerl_setting locked_setting; /* snapped to this controller's clocks */
    int unchecked;               /* state format 2: no checksum */
};

/* Reads a saved state into a fresh controller (the caller has checked that it has not
 * observed): checks the bytes and that the state was learned on this hardware, mode, strategy
 * and configuration, then adds its most recent references to the record. resumes: the judge can
 * resume. A state this controller cannot take is refused: the HOLD event "resume refused: <why>"
 * is emitted about *next, *ret_refused is set, and EERL_EVERSION, EERL_ESTATE or EERL_ENOTSUP
 * returned; EERL_EPARSE (nothing emitted, nothing added) for bytes that are not a saved state or
 * are damaged. why says which. */
int eerl__restore(const struct eerl__ctx *cx, int resumes, const char *tag, const void *buf,
                  size_t len, const eerl_setting *next, struct eerl__saved *ret, int *ret_refused,
                  char *why, size_t why_len);

/* One saved state read as an entry of a prior (eerl_ctl_set_prior): the same checks as a
 * restore (bytes, version, references, and the key: tag, mode, strategy, groups, clocks,
 * configuration), and it must hold a lock. Nothing is emitted or added. Returns 0 with *ret
 * filled, 1 when the entry does not match this job (why says how), EERL_EPARSE for bytes that
 * are not a saved state or are damaged. */
struct eerl__prior_in {
    eerl_setting s;           /* the saved lock, snapped to this controller's clocks */
    double tpt_sum, tpt_sum2; /* the saved governor references' time per valid token (s) */
    unsigned n;               /* and their count */
};
int eerl__prior_entry(const struct eerl__ctx *cx, const char *tag, const void *buf, size_t len,
                      struct eerl__prior_in *ret, char *why, size_t why_len);

#endif
