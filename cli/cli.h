/* The eerl command: one file per subcommand (cli/cmd_<name>.c), each exporting one entry point
 * listed in main.c's table, plus small parsing helpers (cli/util.c) shared by all of them.
 * Subcommands print; the library never does. Errors name the bad value and exit non-zero. */
#ifndef EERL_CLI_H
#define EERL_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "eerl/tools/twin.h"

/* Exit codes of the eerl command. */
#define EERL_EXIT_OK 0
#define EERL_EXIT_FAIL 1  /* the operation failed (device error, unwritable file, ...) */
#define EERL_EXIT_USAGE 2 /* bad arguments: the message names the value and the valid choices */
/* eerl replay: an older revision of the controller decided the trace; the eerl version that wrote
 * it replays it (docs/trace-format.md) */
#define EERL_EXIT_REVISION 3

int eerl_cmd_devices(int argc, char **argv);
int eerl_cmd_doctor(int argc, char **argv);
int eerl_cmd_lock(int argc, char **argv);
int eerl_cmd_reset(int argc, char **argv);
int eerl_cmd_status(int argc, char **argv);
int eerl_cmd_meter(int argc, char **argv);
int eerl_cmd_replay(int argc, char **argv);
int eerl_cmd_sweep(int argc, char **argv);
int eerl_cmd_sim(int argc, char **argv);
int eerl_cmd_analyze(int argc, char **argv);
/* `eerl analyze TRACE` on one trace: the run's own estimate (analyze_estimate.c). */
int eerl_cli_analyze_estimate(const char *path, const char *role, int json);
int eerl_cmd_report(int argc, char **argv);

/* "eerl <cmd>: " prefixed message on stderr, printf-style. */
void eerl_cli_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The note for a trace whose last line (line) is cut short: the whole lines before it were read. */
void eerl_cli_note_cut(const char *cmd, const char *path, size_t line);

/* Parses a non-negative integer in [min, max]; on failure prints an error naming `what` and the
 * bad text and returns -1. */
int eerl_cli_parse_uint(const char *cmd, const char *what, const char *text, unsigned long min,
                        unsigned long max, unsigned long *ret);
/* Parses a finite double in [min, max] the same way. */
int eerl_cli_parse_double(const char *cmd, const char *what, const char *text, double min,
                          double max, double *ret);
/* Parses "0,1,3" or "0-3" (or a mix) into ascending unique indices; at most cap of them. */
int eerl_cli_parse_index_list(const char *cmd, const char *what, const char *text, unsigned *out,
                              size_t cap, size_t *ret_n);

/* 1 when name is one of the names of a comma-separated list ("a, b, c"); "" is never. */
int eerl_cli_in_list(const char *name, const char *list);
/* A percentage for a table: "12.34%" (sign: "+1.20%"), or "-" when v is not finite. */
void eerl_cli_fmt_pct(char *buf, size_t len, double v, int sign);

/* Prints a --json result (one line, reals to 10 digits, "{}" if it cannot be dumped) and
 * releases it. j is a json_t *; void * keeps jansson out of this header. */
void eerl_cli_print_json(void *j);

/* One row of a comparison table: interval name, updates, setting, saving, throughput change. */
struct eerl_an_window;
void eerl_cli_window_row(const char *name, const struct eerl_an_window *w, const char *setting,
                         int name_w, int setting_w);

/* "1800/1305", or "1800/1305 idle 345" where a waiting pool has a clock of its own. */
struct eerl_setting;
const char *eerl_cli_setting_str(const struct eerl_setting *s, char *buf, size_t len);

/* The comparison tables `eerl sim` and `eerl analyze` print (docs/quickstart.md defines every
 * word): a line saying what the rows are, the rows (the verdict's figure first), the allowance
 * verdict (allowed_loss 0: none), the capture ratio and the per-seed table. exact: a seed's runs
 * did the same work (divergence 0); divergence < 0: unknown (traces of a real cluster). The
 * oracle (NULL: none) adds its row, the capture ratio and a capture column. */
struct eerl_an_result;
struct eerl_cli_oracle {
    const struct eerl_an_window *w;
    const struct eerl_setting *setting;
    const double *seed_saving_pct; /* per seed, in the result's seed order */
    /* The windowed oracle (NULL: none): its row and the capture against it. */
    const struct eerl_an_window *win;
    unsigned window, win_changes;
};
void eerl_cli_print_comparison(const struct eerl_an_result *res, int exact, double divergence,
                               double allowed_loss, const char *updates_desc,
                               const struct eerl_cli_oracle *oracle);

/* Checks what a command runs on the simulated cluster: model, GPU, mode, size ('S', 'M', 'L')
 * and allocation (one GPU count for colocated, GEN/TRAIN pool sizes otherwise, each at least
 * 1, at most max_gpus together). On an error prints a message naming the value and the valid
 * choices and returns -1; else 0 with the mode and pool sizes (training 0 for colocated). model
 * NULL: a model from a description file (--model-file), not checked here. */
int eerl_cli_twin_target(const char *cmd, const char *model, const char *gpu, const char *mode_s,
                         const char *size, const char *alloc, unsigned long max_gpus,
                         eerl_twin_mode *ret_mode, unsigned *ret_ng, unsigned *ret_nt);

/* The whole of a file, NUL-terminated (malloc'd; the caller frees it); NULL with errno set. */
char *eerl_cli_read_file(const char *path);

/* A preset from a model description file (eerl_twin_preset_describe, docs/twin.md) for gpu,
 * derived from the parameter file params_text (NULL: the built-in one). On a bad or unreadable
 * file prints the error, naming the field and its value, and returns EERL_EXIT_USAGE; else 0. */
int eerl_cli_model_file(const char *cmd, const char *path, const char *gpu, const char *params_text,
                        eerl_twin_preset **ret_preset);

/* Opens the device backend the command should use: NVML unless EERL_DEVICES says otherwise.
 * Prints a clear error and returns NULL on failure. */
struct eerl_device;
struct eerl_device *eerl_cli_open_devices(const char *cmd);

/* eerld (cli/cmd_status.c): connects to the daemon at path (NULL: $EERL_SOCKET, else the
 * default socket); prints a clear error and returns NULL on failure. */
struct eerl_agent;
struct eerl_agent *eerl_cli_connect_agent(const char *cmd, const char *path);
/* The device view through eerld; *ret_agent must be freed after the device. */
struct eerl_device *eerl_cli_open_agent_devices(const char *cmd, const char *path,
                                                struct eerl_agent **ret_agent);

#endif
