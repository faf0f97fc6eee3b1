/* eerl report: pictures of runs from their traces, drawn by gnuplot (Debian gnuplot-nox) into a
 * PNG or SVG chosen by the output's extension. With a controller trace, five panels: the clocks
 * per update of the controller run with calibration, trials, confirmation and the lock marked
 * (the paper's Figure 4); the throughput, power and energy-per-token change against the matched
 * governor run with the allowance as a line (per update and over the whole run); the power per
 * phase under the governor and the controller (Figure 1); the throughput, power and
 * energy-per-token change per setting the controller ran (Figure 2); the energy per valid token
 * of every run. With governor (observe-only) traces alone, what a first run on a cluster shows:
 * power and energy per phase per update and the energy per valid token. Data and script go to a
 * private temporary directory; the picture is written there and moved into place only when
 * gnuplot succeeded, so a failure leaves nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eerl/error.h"
#include "cli.h"
#include "runtime/analysis.h"

#define CMD "report"
#define TRACES_MAX 64

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl report TRACE... [-o FILE.png|FILE.svg]\n\n"
            "Draws, from runtime traces (eerl sim --trace DIR, eerl.Session(trace=...)), with\n"
            "gnuplot, into FILE (default: the first trace's name with .png). With a controller\n"
            "trace:\n"
            "  1. the generation and training clocks per update of the first controller run,\n"
            "     with calibration shaded, trials, confirmations and the lock marked;\n"
            "  2. throughput, power and energy-per-token change against the governor run of the\n"
            "     same seed, per update (5-update moving average) and over the whole run, with\n"
            "     the allowance as a line;\n"
            "  3. power per phase under the governor and the controller (the paper's Figure 1);\n"
            "  4. throughput, power and energy-per-token change per setting the controller ran\n"
            "     (Figure 2);\n"
            "  5. energy per valid training token over updates for every run.\n"
            "With governor (observe-only) traces only: power and energy per phase per update of\n"
            "the first, and energy per valid token of every run.\n"
            "Governor traces are paired with controller traces by seed. Example:\n"
            "  eerl sim --trace runs && eerl report runs/*.jsonl -o runs.png\n");
}

static const char *ext_of(const char *path)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    return (dot && (!slash || dot > slash)) ? dot + 1 : "";
}

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    FILE *a = fopen(from, "rb"), *b;
    size_t n;
    int ok = 1;

    if (!a)
        return -1;
    b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        if (fwrite(buf, 1, n, b) != n) {
            ok = 0;
            break;
        }
    fclose(a);
    if (fclose(b) != 0 || !ok) {
        remove(to);
        return -1;
    }
    return 0;
}

static void rm_dir(const char *dir)
{
    static const char *const names[] = {"clocks.dat",  "change.dat", "ept.dat", "phase.dat",
                                        "setting.dat", "plot.gp",    "out.img", "gnuplot.err"};
    char p[4200];
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        remove(p);
    }
    rmdir(dir);
}

/* A name safe inside a gnuplot string. */
static void safe_name(const char *path, char *out, size_t len)
{
    const char *b = strrchr(path, '/');
    size_t i;

    snprintf(out, len, "%s", b ? b + 1 : path);
    for (i = 0; out[i]; i++)
        if (out[i] == '\'' || out[i] == '"' || out[i] == '\\' || out[i] == '@' || out[i] == '_' ||
            out[i] == '^' || out[i] == '{' || out[i] == '}' || (unsigned char)out[i] < 32)
            out[i] = '-';
}

static double gov_at(unsigned mhz, unsigned peak)
{
    return mhz ? (double)mhz : (double)peak;
}

/* Index of update u in s, or -1. */
static long find(const struct eerl__an_series *s, uint64_t u)
{
    size_t lo = 0, hi = s->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->update[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->update[lo] == u ? (long)lo : -1;
}

/* "1800/1305" or "1800/1305 idle 345", quoted for a gnuplot data file. */
static void setting_label(const eerl_setting *st, char *buf, size_t len)
{
    char t[64];

    eerl_cli_setting_str(st, t, sizeof(t));
    snprintf(buf, len, "\"%s\"", t);
}

/* One block of phase.dat: update, then per phase (generation, log-prob, training, refit) the
 * power (W, whole allocation: the phase's energy over its time) and the energy (J); NaN where
 * the phase did not run. */
static void phase_block(FILE *f, const struct eerl__an_series *r)
{
    size_t i;
    int k;

    fprintf(f, "# %s seed %llu: update, power W x4, energy J x4 (gen logprob train refit)\n",
            r->role, (unsigned long long)r->seed);
    for (i = 0; i < r->n; i++) {
        const eerl_obs *o = &r->obs[i];

        fprintf(f, "%llu", (unsigned long long)r->update[i]);
        for (k = 0; k < 4; k++)
            if (o->phase_time_s[k] > 0)
                fprintf(f, " %g", o->phase_energy_j[k] / o->phase_time_s[k]);
            else
                fprintf(f, " NaN");
        for (k = 0; k < 4; k++)
            if (o->phase_time_s[k] > 0 || o->phase_energy_j[k] > 0)
                fprintf(f, " %g", o->phase_energy_j[k]);
            else
                fprintf(f, " NaN");
        fprintf(f, "\n");
    }
    fprintf(f, "\n\n");
}

/* setting.dat: per setting the controller ran (from update 2, in order of first use), the
 * throughput, power and energy-per-token change against the governor run's same updates. */
#define SETTINGS_MAX 24
static int setting_table(FILE *f, const struct eerl__an_series *ctl,
                         const struct eerl__an_series *gov)
{
    eerl_setting set[SETTINGS_MAX];
    double sum[SETTINGS_MAX][6];
    unsigned cnt[SETTINGS_MAX];
    size_t n = 0, i, k;
    char lab[80];

    memset(sum, 0, sizeof(sum));
    memset(cnt, 0, sizeof(cnt));
    for (i = 0; i < ctl->n; i++) {
        long g = find(gov, ctl->update[i]);

        if (g < 0 || ctl->update[i] < EERL__AN_FIRST_UPDATE)
            continue;
        for (k = 0; k < n && !eerl_setting_equal(&set[k], &ctl->setting[i]); k++)
            ;
        if (k == n) {
            if (n == SETTINGS_MAX)
                continue;
            set[n++] = ctl->setting[i];
        }
        sum[k][0] += ctl->N[i];
        sum[k][1] += ctl->T[i];
        sum[k][2] += ctl->E[i];
        sum[k][3] += gov->N[g];
        sum[k][4] += gov->T[g];
        sum[k][5] += gov->E[g];
        cnt[k]++;
    }
    fprintf(f, "# setting throughput_pct power_pct energy_per_token_pct updates\n");
    for (k = 0; k < n; k++) {
        double *x = sum[k];

        setting_label(&set[k], lab, sizeof(lab));
        fprintf(f, "%s %g %g %g %u\n", lab, 100 * ((x[0] / x[1]) / (x[3] / x[4]) - 1),
                100 * ((x[2] / x[1]) / (x[5] / x[4]) - 1),
                100 * ((x[2] / x[0]) / (x[5] / x[3]) - 1), cnt[k]);
    }
    return (int)n;
}

int eerl_cmd_report(int argc, char **argv)
{
    const char *paths[TRACES_MAX], *out = NULL, *ext;
    struct eerl__an_series *s = NULL;
    const struct eerl__an_series *ctl = NULL, *gov = NULL, *first = NULL;
    size_t n = 0, i, j;
    int rc = EERL_EXIT_USAGE, e, svg, status, n_set = 0;
    char why[1024], dir[4096], p[4200], name_c[256], name_g[256], set[64], def_out[4200];
    const char *tmpdir = getenv("TMPDIR");
    unsigned peak = 1980, lo = 0;
    double tw = NAN, pw = NAN, ew = NAN, loss = 0;
    FILE *f;
    pid_t pid;

    dir[0] = '\0';
    for (i = 1; i < (size_t)argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= (size_t)argc) {
                eerl_cli_err(CMD, "%s needs a file name (FILE.png or FILE.svg)", argv[i]);
                return EERL_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl report --help", argv[i]);
            return EERL_EXIT_USAGE;
        } else {
            if (n >= TRACES_MAX) {
                eerl_cli_err(CMD, "more than %d traces", TRACES_MAX);
                return EERL_EXIT_USAGE;
            }
            paths[n++] = argv[i];
        }
    }
    if (n == 0) {
        eerl_cli_err(CMD, "no traces given; see eerl report --help");
        return EERL_EXIT_USAGE;
    }
    if (!out) { /* the first trace's name with .png, as python -m eerl.report does */
        const char *dot = strrchr(paths[0], '.'), *slash = strrchr(paths[0], '/');
        int keep = dot && (!slash || dot > slash) ? (int)(dot - paths[0]) : (int)strlen(paths[0]);
        snprintf(def_out, sizeof(def_out), "%.*s.png", keep, paths[0]);
        out = def_out;
    }
    ext = ext_of(out);
    if (strcmp(ext, "png") && strcmp(ext, "svg")) {
        eerl_cli_err(CMD, "output '%s' must end in .png or .svg (the picture's format)", out);
        return EERL_EXIT_USAGE;
    }
    svg = !strcmp(ext, "svg");
    rc = EERL_EXIT_FAIL;
    s = calloc(n, sizeof(*s));
    if (!s) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    for (i = 0; i < n; i++) {
        e = eerl__an_load_trace(paths[i], &s[i], why, sizeof(why));
        if (e < 0) {
            eerl_cli_err(CMD, "%s", why);
            goto out;
        }
        if (s[i].n == 0) {
            eerl_cli_err(CMD, "%s has no update lines", paths[i]);
            goto out;
        }
        if (!ctl && strcmp(s[i].role, "governor")) {
            ctl = &s[i];
            safe_name(paths[i], name_c, sizeof(name_c));
        }
    }
    for (i = 0; i < n; i++)
        if (!strcmp(s[i].role, "governor") &&
            (!ctl || !ctl->has_seed || !s[i].has_seed || s[i].seed == ctl->seed)) {
            gov = &s[i];
            safe_name(paths[i], name_g, sizeof(name_g));
            break;
        }
    first = ctl ? ctl : gov;
    if (first->peak_mhz)
        peak = first->peak_mhz;
    if (ctl)
        loss = ctl->allowed_loss;

    snprintf(dir, sizeof(dir), "%s/eerl-report-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        eerl_cli_err(CMD, "cannot make a temporary directory '%s': %s", dir, strerror(errno));
        dir[0] = '\0';
        goto out;
    }
    /* Per phase power and energy: the governor run (block 0) and the controller run (block 1). */
    snprintf(p, sizeof(p), "%s/phase.dat", dir);
    f = fopen(p, "w");
    if (!f)
        goto io;
    phase_block(f, gov ? gov : ctl);
    phase_block(f, ctl ? ctl : gov);
    if (fclose(f) != 0)
        goto io;
    /* Energy per valid token of every run: one block per run. */
    snprintf(p, sizeof(p), "%s/ept.dat", dir);
    f = fopen(p, "w");
    if (!f)
        goto io;
    for (i = 0; i < n; i++) {
        fprintf(f, "# %s seed %llu\n", s[i].role, (unsigned long long)s[i].seed);
        for (j = 0; j < s[i].n; j++)
            fprintf(f, "%llu %g\n", (unsigned long long)s[i].update[j], s[i].E[j] / s[i].N[j]);
        fprintf(f, "\n\n");
    }
    if (fclose(f) != 0)
        goto io;
    if (ctl) {
        /* 1: clocks and marks of the controller run. */
        snprintf(p, sizeof(p), "%s/clocks.dat", dir);
        f = fopen(p, "w");
        if (!f)
            goto io;
        fprintf(f, "# update gen train calibrating propose trial confirm lock adjust refresh\n");
        for (i = 0; i < ctl->n; i++) {
            unsigned m = ctl->marks[i];
            fprintf(f, "%llu %g %g %d %d %d %d %d %d %d\n", (unsigned long long)ctl->update[i],
                    gov_at(ctl->setting[i].mhz[EERL_GROUP_GEN], peak),
                    gov_at(ctl->setting[i].mhz[EERL_GROUP_TRAIN], peak),
                    ctl->state[i] == EERL_STATE_CALIBRATING || (m & (1u << EERL_EV_CALIBRATED)),
                    !!(m & (1u << EERL_EV_PROPOSE)),
                    !!(m & (1u << EERL_EV_TRIAL)) || !!(m & (1u << EERL_EV_ROUND)),
                    !!(m & (1u << EERL_EV_CONFIRM)), !!(m & (1u << EERL_EV_LOCK)),
                    !!(m & (1u << EERL_EV_ADJUST)), !!(m & (1u << EERL_EV_REFRESH)));
        }
        if (fclose(f) != 0)
            goto io;
        /* 2: per-update changes against the governor of the same seed (5-update moving average). */
        snprintf(p, sizeof(p), "%s/change.dat", dir);
        f = fopen(p, "w");
        if (!f)
            goto io;
        if (gov) {
            double sn[2] = {0, 0}, st[2] = {0, 0}, se[2] = {0, 0};
            fprintf(f, "# update throughput_pct power_pct energy_per_token_pct (5-update means)\n");
            for (i = 0; i < ctl->n; i++) {
                double a = 0, b = 0, c = 0;
                unsigned k = 0;
                long g = find(gov, ctl->update[i]);
                if (g >= 0 && ctl->update[i] >= EERL__AN_FIRST_UPDATE) {
                    sn[0] += gov->N[g];
                    st[0] += gov->T[g];
                    se[0] += gov->E[g];
                    sn[1] += ctl->N[i];
                    st[1] += ctl->T[i];
                    se[1] += ctl->E[i];
                }
                for (j = i >= 4 ? i - 4 : 0; j <= i; j++) {
                    long h = find(gov, ctl->update[j]);
                    if (h < 0)
                        continue;
                    a += (ctl->N[j] / ctl->T[j]) / (gov->N[h] / gov->T[h]);
                    b += (ctl->E[j] / ctl->T[j]) / (gov->E[h] / gov->T[h]);
                    c += (ctl->E[j] / ctl->N[j]) / (gov->E[h] / gov->N[h]);
                    k++;
                }
                if (k)
                    fprintf(f, "%llu %g %g %g\n", (unsigned long long)ctl->update[i],
                            100 * (a / k - 1), 100 * (b / k - 1), 100 * (c / k - 1));
            }
            if (st[0] > 0 && st[1] > 0 && sn[0] > 0 && sn[1] > 0) {
                tw = 100 * ((sn[1] / st[1]) / (sn[0] / st[0]) - 1);
                pw = 100 * ((se[1] / st[1]) / (se[0] / st[0]) - 1);
                ew = 100 * ((se[1] / sn[1]) / (se[0] / sn[0]) - 1);
            }
        } else {
            fprintf(f, "0 0 0 0\n");
        }
        if (fclose(f) != 0)
            goto io;
        /* 4: per setting. */
        snprintf(p, sizeof(p), "%s/setting.dat", dir);
        f = fopen(p, "w");
        if (!f)
            goto io;
        if (gov)
            n_set = setting_table(f, ctl, gov);
        if (fclose(f) != 0)
            goto io;
    }

    snprintf(p, sizeof(p), "%s/plot.gp", dir);
    f = fopen(p, "w");
    if (!f)
        goto io;
    fprintf(f, "cd '%s'\n", dir);
    {
        int h = ctl ? 1900 : 1150;
        if (svg)
            fprintf(f,
                    "set terminal svg size 1100,%d dynamic font 'sans,12' background '#ffffff'\n",
                    h);
        else
            fprintf(f, "set terminal pngcairo size 1100,%d font 'sans,11' background '#ffffff'\n",
                    h);
    }
    fprintf(f,
            "set output 'out.img'\n"
            "set multiplot layout %d,1 margins 0.08,0.80,%s,%s spacing 0,%s\n"
            "set grid lc rgb '#dddddd'\nset key outside right top\n"
            "set xlabel 'update'\nset xrange [0:%llu]\n",
            ctl ? 5 : 3, ctl ? "0.04" : "0.06", ctl ? "0.97" : "0.95", ctl ? "0.06" : "0.11",
            (unsigned long long)(first->update[first->n - 1] + 1));
    if (ctl) {
        /* Panel 1: from a little below the lowest clock used to above the peak. */
        unsigned mn = peak;
        for (i = 0; i < ctl->n; i++)
            for (j = 0; j < 2; j++)
                if (ctl->setting[i].mhz[j] && ctl->setting[i].mhz[j] < mn)
                    mn = ctl->setting[i].mhz[j];
        lo = mn > 300 ? (mn - 200) / 100 * 100 : 0;
        fprintf(f,
                "set title \"%s: SM clocks per update (governor drawn at its %u MHz peak)\"\n"
                "set ylabel 'MHz'\nset yrange [%u:%u+120]\n"
                "set style fill solid 0.35 noborder\nset boxwidth 1 absolute\n"
                "plot 'clocks.dat' u 1:($4>0 ? %u+120 : 1/0) w boxes lc rgb '#cccccc' t "
                "'calibration', \\\n"
                " '' u 1:2 w steps lw 2 lc rgb '#1f77b4' t 'generation', \\\n"
                " '' u 1:3 w steps lw 2 lc rgb '#d62728' t 'training', \\\n"
                " '' u 1:($5>0 ? %u+60 : 1/0) w p pt 9 ps 1.2 lc rgb '#2ca02c' t 'trial starts', "
                "\\\n"
                " '' u 1:($6>0 ? %u+60 : 1/0) w p pt 11 ps 1.2 lc rgb '#9467bd' t 'verdict', \\\n"
                " '' u 1:($7>0 ? %u+90 : 1/0) w p pt 5 ps 1.2 lc rgb '#ff7f0e' t 'confirmation', "
                "\\\n"
                " '' u 1:($8>0 ? %u+90 : 1/0) w impulses lw 3 lc rgb '#000000' t 'lock', \\\n"
                " '' u 1:($9>0 ? %u+90 : 1/0) w p pt 7 ps 1 lc rgb '#8c564b' t 'adjust', \\\n"
                " '' u 1:($10>0 ? %u+90 : 1/0) w p pt 6 ps 1 lc rgb '#17becf' t 'refresh'\n"
                "set yrange [*:*]\nunset style\n",
                name_c, peak, lo, peak, peak, peak, peak, peak, peak, peak, peak);
        /* Panel 2, with the allowance. */
        if (gov) {
            fprintf(f,
                    "set title \"change vs governor run %s, 5-update mean\\nwhole run from update "
                    "%d: throughput %+.2f%%, power %+.2f%%, energy per token %+.2f%%\" "
                    "noenhanced\n"
                    "set ylabel '%%'\n"
                    "plot 'change.dat' u 1:2 w l lw 2 lc rgb '#1f77b4' t 'throughput', \\\n"
                    " '' u 1:3 w l lw 2 lc rgb '#ff7f0e' t 'power', \\\n"
                    " '' u 1:4 w l lw 2 lc rgb '#2ca02c' t 'energy per token', \\\n"
                    " 0 w l lc rgb '#888888' notitle",
                    name_g, EERL__AN_FIRST_UPDATE, tw, pw, ew);
            if (loss > 0)
                fprintf(f, ", \\\n -%g w l lw 2 dt 2 lc rgb '#1f77b4' t 'allowance (-%g%%)'",
                        100 * loss, 100 * loss);
            fprintf(f, "\n");
        } else {
            fprintf(f, "set title 'no governor trace of the same seed: no comparison'\n"
                       "set ylabel '%%'\nplot 0 w l lc rgb '#888888' notitle\n");
        }
        /* Panel 3 (Figure 1): power per phase, governor dashed, controller solid. */
        fprintf(f, "set title 'power per phase (whole allocation): governor run dashed, controller "
                   "run solid'\nset ylabel 'kW'\n"
                   "plot 'phase.dat' index 1 u 1:($2/1000) w l lw 2 lc rgb '#1f77b4' t "
                   "'generation', \\\n"
                   " '' index 1 u 1:($3/1000) w l lw 2 lc rgb '#9467bd' t 'log-prob', \\\n"
                   " '' index 1 u 1:($4/1000) w l lw 2 lc rgb '#d62728' t 'training'");
        if (gov)
            fprintf(f,
                    ", \\\n '' index 0 u 1:($2/1000) w l lw 1 dt 2 lc rgb '#1f77b4' notitle, \\\n"
                    " '' index 0 u 1:($3/1000) w l lw 1 dt 2 lc rgb '#9467bd' notitle, \\\n"
                    " '' index 0 u 1:($4/1000) w l lw 1 dt 2 lc rgb '#d62728' notitle");
        fprintf(f, "\n");
        /* Panel 4 (Figure 2): per setting. */
        if (n_set > 0) {
            fprintf(f,
                    "set title 'change vs the governor run per setting the controller ran "
                    "(gen/train MHz; updates from %d)'\nset ylabel '%%'\nunset xlabel\n"
                    "set xrange [*:*]\nset style data histogram\n"
                    "set style histogram clustered gap 1\nset style fill solid 0.8 noborder\n"
                    "set xtics rotate by -30 scale 0 font ',9'\n"
                    "plot 'setting.dat' u 2:xtic(1) lc rgb '#1f77b4' t 'throughput', \\\n"
                    " '' u 3 lc rgb '#ff7f0e' t 'power', '' u 4 lc rgb '#2ca02c' t 'energy per "
                    "token'",
                    EERL__AN_FIRST_UPDATE);
            if (loss > 0)
                fprintf(f, ", \\\n -%g w l lw 2 dt 2 lc rgb '#1f77b4' t 'allowance (-%g%%)'",
                        100 * loss, 100 * loss);
            fprintf(f,
                    "\nset style data lines\nunset style\nset xtics norotate scale 1 "
                    "font ''\nset xtics autofreq\nset xlabel 'update'\nset xrange [0:%llu]\n",
                    (unsigned long long)(first->update[first->n - 1] + 1));
        } else {
            fprintf(f, "set title 'no governor trace of the same seed: no change per setting'\n"
                       "set ylabel '%%'\nplot 0 w l lc rgb '#888888' notitle\n");
        }
    } else {
        /* Observe-only: what the governor did, phase by phase (refit's power is left out: a
         * refit lasts milliseconds, and its energy over its time is mostly noise). */
        fprintf(f,
                "set title \"%s (governor, observe-only): power per phase, whole allocation\" "
                "noenhanced\nset ylabel 'kW'\n"
                "plot 'phase.dat' index 0 u 1:($2/1000) w l lw 2 lc rgb '#1f77b4' t 'generation', "
                "\\\n"
                " '' index 0 u 1:($3/1000) w l lw 2 lc rgb '#9467bd' t 'log-prob', \\\n"
                " '' index 0 u 1:($4/1000) w l lw 2 lc rgb '#d62728' t 'training'\n"
                "set title 'energy per phase per update (SM clocks: the governor chose them)'\n"
                "set ylabel 'kJ'\n"
                "plot 'phase.dat' index 0 u 1:($6/1000) w l lw 2 lc rgb '#1f77b4' t 'generation', "
                "\\\n"
                " '' index 0 u 1:($7/1000) w l lw 2 lc rgb '#9467bd' t 'log-prob', \\\n"
                " '' index 0 u 1:($8/1000) w l lw 2 lc rgb '#d62728' t 'training', \\\n"
                " '' index 0 u 1:($9/1000) w l lw 1 lc rgb '#7f7f7f' t 'refit'\n",
                name_g);
    }
    /* Last panel: energy per valid token of every run. */
    fprintf(f, "set title 'energy per valid training token'\nset ylabel 'J / token'\nplot ");
    for (i = 0; i < n; i++) {
        int g = !strcmp(s[i].role, "governor");
        fprintf(f, "%s'ept.dat' index %zu u 1:2 w l lw %d dt %d lc %llu t '%s seed %llu'",
                i ? ", \\\n " : "", i, g ? 1 : 2, g ? 2 : 1,
                (unsigned long long)(1 + s[i].seed % 8), g ? "governor" : "controller",
                (unsigned long long)s[i].seed);
    }
    fprintf(f, "\nunset multiplot\nset output\n");
    if (fclose(f) != 0)
        goto io;

    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        eerl_cli_err(CMD, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        char errp[4200];
        int fd;
        snprintf(errp, sizeof(errp), "%s/gnuplot.err", dir);
        fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", p, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char errp[4200], *text;
        snprintf(errp, sizeof(errp), "%s/gnuplot.err", dir);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
            eerl_cli_err(CMD, "gnuplot not found: apt-get install gnuplot-nox");
        } else {
            f = fopen(errp, "r");
            text = calloc(1, 2048);
            if (f && text)
                (void)!fread(text, 1, 2047, f);
            if (f)
                fclose(f);
            eerl_cli_err(CMD, "gnuplot failed: %s", text ? text : "");
            free(text);
        }
        goto out;
    }
    snprintf(p, sizeof(p), "%s/out.img", dir);
    if (rename(p, out) != 0 && copy_file(p, out) != 0) {
        eerl_cli_err(CMD, "cannot write '%s': %s", out, strerror(errno));
        goto out;
    }
    if (ctl) {
        fprintf(stderr, "eerl report: wrote %s (%s run %s", out, ctl->role, name_c);
        if (ctl->locked)
            fprintf(stderr, ", locked %s after update %llu",
                    eerl__an_setting_str(&ctl->lock_setting, set, sizeof(set)),
                    (unsigned long long)ctl->lock_update);
        fprintf(stderr, "%s%s)\n", gov ? "; governor " : "", gov ? name_g : "");
    } else {
        fprintf(stderr, "eerl report: wrote %s (observe-only: governor run %s)\n", out, name_g);
    }
    rc = EERL_EXIT_OK;
    goto out;
io:
    eerl_cli_err(CMD, "writing plot data in %s: %s", dir, strerror(errno));
out:
    if (dir[0])
        rm_dir(dir);
    if (s)
        for (i = 0; i < n; i++)
            eerl__an_series_free(&s[i]);
    free(s);
    return rc;
}
