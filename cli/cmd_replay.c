/* eerl replay TRACE.jsonl: rebuilds the controller from the trace's header line, feeds it the
 * recorded observations in order, prints its decisions, and checks them against the events and
 * requests the trace recorded. Any difference is reported (line, update, recorded vs replayed)
 * and makes the exit status 1. A trace of several segments (a resumed job's, docs/trace-format.md)
 * is replayed segment by segment, each from its own header and resume record. Owns the controller
 * and the file it reads. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "eerl/tools/trace.h"
#include "cli.h"

#define CMD "replay"
#define EV_CAP 256

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: eerl replay TRACE.jsonl [--json] [--all] [--quiet]\n\n"
        "Feeds a recorded trace to a fresh controller built from the trace's header and prints\n"
        "its decisions. Where the trace recorded the controller's events and requests, the\n"
        "replayed ones must match exactly; every difference is reported and the exit status\n"
        "is 1. A trace an older revision of the controller decided (its header names it) is\n"
        "refused with exit status 3: the eerl version that wrote it replays it\n"
        "(docs/trace-format.md).\n\n"
        "  --json   one JSON object per event on stdout (every event)\n"
        "  --all    text output includes 'hold' and 'skip' events\n"
        "  --quiet  print only mismatches and the summary\n"
        "  TRACE.jsonl may be '-' for standard input.\n");
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof(a));
}

static const char *diff_event(const eerl_event *a, const eerl_event *b)
{
    if (a->kind != b->kind)
        return "kind";
    if (a->state != b->state)
        return "state";
    if (!eerl_setting_equal(&a->candidate, &b->candidate))
        return "candidate";
    if (!eerl_setting_equal(&a->next, &b->next))
        return "next";
    if (a->verdict != b->verdict)
        return "verdict";
    if (a->n_updates != b->n_updates)
        return "n_updates";
    if (!same_double(a->time_ratio, b->time_ratio))
        return "time_ratio";
    if (!same_double(a->energy_ratio, b->energy_ratio))
        return "energy_ratio";
    if (!same_double(a->meas_time_ratio, b->meas_time_ratio))
        return "meas_time_ratio";
    if (!same_double(a->meas_energy_ratio, b->meas_energy_ratio))
        return "meas_energy_ratio";
    if (strcmp(a->reason, b->reason))
        return "reason";
    return NULL;
}

static void print_event(const eerl_event *ev, int json)
{
    char a[48], b[48];

    if (json) {
        char *text = NULL;
        if (eerl_trace_event_json(ev, &text) == 0) {
            /* The trace keeps a missing ratio as the string "nan" (so it reads back exactly);
             * printed here for a program, it is null, as in every other --json. */
            json_t *o = json_loads(text, 0, NULL), *v;
            const char *k;

            json_object_foreach(o, k, v)
            {
                if (json_is_string(v) && !strcmp(json_string_value(v), "nan"))
                    json_object_set_new(o, k, json_null());
            }
            char *out =
                o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))
                  : NULL;

            puts(out ? out : text);
            free(out);
            json_decref(o);
            free(text);
        }
        return;
    }
    printf("update %-5llu %-10s %-11s %-20s -> %-20s", (unsigned long long)ev->update,
           eerl_event_kind_name(ev->kind), eerl_state_name(ev->state),
           eerl_setting_str(&ev->candidate, a, sizeof(a)),
           eerl_setting_str(&ev->next, b, sizeof(b)));
    if (ev->verdict != EERL_VERDICT_NONE)
        printf(" %s", eerl_verdict_name(ev->verdict));
    if (!isnan(ev->time_ratio))
        printf(" time %.4f energy %.4f", ev->time_ratio, ev->energy_ratio);
    printf("  %s\n", ev->reason);
}

struct opts {
    const char *path;
    int json, all, quiet;
};

/* One replay: the trace being read, the controller it rebuilt, what was counted. */
struct replay {
    struct opts o;
    size_t lineno;
    struct eerl_trace_header *h;
    struct eerl_trace_update u;
    eerl_event *rec, *out; /* recorded and replayed events, EV_CAP each */
    eerl_ctl *ctl;
    unsigned long long updates, events, mismatches, rejected;
    unsigned long long seg_updates; /* updates of the current segment (after its header) */

    int refused; /* an older revision decided the trace */
};

/* -1: go on; else the exit status (help, bad input: said). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(argv[i], "--json")) {
            o->json = 1;
        } else if (!strcmp(argv[i], "--all")) {
            o->all = 1;
        } else if (!strcmp(argv[i], "--quiet")) {
            o->quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            eerl_cli_err(CMD, "unknown option '%s' (valid: --json, --all, --quiet)", argv[i]);
            return EERL_EXIT_USAGE;
        } else if (!o->path) {
            o->path = argv[i];
        } else {
            eerl_cli_err(CMD, "more than one trace given ('%s' and '%s')", o->path, argv[i]);
            return EERL_EXIT_USAGE;
        }
    }
    if (!o->path) {
        usage(stderr);
        return EERL_EXIT_USAGE;
    }
    return -1;
}

/* The header line: the controller the trace was recorded with. 0, or -1 (said; rp->refused set
 * where an older revision decided the trace). */
static int on_header(struct replay *rp, const char *line)
{
    char why[400];
    struct eerl_trace_header *h = rp->h;
    int err = eerl_trace_parse_header(line, h, why, sizeof(why));

    if (err == 0 && (err = eerl_trace_header_replayable(h, why, sizeof(why))) == EERL_EVERSION)
        rp->refused = 1;
    if (err < 0) {
        eerl_cli_err(CMD, "%s:%zu: %s", rp->o.path, rp->lineno, why);
        return -1;
    }
    err = eerl_trace_header_ctl_new(h, &rp->ctl);
    if (err < 0) {
        eerl_cli_err(CMD, "%s:%zu: cannot build the controller: %s", rp->o.path, rp->lineno,
                     eerl_strerror(err));
        return -1;
    }
    return 0;
}

/* The session restored a saved state before its first update: restore the same bytes, so the
 * replay starts where the run did (or refuses it the same way). 0, or -1 (said). */
static int on_resume(struct replay *rp, const char *line)
{
    char tag[64], why[256], rwhy[400];
    unsigned char *st = NULL;
    size_t st_len = 0;
    int err = eerl_trace_parse_resume(line, tag, sizeof(tag), &st, &st_len, why, sizeof(why));

    if (err < 0) {
        eerl_cli_err(CMD, "%s:%zu: %s", rp->o.path, rp->lineno, why);
        return -1;
    }
    if (err == 0) {
        err = eerl_ctl_restore(rp->ctl, tag, st, st_len, rwhy, sizeof(rwhy));
        free(st);
        if (err == EERL_EPARSE || err == EERL_EINVAL) {
            eerl_cli_err(CMD, "%s:%zu: the recorded saved state: %s", rp->o.path, rp->lineno, rwhy);
            return -1;
        }
    }
    return 0;
}

/* The recorded events of the update against the n_out replayed ones: every difference said. */
static void compare_events(struct replay *rp, size_t n_out)
{
    const struct eerl_trace_update *u = &rp->u;
    size_t k, n_cmp;

    if (u->n_events != n_out) {
        rp->mismatches++;
        fprintf(stderr, "eerl replay: %s:%zu (update %llu): %zu events recorded, %zu replayed\n",
                rp->o.path, rp->lineno, (unsigned long long)u->obs.update, u->n_events, n_out);
    }
    n_cmp = u->n_events < n_out ? u->n_events : n_out;
    if (n_cmp > EV_CAP)
        n_cmp = EV_CAP;
    for (k = 0; k < n_cmp; k++) {
        const eerl_event *a = &rp->rec[k], *b = &rp->out[k];
        const char *field = diff_event(a, b);

        if (!field)
            continue;
        rp->mismatches++;
        fprintf(stderr,
                "eerl replay: %s:%zu (update %llu): event %zu differs in %s:\n"
                "  recorded: %s %s '%s'\n  replayed: %s %s '%s'\n",
                rp->o.path, rp->lineno, (unsigned long long)u->obs.update, k, field,
                eerl_event_kind_name(a->kind), eerl_verdict_name(a->verdict), a->reason,
                eerl_event_kind_name(b->kind), eerl_verdict_name(b->verdict), b->reason);
    }
}

/* An update line: the controller observes it, its events are printed and checked. 0, or -1
 * (said). */
static int on_update(struct replay *rp, const char *line)
{
    struct eerl_trace_update *u = &rp->u;
    eerl_setting before, next;
    char why[256];
    size_t n_out, k;
    int err = eerl_trace_parse_update(line, u, rp->rec, EV_CAP, why, sizeof(why));

    if (err < 0) {
        eerl_cli_err(CMD, "%s:%zu: %s", rp->o.path, rp->lineno, why);
        return -1;
    }
    rp->updates++;
    rp->seg_updates++;
    eerl_ctl_setting(rp->ctl, &before);
    if (u->has_requested && !eerl_setting_equal(&before, &u->requested)) {
        char a[48], b[48];
        rp->mismatches++;
        fprintf(stderr,
                "eerl replay: %s:%zu (update %llu): requested setting: recorded %s, "
                "replayed %s\n",
                rp->o.path, rp->lineno, (unsigned long long)u->obs.update,
                eerl_setting_str(&u->requested, a, sizeof(a)),
                eerl_setting_str(&before, b, sizeof(b)));
    }
    err = eerl_ctl_observe(rp->ctl, &u->obs, &next);
    if (err == EERL_EINVAL)
        rp->rejected++;
    n_out = eerl_ctl_events(rp->ctl, rp->out, EV_CAP);
    rp->events += n_out;
    for (k = 0; k < n_out; k++)
        if (rp->o.json || (!rp->o.quiet && (rp->o.all || (rp->out[k].kind != EERL_EV_HOLD &&
                                                          rp->out[k].kind != EERL_EV_SKIP))))
            print_event(&rp->out[k], rp->o.json);
    if (u->has_events)
        compare_events(rp, n_out);
    return 0;
}

/* One line of the trace (got bytes, its newline still there). 0: go on; 1: stop reading (a last
 * line cut short); -1: failed (said). */
static int on_line(struct replay *rp, char *line, ssize_t got)
{
    char type[32];
    int cut = got > 0 && line[got - 1] != '\n'; /* the last line, without its newline */

    rp->lineno++;
    while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
        line[--got] = 0;
    if (got == 0)
        return 0;
    if (cut && eerl_trace_line_type(line, type, sizeof(type)) < 0) {
        eerl_cli_note_cut(CMD, rp->o.path, rp->lineno); /* a write that did not finish */
        return 1;
    }
    if (!rp->ctl)
        return on_header(rp, line);
    if (eerl_trace_line_type(line, type, sizeof(type)) < 0) {
        eerl_cli_err(CMD, "%s:%zu: not a JSON object", rp->o.path, rp->lineno);
        return -1;
    }
    if (!strcmp(type, "header")) { /* a resumed session's segment: its own controller */
        eerl_ctl_free(rp->ctl);
        rp->ctl = NULL;
        rp->seg_updates = 0;
        return on_header(rp, line);
    }
    if (!strcmp(type, "resume") && rp->seg_updates == 0)
        return on_resume(rp, line);
    if (strcmp(type, "update"))
        return 0; /* other record types are for other readers */
    return on_update(rp, line);
}

static void print_summary(const struct replay *rp)
{
    eerl_ctl_status st;
    char a[48];

    eerl_ctl_get_status(rp->ctl, &st);
    fprintf(rp->o.json ? stderr : stdout,
            "replayed %llu updates (%llu refused), %llu events, %llu mismatches; %s mode, "
            "state %s%s%s\n",
            rp->updates, rp->rejected, rp->events, rp->mismatches, eerl_mode_name(st.mode),
            eerl_state_name(st.state), st.locked ? ", locked at " : "",
            st.locked ? eerl_setting_str(&st.locked_setting, a, sizeof(a)) : "");
}

int eerl_cmd_replay(int argc, char **argv)
{
    struct replay rp;
    int rc = EERL_EXIT_FAIL, r = 0;
    FILE *f = NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;

    memset(&rp, 0, sizeof(rp));
    if ((r = parse_args(argc, argv, &rp.o)) >= 0)
        return r;
    f = strcmp(rp.o.path, "-") ? fopen(rp.o.path, "r") : stdin;
    if (!f) {
        eerl_cli_err(CMD, "cannot open '%s': %s", rp.o.path, strerror(errno));
        return EERL_EXIT_FAIL;
    }
    rp.h = calloc(1, sizeof(*rp.h));
    rp.rec = calloc(EV_CAP, sizeof(*rp.rec));
    rp.out = calloc(EV_CAP, sizeof(*rp.out));
    if (!rp.h || !rp.rec || !rp.out) {
        eerl_cli_err(CMD, "out of memory");
        goto done;
    }
    while ((got = getline(&line, &cap, f)) >= 0 && (r = on_line(&rp, line, got)) == 0)
        ;
    if (r < 0) {
        if (rp.refused)
            rc = EERL_EXIT_REVISION;
        goto done;
    }
    if (ferror(f)) {
        eerl_cli_err(CMD, "reading '%s': %s", rp.o.path, strerror(errno));
        goto done;
    }
    if (!rp.ctl) {
        eerl_cli_err(CMD, "%s: empty trace (no header line)", rp.o.path);
        goto done;
    }
    print_summary(&rp);
    rc = rp.mismatches ? EERL_EXIT_FAIL : EERL_EXIT_OK;
done:
    eerl_ctl_free(rp.ctl);
    free(line);
    free(rp.h);
    free(rp.rec);
    free(rp.out);
    if (f && f != stdin)
        fclose(f);
    return rc;
}
