/* eerld's journal: the GPUs whose clocks eerld may have changed and not yet reset, kept in
 * STATE_DIR/journal.json so a restarted eerld (after SIGKILL, a crash, a reboot of the service)
 * resets them before it serves anyone. Written atomically (temp file, fsync, rename, fsync of
 * the directory) BEFORE the first change to a GPU, and again after its reset. Owns only the
 * file format; the daemon decides when to write. */
#ifndef EERLD_JOURNAL_H
#define EERLD_JOURNAL_H

#include <stddef.h>

#include "eerl/device.h"

struct eerld_journal_entry {
    unsigned gpu;
    char uuid[EERL_DEVICE_UUID_MAX];
    unsigned uid, pid;
};

/* Writes the journal in the state dir open as dfd (dir: its path, for messages). -1 on failure
 * with why (path and errno). */
int eerld_journal_write(int dfd, const char *dir, const struct eerld_journal_entry *e, size_t n,
                        char *why, size_t why_len);

/* A missing journal is 0 entries. A malformed one (a field missing or of the wrong type, a
 * uid that is not a number: never read as 0, root) or a symbolic link is -1 with why; the
 * caller then resets every GPU, which is what a journal could at most ask for. *ret is
 * malloc'd (free it). */
int eerld_journal_read(int dfd, const char *dir, struct eerld_journal_entry **ret, size_t *ret_n,
                       char *why, size_t why_len);

#endif
