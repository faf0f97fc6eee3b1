/* eerl replay TRACE.jsonl: rebuilds the controller from the trace's header line, feeds it the
 * recorded observations in order, prints its decisions, and checks them against the events and
 * requests the trace recorded. Any difference is reported (line, update, recorded vs replayed)
 * and makes the exit status 1. Owns the controller and the file it reads. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "core/setting.h"
#include "trace/trace.h"
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
        "is 1.\n\n"
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
        if (eerl__trace_event_json(ev, &text) == 0) {
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
           eerl__setting_str(&ev->candidate, a, sizeof(a)),
           eerl__setting_str(&ev->next, b, sizeof(b)));
    if (ev->verdict != EERL_VERDICT_NONE)
        printf(" %s", eerl_verdict_name(ev->verdict));
    if (!isnan(ev->time_ratio))
        printf(" time %.4f energy %.4f", ev->time_ratio, ev->energy_ratio);
    printf("  %s\n", ev->reason);
}

int eerl_cmd_replay(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, all = 0, quiet = 0, i, rc = EERL_EXIT_FAIL, err;
    FILE *f = NULL;
    char *line = NULL, why[256], type[32];
    size_t cap = 0, lineno = 0, k;
    ssize_t got;
    struct eerl__trace_header *h = NULL;
    struct eerl__trace_update u;
    eerl_event *rec = NULL, *out = NULL;
    eerl_ctl *ctl = NULL;
    unsigned long long updates = 0, events = 0, mismatches = 0, rejected = 0;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--all")) {
            all = 1;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            eerl_cli_err(CMD, "unknown option '%s' (valid: --json, --all, --quiet)", argv[i]);
            return EERL_EXIT_USAGE;
        } else if (!path) {
            path = argv[i];
        } else {
            eerl_cli_err(CMD, "more than one trace given ('%s' and '%s')", path, argv[i]);
            return EERL_EXIT_USAGE;
        }
    }
    if (!path) {
        usage(stderr);
        return EERL_EXIT_USAGE;
    }
    f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        eerl_cli_err(CMD, "cannot open '%s': %s", path, strerror(errno));
        return EERL_EXIT_FAIL;
    }
    h = calloc(1, sizeof(*h));
    rec = calloc(EV_CAP, sizeof(*rec));
    out = calloc(EV_CAP, sizeof(*out));
    if (!h || !rec || !out) {
        eerl_cli_err(CMD, "out of memory");
        goto done;
    }
    while ((got = getline(&line, &cap, f)) >= 0) {
        eerl_setting before, next;
        size_t n_out, n_cmp;
        int cut = got > 0 && line[got - 1] != '\n'; /* the last line, without its newline */

        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (got == 0)
            continue;
        if (cut && eerl__trace_line_type(line, type, sizeof(type)) < 0) {
            eerl_cli_note_cut(CMD, path, lineno); /* a write that did not finish */
            break;
        }
        if (!ctl) {
            err = eerl__trace_parse_header(line, h, why, sizeof(why));
            if (err < 0) {
                eerl_cli_err(CMD, "%s:%zu: %s", path, lineno, why);
                goto done;
            }
            err = eerl_ctl_new(h->mode, &h->cfg, h->clocks, h->n_clocks, h->peak, &ctl);
            if (err < 0) {
                eerl_cli_err(CMD, "%s:%zu: cannot build the controller: %s", path, lineno,
                             eerl_strerror(err));
                goto done;
            }
            continue;
        }
        if (eerl__trace_line_type(line, type, sizeof(type)) < 0) {
            eerl_cli_err(CMD, "%s:%zu: not a JSON object", path, lineno);
            goto done;
        }
        if (!strcmp(type, "resume") && updates == 0) {
            /* The session restored a saved state before its first update: restore the same
             * bytes, so the replay starts where the run did (or refuses it the same way). */
            char tag[64], rwhy[400];
            unsigned char *st = NULL;
            size_t st_len = 0;

            err = eerl__trace_parse_resume(line, tag, sizeof(tag), &st, &st_len, why, sizeof(why));
            if (err < 0) {
                eerl_cli_err(CMD, "%s:%zu: %s", path, lineno, why);
                goto done;
            }
            if (err == 0) {
                err = eerl_ctl_restore(ctl, tag, st, st_len, rwhy, sizeof(rwhy));
                free(st);
                if (err == EERL_EPARSE || err == EERL_EINVAL) {
                    eerl_cli_err(CMD, "%s:%zu: the recorded saved state: %s", path, lineno, rwhy);
                    goto done;
                }
            }
            continue;
        }
        if (strcmp(type, "update"))
            continue; /* other record types are for other readers */
        err = eerl__trace_parse_update(line, &u, rec, EV_CAP, why, sizeof(why));
        if (err < 0) {
            eerl_cli_err(CMD, "%s:%zu: %s", path, lineno, why);
            goto done;
        }
        updates++;
        eerl_ctl_setting(ctl, &before);
        if (u.has_requested && !eerl_setting_equal(&before, &u.requested)) {
            char a[48], b[48];
            mismatches++;
            fprintf(stderr,
                    "eerl replay: %s:%zu (update %llu): requested setting: recorded %s, "
                    "replayed %s\n",
                    path, lineno, (unsigned long long)u.obs.update,
                    eerl__setting_str(&u.requested, a, sizeof(a)),
                    eerl__setting_str(&before, b, sizeof(b)));
        }
        err = eerl_ctl_observe(ctl, &u.obs, &next);
        if (err == EERL_EINVAL)
            rejected++;
        n_out = eerl_ctl_events(ctl, out, EV_CAP);
        events += n_out;
        for (k = 0; k < n_out; k++)
            if (json ||
                (!quiet && (all || (out[k].kind != EERL_EV_HOLD && out[k].kind != EERL_EV_SKIP))))
                print_event(&out[k], json);
        if (!u.has_events)
            continue;
        if (u.n_events != n_out) {
            mismatches++;
            fprintf(stderr,
                    "eerl replay: %s:%zu (update %llu): %zu events recorded, %zu replayed\n", path,
                    lineno, (unsigned long long)u.obs.update, u.n_events, n_out);
        }
        n_cmp = u.n_events < n_out ? u.n_events : n_out;
        if (n_cmp > EV_CAP)
            n_cmp = EV_CAP;
        for (k = 0; k < n_cmp; k++) {
            const char *field = diff_event(&rec[k], &out[k]);
            if (field) {
                mismatches++;
                fprintf(stderr,
                        "eerl replay: %s:%zu (update %llu): event %zu differs in %s:\n"
                        "  recorded: %s %s '%s'\n  replayed: %s %s '%s'\n",
                        path, lineno, (unsigned long long)u.obs.update, k, field,
                        eerl_event_kind_name(rec[k].kind), eerl_verdict_name(rec[k].verdict),
                        rec[k].reason, eerl_event_kind_name(out[k].kind),
                        eerl_verdict_name(out[k].verdict), out[k].reason);
            }
        }
    }
    if (ferror(f)) {
        eerl_cli_err(CMD, "reading '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!ctl) {
        eerl_cli_err(CMD, "%s: empty trace (no header line)", path);
        goto done;
    }
    {
        eerl_ctl_status st;
        char a[48];
        eerl_ctl_get_status(ctl, &st);
        fprintf(json ? stderr : stdout,
                "replayed %llu updates (%llu refused), %llu events, %llu mismatches; %s mode, "
                "state %s%s%s\n",
                updates, rejected, events, mismatches, eerl_mode_name(st.mode),
                eerl_state_name(st.state), st.locked ? ", locked at " : "",
                st.locked ? eerl__setting_str(&st.locked_setting, a, sizeof(a)) : "");
    }
    rc = mismatches ? EERL_EXIT_FAIL : EERL_EXIT_OK;
done:
    eerl_ctl_free(ctl);
    free(line);
    free(h);
    free(rec);
    free(out);
    if (f && f != stdin)
        fclose(f);
    return rc;
}
