/* Helpers shared by the C tests: scratch directories and files, and the stand-in NVML state. */
#ifndef EERL_TESTUTIL_H
#define EERL_TESTUTIL_H

#include <stddef.h>

/* A fresh directory under $TMPDIR (or /tmp) for this test; removed by tu_cleanup(). */
const char *tu_tmpdir(void);
/* Writes text to dir/name and returns the path (static buffer, copy it if you keep it). */
const char *tu_write_file(const char *name, const char *text);
/* Reads a whole file into a malloc'd NUL-terminated string (NULL on failure). */
char *tu_read_file(const char *path);
/* Removes the scratch directory and everything in it. */
void tu_cleanup(void);

#include "eerl/core.h"
/* Table 3's defaults for the mode with the paper's strategy (EERL_STRATEGY_PAPER), for the
 * tests of that controller (the library's default strategy is eerl's). Static storage. */
const eerl_ctl_config *tu_paper_cfg(eerl_mode mode);

#endif
