/* eerl report: pictures of runs from their traces, drawn by gnuplot (Debian gnuplot-nox) into a
 * PNG or SVG chosen by the output's extension. With a controller trace and the governor run of
 * its seed, five panels: the clocks per update of the controller run with calibration, trials,
 * confirmation and the lock marked (the paper's Figure 4); the throughput, power and
 * energy-per-token change against the governor run with the allowance as a line (per update and
 * over the whole run); the power per phase under the governor and the controller (Figure 1); the
 * throughput, power and energy-per-token change per setting the controller ran (Figure 2); the
 * energy per valid token of every run. A controller trace without its governor run gets only
 * the panels that need none: clocks, power per phase, energy per token. Governor (observe-only)
 * traces alone, what a first run on a cluster shows: power and energy per phase per update and
 * the energy per valid token. Every axis names its unit; power and energy take the unit (W or
 * kW, J, kJ or MJ) that keeps their tick labels short, since gnuplot drops a y label that wide
 * tick labels push off the picture. Data and script go to a private temporary directory; the
 * picture is written there and moved into place only when gnuplot succeeded, so a failure leaves
 * nothing behind. */
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
#include "analysis/analysis.h"

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
            "Without the governor run of its seed, panels 1, 3 and 5 (2 and 4 need it).\n"
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

/* ---- the command: one report, from the arguments to the picture ----------------------------- */

struct report {
    const char *paths[TRACES_MAX], *out;
    size_t n;
    int svg;
    char def_out[4200];
    struct eerl__an_series *s;
    const struct eerl__an_series *ctl, *gov, *first; /* the controller run, its governor run */
    char name_c[256], name_g[256];
    unsigned peak;
    double loss;       /* the controller run's allowed loss */
    char dir[4096];    /* the private temporary directory, or "" */
    double tw, pw, ew; /* whole-run throughput, power, energy-per-token change (%) */
    int n_set;         /* rows of setting.dat */

    /* power and energy per phase are drawn divided by p_div and e_div, in p_unit and e_unit */
    double p_div, e_div;
    const char *p_unit, *e_unit;
};

/* The unit for values up to max: base (W or J) times 1000 until max is below 1000, so a tick
 * label has at most three digits before its point. Same rule as python/eerl/report.py. */
static double unit_of(double max, const char *const units[4], const char **ret_unit)
{
    double div = 1;
    int k = 0;

    while (k < 3 && max >= 1000 * div) {
        div *= 1000;
        k++;
    }
    *ret_unit = units[k];
    return div;
}

/* Power and energy per phase: the largest drawn (refit's power is not drawn) picks the unit. */
static void pick_units(struct report *r)
{
    static const char *const watt[4] = {"W", "kW", "MW", "GW"}, *joule[4] = {"J", "kJ", "MJ", "GJ"};
    const struct eerl__an_series *runs[2] = {r->gov, r->ctl};
    double pmax = 0, emax = 0;
    size_t i, j;
    int k;

    for (j = 0; j < 2; j++)
        for (i = 0; runs[j] && i < runs[j]->n; i++)
            for (k = 0; k < 4; k++) {
                const eerl_obs *o = &runs[j]->obs[i];
                double p = o->phase_time_s[k] > 0 ? o->phase_energy_j[k] / o->phase_time_s[k] : 0;
                if (k < 3 && isfinite(p) && p > pmax)
                    pmax = p;
                if (isfinite(o->phase_energy_j[k]) && o->phase_energy_j[k] > emax)
                    emax = o->phase_energy_j[k];
            }
    r->p_div = unit_of(pmax, watt, &r->p_unit);
    r->e_div = unit_of(emax, joule, &r->e_unit);
}

/* Returns -1 to go on, else the exit code (help printed, or a usage error said). */
static int parse_args(int argc, char **argv, struct report *r)
{
    size_t i;

    for (i = 1; i < (size_t)argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= (size_t)argc) {
                eerl_cli_err(CMD, "%s needs a file name (FILE.png or FILE.svg)", argv[i]);
                return EERL_EXIT_USAGE;
            }
            r->out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl report --help", argv[i]);
            return EERL_EXIT_USAGE;
        } else {
            if (r->n >= TRACES_MAX) {
                eerl_cli_err(CMD, "more than %d traces", TRACES_MAX);
                return EERL_EXIT_USAGE;
            }
            r->paths[r->n++] = argv[i];
        }
    }
    if (r->n == 0) {
        eerl_cli_err(CMD, "no traces given; see eerl report --help");
        return EERL_EXIT_USAGE;
    }
    return -1;
}

/* The output: as given, else the first trace's name with .png (as python -m eerl.report does);
 * its extension picks the format. */
static int pick_output(struct report *r)
{
    const char *ext;

    if (!r->out) {
        const char *p = r->paths[0], *dot = strrchr(p, '.'), *slash = strrchr(p, '/');
        int keep = dot && (!slash || dot > slash) ? (int)(dot - p) : (int)strlen(p);
        snprintf(r->def_out, sizeof(r->def_out), "%.*s.png", keep, p);
        r->out = r->def_out;
    }
    ext = ext_of(r->out);
    if (strcmp(ext, "png") && strcmp(ext, "svg")) {
        eerl_cli_err(CMD, "output '%s' must end in .png or .svg (the picture's format)", r->out);
        return -1;
    }
    r->svg = !strcmp(ext, "svg");
    return 0;
}

/* Loads every trace; the first controller run, and the governor run of its seed. */
static int load_runs(struct report *r)
{
    char why[1024];
    size_t i;

    r->s = calloc(r->n, sizeof(*r->s));
    if (!r->s) {
        eerl_cli_err(CMD, "out of memory");
        return -1;
    }
    for (i = 0; i < r->n; i++) {
        if (eerl__an_load_trace(r->paths[i], &r->s[i], why, sizeof(why)) < 0) {
            eerl_cli_err(CMD, "%s", why);
            return -1;
        }
        if (r->s[i].cut_line)
            eerl_cli_note_cut(CMD, r->paths[i], r->s[i].cut_line);
        if (r->s[i].n == 0) {
            eerl_cli_err(CMD, "%s has no update lines", r->paths[i]);
            return -1;
        }
        if (!r->ctl && strcmp(r->s[i].role, "governor")) {
            r->ctl = &r->s[i];
            safe_name(r->paths[i], r->name_c, sizeof(r->name_c));
        }
    }
    for (i = 0; i < r->n; i++)
        if (!strcmp(r->s[i].role, "governor") &&
            (!r->ctl || !r->ctl->has_seed || !r->s[i].has_seed || r->s[i].seed == r->ctl->seed)) {
            r->gov = &r->s[i];
            safe_name(r->paths[i], r->name_g, sizeof(r->name_g));
            break;
        }
    r->first = r->ctl ? r->ctl : r->gov;
    if (r->first->peak_mhz)
        r->peak = r->first->peak_mhz;
    if (r->ctl)
        r->loss = r->ctl->allowed_loss;
    pick_units(r);
    return 0;
}

static FILE *open_in_dir(const struct report *r, const char *name)
{
    char p[4200];

    snprintf(p, sizeof(p), "%s/%s", r->dir, name);
    return fopen(p, "w");
}

/* Energy per valid token of every run: one block per run. */
static void write_ept(FILE *f, const struct report *r)
{
    size_t i, j;

    for (i = 0; i < r->n; i++) {
        const struct eerl__an_series *x = &r->s[i];

        fprintf(f, "# %s seed %llu\n", x->role, (unsigned long long)x->seed);
        for (j = 0; j < x->n; j++)
            fprintf(f, "%llu %g\n", (unsigned long long)x->update[j], x->E[j] / x->N[j]);
        fprintf(f, "\n\n");
    }
}

/* Panel 1's data: clocks and marks of the controller run. */
static void write_clocks(FILE *f, const struct report *r)
{
    const struct eerl__an_series *c = r->ctl;
    size_t i;

    fprintf(f, "# update gen train calibrating propose trial confirm lock adjust refresh\n");
    for (i = 0; i < c->n; i++) {
        unsigned m = c->marks[i];
        fprintf(f, "%llu %g %g %d %d %d %d %d %d %d\n", (unsigned long long)c->update[i],
                gov_at(c->setting[i].mhz[EERL_GROUP_GEN], r->peak),
                gov_at(c->setting[i].mhz[EERL_GROUP_TRAIN], r->peak),
                c->state[i] == EERL_STATE_CALIBRATING || (m & (1u << EERL_EV_CALIBRATED)),
                !!(m & (1u << EERL_EV_PROPOSE)),
                !!(m & (1u << EERL_EV_TRIAL)) || !!(m & (1u << EERL_EV_ROUND)),
                !!(m & (1u << EERL_EV_CONFIRM)), !!(m & (1u << EERL_EV_LOCK)),
                !!(m & (1u << EERL_EV_ADJUST)), !!(m & (1u << EERL_EV_REFRESH)));
    }
}

/* Panel 2's data: per-update changes against the governor run of the same seed (5-update moving
 * average), and the whole run's from EERL__AN_FIRST_UPDATE into r->tw, pw, ew. */
static void write_change(FILE *f, struct report *r)
{
    const struct eerl__an_series *c = r->ctl, *gov = r->gov;
    double sn[2] = {0, 0}, st[2] = {0, 0}, se[2] = {0, 0};
    size_t i, j;

    fprintf(f, "# update throughput_pct power_pct energy_per_token_pct (5-update means)\n");
    for (i = 0; i < c->n; i++) {
        double a = 0, b = 0, e = 0;
        unsigned k = 0;
        long g = find(gov, c->update[i]);
        if (g >= 0 && c->update[i] >= EERL__AN_FIRST_UPDATE) {
            sn[0] += gov->N[g];
            st[0] += gov->T[g];
            se[0] += gov->E[g];
            sn[1] += c->N[i];
            st[1] += c->T[i];
            se[1] += c->E[i];
        }
        for (j = i >= 4 ? i - 4 : 0; j <= i; j++) {
            long h = find(gov, c->update[j]);
            if (h < 0)
                continue;
            a += (c->N[j] / c->T[j]) / (gov->N[h] / gov->T[h]);
            b += (c->E[j] / c->T[j]) / (gov->E[h] / gov->T[h]);
            e += (c->E[j] / c->N[j]) / (gov->E[h] / gov->N[h]);
            k++;
        }
        if (k)
            fprintf(f, "%llu %g %g %g\n", (unsigned long long)c->update[i], 100 * (a / k - 1),
                    100 * (b / k - 1), 100 * (e / k - 1));
    }
    if (st[0] > 0 && st[1] > 0 && sn[0] > 0 && sn[1] > 0) {
        r->tw = 100 * ((sn[1] / st[1]) / (sn[0] / st[0]) - 1);
        r->pw = 100 * ((se[1] / st[1]) / (se[0] / st[0]) - 1);
        r->ew = 100 * ((se[1] / sn[1]) / (se[0] / sn[0]) - 1);
    }
}

/* Every data file the script reads, in the temporary directory. */
static int write_data(struct report *r)
{
    FILE *f;

    /* Per phase power and energy: the governor run (block 0) and the controller run (block 1). */
    if (!(f = open_in_dir(r, "phase.dat")))
        return -1;
    phase_block(f, r->gov ? r->gov : r->ctl);
    phase_block(f, r->ctl ? r->ctl : r->gov);
    if (fclose(f) != 0)
        return -1;
    if (!(f = open_in_dir(r, "ept.dat")))
        return -1;
    write_ept(f, r);
    if (fclose(f) != 0)
        return -1;
    if (!r->ctl)
        return 0;
    if (!(f = open_in_dir(r, "clocks.dat")))
        return -1;
    write_clocks(f, r);
    if (fclose(f) != 0)
        return -1;
    if (!r->gov)
        return 0;
    if (!(f = open_in_dir(r, "change.dat")))
        return -1;
    write_change(f, r);
    if (fclose(f) != 0)
        return -1;
    /* Panel 4's data: per setting. */
    if (!(f = open_in_dir(r, "setting.dat")))
        return -1;
    r->n_set = setting_table(f, r->ctl, r->gov);
    return fclose(f) != 0 ? -1 : 0;
}

/* Five panels for a controller run beside its governor run, else three. */
static int five_panels(const struct report *r)
{
    return r->ctl && r->gov;
}

static void script_head(FILE *f, const struct report *r)
{
    int five = five_panels(r), h = five ? 1900 : 1150;

    fprintf(f, "cd '%s'\n", r->dir);
    if (r->svg)
        fprintf(f, "set terminal svg size 1100,%d dynamic font 'sans,12' background '#ffffff'\n",
                h);
    else
        fprintf(f, "set terminal pngcairo size 1100,%d font 'sans,11' background '#ffffff'\n", h);
    fprintf(f,
            "set output 'out.img'\n"
            "set multiplot layout %d,1 margins 0.10,0.80,%s,%s spacing 0,%s\n"
            "set grid lc rgb '#dddddd'\nset key outside right top\n"
            "set xlabel 'update'\nset xrange [0:%llu]\n",
            five ? 5 : 3, five ? "0.04" : "0.06", five ? "0.97" : "0.95", five ? "0.075" : "0.11",
            (unsigned long long)(r->first->update[r->first->n - 1] + 1));
}

/* Panel 1: the clocks, from a little below the lowest clock used to above the peak. */
static void panel_clocks(FILE *f, const struct report *r)
{
    unsigned mn = r->peak, lo, peak = r->peak;
    size_t i, j;

    for (i = 0; i < r->ctl->n; i++)
        for (j = 0; j < 2; j++)
            if (r->ctl->setting[i].mhz[j] && r->ctl->setting[i].mhz[j] < mn)
                mn = r->ctl->setting[i].mhz[j];
    lo = mn > 300 ? (mn - 200) / 100 * 100 : 0;
    fprintf(f,
            "set title \"%s: SM clocks per update (governor drawn at its %u MHz peak)\"\n"
            "set ylabel 'SM clock (MHz)'\nset yrange [%u:%u+120]\n"
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
            r->name_c, peak, lo, peak, peak, peak, peak, peak, peak, peak, peak);
}

/* The allowance as a dashed line, on a panel in %. */
static void allowance_line(FILE *f, const struct report *r)
{
    if (r->loss > 0)
        fprintf(f, ", \\\n -%g w l lw 2 dt 2 lc rgb '#1f77b4' t 'allowance (-%g%%)'", 100 * r->loss,
                100 * r->loss);
}

/* Panel 2: the change against the governor run, with the allowance. */
static void panel_change(FILE *f, const struct report *r)
{
    fprintf(f,
            "set title \"change vs governor run %s, 5-update mean\\nwhole run from update "
            "%d: throughput %+.2f%%, power %+.2f%%, energy per token %+.2f%%\" "
            "noenhanced\n"
            "set ylabel 'change (%%)'\n"
            "plot 'change.dat' u 1:2 w l lw 2 lc rgb '#1f77b4' t 'throughput', \\\n"
            " '' u 1:3 w l lw 2 lc rgb '#ff7f0e' t 'power', \\\n"
            " '' u 1:4 w l lw 2 lc rgb '#2ca02c' t 'energy per token', \\\n"
            " 0 w l lc rgb '#888888' notitle",
            r->name_g, EERL__AN_FIRST_UPDATE, r->tw, r->pw, r->ew);
    allowance_line(f, r);
    fprintf(f, "\n");
}

/* Three lines of phase.dat's block b, one per phase, divided by div: its columns from col
 * (power: 2, energy: 6), drawn with style (e.g. "lw 2") and titled or not. */
static void phase_lines(FILE *f, int b, int col, double div, const char *style, int titled)
{
    static const char *const name[3] = {"generation", "log-prob", "training"};
    static const char *const colour[3] = {"#1f77b4", "#9467bd", "#d62728"};
    int k;

    for (k = 0; k < 3; k++)
        fprintf(f, "%s'phase.dat' index %d u 1:($%d/%g) w l %s lc rgb '%s' %s%s%s",
                k ? ", \\\n " : "", b, col + k, div, style, colour[k], titled ? "t '" : "notitle",
                titled ? name[k] : "", titled ? "'" : "");
}

/* Panel 3 (Figure 1): power per phase, the controller run solid, its governor run dashed. */
static void panel_phase_power(FILE *f, const struct report *r)
{
    fprintf(f, "set title 'power per phase (whole allocation)%s'\nset ylabel 'power (%s)'\nplot ",
            r->gov ? ": governor run dashed, controller run solid" : ", controller run", r->p_unit);
    phase_lines(f, 1, 2, r->p_div, "lw 2", 1);
    if (r->gov) {
        fprintf(f, ", \\\n ");
        phase_lines(f, 0, 2, r->p_div, "lw 1 dt 2", 0);
    }
    fprintf(f, "\n");
}

/* Panel 4 (Figure 2): the change per setting the controller ran. */
static void panel_settings(FILE *f, const struct report *r)
{
    if (r->n_set <= 0) {
        fprintf(f, "set title 'no update of the governor run matches one of the controller run: "
                   "no change per setting'\nset ylabel 'change (%%)'\n"
                   "plot 0 w l lc rgb '#888888' notitle\n");
        return;
    }
    fprintf(f,
            "set title 'change vs the governor run per setting the controller ran "
            "(updates from %d)'\nset ylabel 'change (%%)'\n"
            "set xlabel 'setting: generation/training SM clock (MHz)' offset 0,1\n"
            "set xrange [*:*]\nset style data histogram\n"
            "set style histogram clustered gap 1\nset style fill solid 0.8 noborder\n"
            "set xtics rotate by 30 right scale 0 font ',9'\n"
            "plot 'setting.dat' u 2:xtic(1) lc rgb '#1f77b4' t 'throughput', \\\n"
            " '' u 3 lc rgb '#ff7f0e' t 'power', '' u 4 lc rgb '#2ca02c' t 'energy per "
            "token'",
            EERL__AN_FIRST_UPDATE);
    allowance_line(f, r);
    fprintf(f,
            "\nset style data lines\nunset style\nset xtics norotate scale 1 "
            "font ''\nset xtics autofreq\nset xlabel 'update' offset 0,0\nset xrange [0:%llu]\n",
            (unsigned long long)(r->first->update[r->first->n - 1] + 1));
}

/* Observe-only: what the governor did, phase by phase (refit's power is left out: a refit lasts
 * milliseconds, and its energy over its time is mostly noise). */
static void panels_observe_only(FILE *f, const struct report *r)
{
    fprintf(f,
            "set title \"%s (governor, observe-only): power per phase, whole allocation\" "
            "noenhanced\nset ylabel 'power (%s)'\nplot ",
            r->name_g, r->p_unit);
    phase_lines(f, 0, 2, r->p_div, "lw 2", 1);
    fprintf(f,
            "\nset title 'energy per phase per update (SM clocks: the governor chose them)'\n"
            "set ylabel 'energy (%s)'\nplot ",
            r->e_unit);
    phase_lines(f, 0, 6, r->e_div, "lw 2", 1);
    fprintf(f, ", \\\n '' index 0 u 1:($9/%g) w l lw 1 lc rgb '#7f7f7f' t 'refit'\n", r->e_div);
}

/* Last panel: energy per valid token of every run. */
static void panel_ept(FILE *f, const struct report *r)
{
    size_t i;

    fprintf(f,
            "set title 'energy per valid training token'\nset ylabel 'energy (J / token)'\nplot ");
    for (i = 0; i < r->n; i++) {
        int g = !strcmp(r->s[i].role, "governor");
        fprintf(f, "%s'ept.dat' index %zu u 1:2 w l lw %d dt %d lc %llu t '%s seed %llu'",
                i ? ", \\\n " : "", i, g ? 1 : 2, g ? 2 : 1,
                (unsigned long long)(1 + r->s[i].seed % 8), g ? "governor" : "controller",
                (unsigned long long)r->s[i].seed);
    }
    fprintf(f, "\nunset multiplot\nset output\n");
}

/* plot.gp: the panels the runs given call for. */
static int write_script(const struct report *r)
{
    FILE *f = open_in_dir(r, "plot.gp");

    if (!f)
        return -1;
    script_head(f, r);
    if (r->ctl) {
        panel_clocks(f, r);
        if (r->gov)
            panel_change(f, r);
        panel_phase_power(f, r);
        if (r->gov)
            panel_settings(f, r);
    } else {
        panels_observe_only(f, r);
    }
    panel_ept(f, r);
    return fclose(f) != 0 ? -1 : 0;
}

/* Says why gnuplot failed: not installed, or its own messages. */
static void gnuplot_failed(const struct report *r, int status)
{
    char errp[4200], *text;
    FILE *f;

    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        eerl_cli_err(CMD, "gnuplot not found: apt-get install gnuplot-nox");
        return;
    }
    snprintf(errp, sizeof(errp), "%s/gnuplot.err", r->dir);
    f = fopen(errp, "r");
    text = calloc(1, 2048);
    if (f && text)
        (void)!fread(text, 1, 2047, f);
    if (f)
        fclose(f);
    eerl_cli_err(CMD, "gnuplot failed: %s", text ? text : "");
    free(text);
}

/* Runs gnuplot on plot.gp, its output into gnuplot.err; 0 when it succeeded. */
static int run_gnuplot(const struct report *r)
{
    char script[4200];
    int status;
    pid_t pid;

    snprintf(script, sizeof(script), "%s/plot.gp", r->dir);
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        eerl_cli_err(CMD, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        char errp[4200];
        int fd;
        snprintf(errp, sizeof(errp), "%s/gnuplot.err", r->dir);
        fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        gnuplot_failed(r, status);
        return -1;
    }
    return 0;
}

/* The picture into place, and a line saying what it shows. */
static int deliver(const struct report *r)
{
    char p[4200], set[64];

    snprintf(p, sizeof(p), "%s/out.img", r->dir);
    if (rename(p, r->out) != 0 && copy_file(p, r->out) != 0) {
        eerl_cli_err(CMD, "cannot write '%s': %s", r->out, strerror(errno));
        return -1;
    }
    if (!r->ctl) {
        fprintf(stderr, "eerl report: wrote %s (observe-only: governor run %s)\n", r->out,
                r->name_g);
        return 0;
    }
    fprintf(stderr, "eerl report: wrote %s (%s run %s", r->out, r->ctl->role, r->name_c);
    if (r->ctl->locked)
        fprintf(stderr, ", locked %s after update %llu",
                eerl__an_setting_str(&r->ctl->lock_setting, set, sizeof(set)),
                (unsigned long long)r->ctl->lock_update);
    fprintf(stderr, "%s%s)\n", r->gov ? "; governor " : "", r->gov ? r->name_g : "");
    return 0;
}

/* Data and script into a private temporary directory, gnuplot, the picture into place. */
static int draw(struct report *r)
{
    const char *tmpdir = getenv("TMPDIR");

    snprintf(r->dir, sizeof(r->dir), "%s/eerl-report-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(r->dir)) {
        eerl_cli_err(CMD, "cannot make a temporary directory '%s': %s", r->dir, strerror(errno));
        r->dir[0] = '\0';
        return -1;
    }
    if (write_data(r) < 0 || write_script(r) < 0) {
        eerl_cli_err(CMD, "writing plot data in %s: %s", r->dir, strerror(errno));
        return -1;
    }
    if (run_gnuplot(r) < 0)
        return -1;
    return deliver(r);
}

int eerl_cmd_report(int argc, char **argv)
{
    struct report *r = calloc(1, sizeof(*r));
    int rc;
    size_t i;

    if (!r) {
        eerl_cli_err(CMD, "out of memory");
        return EERL_EXIT_FAIL;
    }
    r->peak = 1980;
    r->tw = r->pw = r->ew = NAN;
    rc = parse_args(argc, argv, r);
    if (rc < 0)
        rc = pick_output(r) < 0                ? EERL_EXIT_USAGE
             : load_runs(r) < 0 || draw(r) < 0 ? EERL_EXIT_FAIL
                                               : EERL_EXIT_OK;
    if (r->dir[0])
        rm_dir(r->dir);
    if (r->s)
        for (i = 0; i < r->n; i++)
            eerl__an_series_free(&r->s[i]);
    free(r->s);
    free(r);
    return rc;
}
