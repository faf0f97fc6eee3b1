/* Argument parsing shared by the subcommands. Every failure prints what was wrong with the value.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include <jansson.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "eerl/tools/analysis.h"
#include "cli.h"

void eerl_cli_err(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "eerl %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void eerl_cli_note_cut(const char *cmd, const char *path, size_t line)
{
    fprintf(stderr,
            "eerl %s: note: %s:%zu: the last line is cut short (a write that did not finish: a "
            "full disk or a crash); every whole line before it is read\n",
            cmd, path, line);
}

int eerl_cli_parse_uint(const char *cmd, const char *what, const char *text, unsigned long min,
                        unsigned long max, unsigned long *ret)
{
    char *end = NULL;
    unsigned long v;

    if (!text || !*text || *text == '-' || *text == '+') {
        eerl_cli_err(cmd, "%s '%s' is not a non-negative integer", what, text ? text : "");
        return -1;
    }
    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno || *end) {
        eerl_cli_err(cmd, "%s '%s' is not a non-negative integer", what, text);
        return -1;
    }
    if (v < min || v > max) {
        eerl_cli_err(cmd, "%s %lu is out of range (%lu-%lu)", what, v, min, max);
        return -1;
    }
    *ret = v;
    return 0;
}

int eerl_cli_parse_double(const char *cmd, const char *what, const char *text, double min,
                          double max, double *ret)
{
    char *end = NULL;
    double v;

    if (!text || !*text) {
        eerl_cli_err(cmd, "%s is empty", what);
        return -1;
    }
    errno = 0;
    v = strtod(text, &end);
    if (errno || *end || !isfinite(v)) {
        eerl_cli_err(cmd, "%s '%s' is not a number", what, text);
        return -1;
    }
    if (v < min || v > max) {
        eerl_cli_err(cmd, "%s %g is out of range (%g to %g)", what, v, min, max);
        return -1;
    }
    *ret = v;
    return 0;
}

int eerl_cli_in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    const char *p = list;

    if (n == 0)
        return 0;
    while ((p = strstr(p, name)) != NULL) {
        int start = p == list || p[-1] == ' ';
        int end = p[n] == '\0' || p[n] == ',';
        if (start && end)
            return 1;
        p += n;
    }
    return 0;
}

void eerl_cli_print_json(void *j)
{
    char *text = json_dumps(j, JSON_REAL_PRECISION(10));

    printf("%s\n", text ? text : "{}");
    free(text);
    json_decref(j);
}

void eerl_cli_fmt_pct(char *buf, size_t len, double v, int sign)
{
    if (!isfinite(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, sign ? "%+.2f%%" : "%.2f%%", v);
}

int eerl_cli_twin_target(const char *cmd, const char *model, const char *gpu, const char *mode_s,
                         const char *size, const char *alloc, unsigned long max_gpus,
                         eerl_twin_mode *ret_mode, unsigned *ret_ng, unsigned *ret_nt)
{
    eerl_twin_mode mode;
    unsigned long a, b = 0;
    char *end;
    int slash;

    if (model && !eerl_cli_in_list(model, eerl_twin_model_names())) {
        eerl_cli_err(cmd, "unknown model '%s'; valid models: %s", model, eerl_twin_model_names());
        return -1;
    }
    if (!eerl_cli_in_list(gpu, eerl_twin_gpu_names())) {
        eerl_cli_err(cmd, "unknown GPU '%s'; valid GPUs: %s", gpu, eerl_twin_gpu_names());
        return -1;
    }
    if (eerl_twin_mode_parse(mode_s, &mode) < 0) {
        eerl_cli_err(cmd, "unknown mode '%s'; valid modes: %s", mode_s, eerl_twin_mode_names());
        return -1;
    }
    if (strlen(size) != 1 || !strchr("SML", size[0])) {
        eerl_cli_err(cmd, "unknown size '%s'; valid sizes: S, M, L", size);
        return -1;
    }
    errno = 0;
    a = strtoul(alloc, &end, 10);
    slash = *end == '/';
    if (slash) {
        if (end[1] < '0' || end[1] > '9')
            end = (char *)"?"; /* "8/", "8/-1", "8/ 2": malformed below */
        else
            b = strtoul(end + 1, &end, 10);
    }
    if (*alloc < '0' || *alloc > '9' || *end) {
        eerl_cli_err(cmd,
                     "--alloc '%s' is malformed; give a GPU count (32) or GEN/TRAIN pool sizes "
                     "(8/32)",
                     alloc);
        return -1;
    }
    if (a == 0 || (slash && b == 0)) {
        eerl_cli_err(cmd, "--alloc '%s' has a pool of 0 GPUs; each pool needs at least 1", alloc);
        return -1;
    }
    /* strtoul saturates at ULONG_MAX (errno ERANGE), far above max_gpus too. */
    if (errno || a > max_gpus || b > max_gpus - a) {
        if (errno)
            eerl_cli_err(cmd, "--alloc '%s': a pool size is out of range; at most %lu GPUs", alloc,
                         max_gpus);
        else
            eerl_cli_err(cmd,
                         "--alloc '%s' asks for %.0f GPUs; the simulated cluster takes at most "
                         "%lu (both pools together)",
                         alloc, (double)a + (double)b, max_gpus);
        return -1;
    }
    if ((mode == EERL_TWIN_COLOCATED) == slash) {
        eerl_cli_err(cmd,
                     mode == EERL_TWIN_COLOCATED
                         ? "allocation '%s' does not fit mode %s: generation and training share "
                           "the GPUs, give one count (e.g. 32)"
                         : "allocation '%s' does not fit mode %s: give GEN/TRAIN pool sizes "
                           "(e.g. 8/32)",
                     alloc, mode_s);
        return -1;
    }
    *ret_mode = mode;
    *ret_ng = (unsigned)a;
    *ret_nt = (unsigned)b;
    return 0;
}

void eerl_cli_window_row(const char *name, const struct eerl_an_window *w, const char *setting,
                         int name_w, int setting_w)
{
    char s[32], q[32], u[32];

    eerl_cli_fmt_pct(s, sizeof(s), w->saving_pct, 0);
    eerl_cli_fmt_pct(q, sizeof(q), w->dq_pct, 1);
    if (w->seeds == 0)
        snprintf(u, sizeof(u), "-");
    else if (w->updates == floor(w->updates))
        snprintf(u, sizeof(u), "%.0f", w->updates);
    else
        snprintf(u, sizeof(u), "%.1f", w->updates);
    printf("  %-*s %8s  %-*s %10s  %10s\n", name_w, name, u, setting_w, setting, s, q);
}

static int cmp_unsigned(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int eerl_cli_parse_index_list(const char *cmd, const char *what, const char *text, unsigned *out,
                              size_t cap, size_t *ret_n)
{
    size_t n = 0, i, k;
    const char *p = text;

    if (!text || !*text) {
        eerl_cli_err(cmd, "%s is empty; give indices like 0,1 or 0-3", what);
        return -1;
    }
    while (*p) {
        char *end;
        unsigned long a, b;

        if (*p < '0' || *p > '9')
            goto bad;
        a = strtoul(p, &end, 10);
        b = a;
        if (*end == '-') {
            p = end + 1;
            if (*p < '0' || *p > '9')
                goto bad;
            b = strtoul(p, &end, 10);
            if (b < a)
                goto bad;
        }
        if (b > 65535)
            goto bad;
        for (; a <= b; a++) {
            if (n >= cap) {
                eerl_cli_err(cmd, "%s '%s' names more than %zu entries", what, text, cap);
                return -1;
            }
            out[n++] = (unsigned)a;
        }
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    qsort(out, n, sizeof(*out), cmp_unsigned);
    for (i = 0, k = 0; i < n; i++)
        if (k == 0 || out[k - 1] != out[i])
            out[k++] = out[i];
    *ret_n = k;
    return 0;
bad:
    eerl_cli_err(cmd, "%s '%s' is malformed; give indices like 0,1 or 0-3", what, text);
    return -1;
}

struct eerl_device *eerl_cli_open_devices(const char *cmd)
{
    eerl_device *dev = NULL;
    char why[512] = "";
    int r = eerl_device_open_nvml_ex(why, sizeof(why), &dev);

    if (r < 0) {
        /* why already starts with "no NVIDIA driver: ..." for EERL_ENODRIVER. */
        if (r == EERL_ENODRIVER && why[0])
            eerl_cli_err(cmd, "%s", why);
        else
            eerl_cli_err(cmd, "%s%s%s", eerl_strerror(r), why[0] ? ": " : "", why);
        if (r == EERL_ENODRIVER && strstr(why, "not found"))
            fprintf(stderr, "  (set EERL_NVML_LIBRARY to the path of libnvidia-ml.so.1 if the "
                            "driver is installed somewhere unusual)\n");
        return NULL;
    }
    return dev;
}

const char *eerl_cli_setting_str(const eerl_setting *s, char *buf, size_t len)
{
    char g[40];

    eerl_an_setting_str(s, g, sizeof(g));
    if (s->idle_mhz)
        snprintf(buf, len, "%s idle %u", g, s->idle_mhz);
    else
        snprintf(buf, len, "%s", g);
    return buf;
}

/* One row; range: the fewest to the most updates the row counts in a seed ("27 to 29": a count
 * per seed, not update numbers), or NULL for the window's own count. */
static void cmp_row(const char *name, const char *range, const struct eerl_an_window *w,
                    const char *setting)
{
    char s[32], q[32], u[32];

    eerl_cli_fmt_pct(s, sizeof(s), w->saving_pct, 0);
    eerl_cli_fmt_pct(q, sizeof(q), w->dq_pct, 1);
    if (range)
        snprintf(u, sizeof(u), "%s", range);
    else if (w->seeds == 0)
        snprintf(u, sizeof(u), "-");
    else
        snprintf(u, sizeof(u), "%.0f", w->updates);
    printf("  %-28s %16s  %-20s %8s  %10s\n", name, u, setting, s, q);
}

static const char *range_str(const struct eerl_an_result *res, int after, char *buf, size_t n)
{
    double lo, hi;

    eerl_an_window_range(res, after, &lo, &hi);
    if (lo == hi)
        snprintf(buf, n, "%.0f", lo);
    else
        snprintf(buf, n, "%.0f to %.0f", lo, hi);
    return buf;
}

/* What the rows mean: exact (the runs of a seed did the same work) or normalized. */
static void print_rows_note(const struct eerl_an_result *res, int norm, double divergence,
                            const char *updates_desc)
{
    char dv[64];

    if (!norm) {
        printf("rows: the controller run against its seed's governor run, on the same work "
               "(exact); geometric means over seeds of updates %s\n",
               updates_desc);
        return;
    }
    if (divergence >= 0)
        snprintf(dv, sizeof(dv), "divergence %g", divergence);
    else
        snprintf(dv, sizeof(dv), "as real runs do");
    printf("rows: the runs of a seed differ in their work (%s); \"normalized\" rows score the "
           "controller runs against a governor model fitted on the %u governor runs' work "
           "(Appendix E), the verdict's figure; \"matched seeds\" rows compare each "
           "controller run with its seed's governor run as they ran; geometric means over "
           "seeds of updates %s\n",
           dv, res->norm_governors, updates_desc);
}

/* The table of intervals: whole run, before and after the lock, the oracles. */
static void print_intervals(const struct eerl_an_result *res, int norm,
                            const struct eerl_cli_oracle *oracle)
{
    char set[64], o2[96], r1[32], r2[32];

    printf("\n  %-28s %16s  %-20s %8s  %10s\n", "interval", "updates per seed", "gen/train MHz",
           "saving", "throughput");
    if (res->lock_same)
        eerl_cli_setting_str(&res->lock_setting, set, sizeof(set));
    else
        snprintf(set, sizeof(set), res->any_locked ? "varies" : "(no lock)");
    range_str(res, 0, r1, sizeof(r1));
    range_str(res, 1, r2, sizeof(r2));
    if (!norm) {
        cmp_row("whole run", NULL, &res->whole, "varies");
        cmp_row("before lock", r1, &res->before, "varies");
        cmp_row("after lock", r2, &res->after, set);
    } else {
        cmp_row("whole run, normalized", NULL, &res->norm_whole, "varies");
        cmp_row("after lock, normalized", r2, &res->norm_after, set);
        cmp_row("whole run, matched seeds", NULL, &res->whole, "varies");
        cmp_row("before lock, matched seeds", r1, &res->before, "varies");
        cmp_row("after lock, matched seeds", r2, &res->after, set);
    }
    if (!oracle)
        return;
    eerl_cli_setting_str(oracle->setting, o2, sizeof(o2));
    cmp_row("oracle (best static)", NULL, oracle->w, o2);
    if (oracle->win) {
        char lbl[64], ch[32];

        snprintf(lbl, sizeof(lbl), "oracle (a setting per %u)", oracle->window);
        if (oracle->win_changes)
            snprintf(ch, sizeof(ch), "%u change%s", oracle->win_changes,
                     oracle->win_changes == 1 ? "" : "s");
        else
            snprintf(ch, sizeof(ch), "held static");
        cmp_row(lbl, NULL, oracle->win, ch);
    }
}

/* The verdict on the allowance, the capture ratios, the governors' own spread. */
static void print_verdict(const struct eerl_an_result *res, const struct eerl_an_window *vw,
                          int norm, double allowed_loss, const struct eerl_cli_oracle *oracle)
{
    if (allowed_loss > 0)
        printf("  allowance (%g%%) on the %swhole run: %s (throughput %+.2f%%)\n",
               allowed_loss * 100, norm ? "normalized " : "",
               isfinite(vw->dq_pct) && vw->dq_pct >= -100 * allowed_loss ? "met" : "NOT met",
               vw->dq_pct);
    if (oracle) {
        if (oracle->w->saving_pct > 0) {
            double c = vw->saving_pct / oracle->w->saving_pct;

            printf("  capture ratio (controller saving / oracle saving): %.2f%s\n", c,
                   c > 1.0 ? " (above 1.0: more than the best static setting saves, as a "
                             "controller that follows a drifting run can)"
                           : "");
        } else {
            printf("  capture ratio: - (the oracle saves nothing)\n");
        }
        if (oracle->win && oracle->win->saving_pct > 0)
            printf("  capture against the windowed oracle (a setting per %u updates): %.2f\n",
                   oracle->window, vw->saving_pct / oracle->win->saving_pct);
        else if (oracle->win)
            printf("  capture against the windowed oracle: - (it saves nothing)\n");
    }
    if (norm)
        printf("  the governor runs' own spread against their model: %.2f%% in time, %.2f%% in "
               "energy\n",
               res->gov_time_spread_pct, res->gov_energy_spread_pct);
}

/* One row per seed: its lock, whole run and after the lock, its capture. */
static void print_seeds(const struct eerl_an_result *res, int norm,
                        const struct eerl_cli_oracle *oracle)
{
    char set[64];
    size_t k;

    printf("\n  %-6s %-20s %-7s %21s %21s\n", "", "lock", "",
           norm ? "- whole, matched -" : "--- whole run ---", "--- after lock ---");
    printf("  %-6s %-20s %-7s %10s %10s %10s %10s%s\n", "seed", "gen/train MHz", "after", "saving",
           "throughput", "saving", "throughput", oracle ? "  capture" : "");
    for (k = 0; k < res->n_seeds; k++) {
        const struct eerl_an_seed *sd = &res->seed[k];
        char s1[32], s2[32], s3[32], s4[32], at[32], cap[32] = "";

        eerl_cli_fmt_pct(s1, sizeof(s1), sd->whole.saving_pct, 0);
        eerl_cli_fmt_pct(s2, sizeof(s2), sd->whole.dq_pct, 1);
        eerl_cli_fmt_pct(s3, sizeof(s3), sd->after.saving_pct, 0);
        eerl_cli_fmt_pct(s4, sizeof(s4), sd->after.dq_pct, 1);
        if (sd->locked) {
            eerl_cli_setting_str(&sd->lock_setting, set, sizeof(set));
            snprintf(at, sizeof(at), "%llu", (unsigned long long)sd->lock_update);
        } else {
            snprintf(set, sizeof(set), "-");
            snprintf(at, sizeof(at), "-");
        }
        if (oracle && oracle->seed_saving_pct[k] > 0)
            snprintf(cap, sizeof(cap), "  %7.2f",
                     sd->whole.saving_pct / oracle->seed_saving_pct[k]);
        else if (oracle)
            snprintf(cap, sizeof(cap), "  %7s", "-");
        printf("  %-6llu %-20s %-7s %10s %10s %10s %10s%s\n", (unsigned long long)sd->seed, set, at,
               s1, s2, s3, s4, cap);
    }
    printf("  (lock after: the update whose measurement locked the setting; the after-lock rows "
           "count the updates after it)\n");
}

void eerl_cli_print_comparison(const struct eerl_an_result *res, int exact, double divergence,
                               double allowed_loss, const char *updates_desc,
                               const struct eerl_cli_oracle *oracle)
{
    const struct eerl_an_window *vw = eerl_an_verdict_window(res, exact);
    int norm = vw != &res->whole;

    print_rows_note(res, norm, divergence, updates_desc);
    print_intervals(res, norm, oracle);
    printf("\n");
    print_verdict(res, vw, norm, allowed_loss, oracle);
    print_seeds(res, norm, oracle);
}

char *eerl_cli_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    struct stat st;
    long len;

    if (!f)
        return NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR; /* else fseek/ftell give a size that makes malloc fail: ENOMEM */
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)len + 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        } else if (buf) {
            buf[len] = '\0';
        }
    }
    fclose(f);
    return buf;
}

int eerl_cli_model_file(const char *cmd, const char *path, const char *gpu, const char *params_text,
                        eerl_twin_preset **ret_preset)
{
    char why[256] = "";
    char *text = eerl_cli_read_file(path);
    int e;

    if (!text) {
        eerl_cli_err(cmd, "cannot read model file '%s': %s", path, strerror(errno));
        return EERL_EXIT_USAGE;
    }
    e = eerl_twin_preset_describe(text, gpu, params_text, why, sizeof(why), ret_preset);
    free(text);
    if (e < 0) {
        eerl_cli_err(cmd, "model file '%s': %s", path, why[0] ? why : eerl_strerror(e));
        return EERL_EXIT_USAGE;
    }
    return 0;
}
