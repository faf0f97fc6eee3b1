/* eerl devices: lists the GPUs the NVML backend sees, one row (or JSON object) per GPU: index,
 * UUID, name, supported SM clock range and step, current SM clock, power, energy counter and
 * throttle reasons. Read-only: it never changes a clock. A reading the GPU does not support is
 * shown as "n/a" (null in JSON); any other failure is reported on stderr naming the GPU and the
 * NVML call, the other GPUs are still listed, and the exit status is 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "cli.h"

#define CMD "devices"

struct row {
    unsigned index;
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX];
    size_t n_clocks;
    unsigned step; /* 0: irregular */
    unsigned sm_mhz;
    unsigned power_mw;
    uint64_t energy_mj;
    uint64_t throttle;
    /* 0: read; EERL_ENOTSUP: not available; other <0: failed (reported) */
    int r_uuid, r_name, r_clocks, r_sm, r_power, r_energy, r_throttle;
};

static const struct {
    uint64_t bit;
    const char *name;
} throttle_names[] = {
    {EERL_THROTTLE_GPU_IDLE, "gpu_idle"},
    {EERL_THROTTLE_APP_CLOCKS, "applications_clocks"},
    {EERL_THROTTLE_SW_POWER_CAP, "sw_power_cap"},
    {EERL_THROTTLE_HW_SLOWDOWN, "hw_slowdown"},
    {EERL_THROTTLE_SYNC_BOOST, "sync_boost"},
    {EERL_THROTTLE_SW_THERMAL, "sw_thermal"},
    {EERL_THROTTLE_HW_THERMAL, "hw_thermal"},
    {EERL_THROTTLE_HW_POWER_BRAKE, "hw_power_brake"},
    {EERL_THROTTLE_DISPLAY_CLOCKS, "display_clocks"},
};
#define N_THROTTLE (sizeof(throttle_names) / sizeof(throttle_names[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: eerl devices [--json] [--socket PATH]\n\n"
                 "Lists the GPUs NVML sees: index, UUID, name, supported SM clocks at the highest\n"
                 "memory clock (min-max/step MHz, or the number of values when the steps are\n"
                 "irregular), current SM clock, power draw, the energy counter since the driver\n"
                 "loaded, and current throttle reasons. Changes nothing on the GPUs.\n\n"
                 "options:\n"
                 "  --json    print a JSON array, one object per GPU\n"
                 "  --socket PATH  read the GPUs through eerld (also when $EERL_SOCKET is set)\n"
                 "  --help    show this help\n\n"
                 "environment:\n"
                 "  EERL_NVML_LIBRARY  the NVML library to load (default libnvidia-ml.so.1)\n");
}

/* Reports a failed reading (not "unsupported") once, naming the GPU and what NVML said. */
static int check(eerl_device *dev, unsigned gpu, const char *what, int r, int *failed)
{
    if (r < 0 && r != EERL_ENOTSUP) {
        const char *detail = eerl_device_last_error(dev);

        eerl_cli_err(CMD, "GPU %u: reading the %s failed: %s%s%s%s", gpu, what, eerl_strerror(r),
                     detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
        *failed = 1;
    }
    return r;
}

/* 15 for 1980, 1965, ..., 345; 0 when the spacing varies. */
static unsigned regular_step(const unsigned *v, size_t n)
{
    size_t i;
    unsigned step;

    if (n < 2)
        return 0;
    step = v[0] - v[1];
    for (i = 2; i < n; i++)
        if (v[i - 1] - v[i] != step)
            return 0;
    return step;
}

/* Reads one GPU. A lost GPU is reported once and the rest of its readings are skipped. */
static void read_row(eerl_device *dev, unsigned gpu, struct row *w, int *failed)
{
    int *results[] = {&w->r_uuid,  &w->r_name,   &w->r_clocks,  &w->r_sm,
                      &w->r_power, &w->r_energy, &w->r_throttle};
    static const char *const what[] = {"UUID",  "name",           "supported SM clocks", "SM clock",
                                       "power", "energy counter", "throttle reasons"};
    size_t i, k;

    memset(w, 0, sizeof(*w));
    w->index = gpu;
    for (i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        int r;

        switch (i) {
        case 0:
            r = eerl_device_uuid(dev, gpu, w->uuid, sizeof(w->uuid));
            break;
        case 1:
            r = eerl_device_name(dev, gpu, w->name, sizeof(w->name));
            break;
        case 2:
            r = eerl_device_supported_sm_clocks(dev, gpu, w->clocks, EERL_DEVICE_CLOCKS_MAX,
                                                &w->n_clocks);
            break;
        case 3:
            r = eerl_device_sm_clock(dev, gpu, &w->sm_mhz);
            break;
        case 4:
            r = eerl_device_power_mw(dev, gpu, &w->power_mw);
            break;
        case 5:
            r = eerl_device_energy_mj(dev, gpu, &w->energy_mj);
            break;
        default:
            r = eerl_device_throttle_reasons(dev, gpu, &w->throttle);
            break;
        }
        if (r == EERL_EGPULOST) {
            eerl_cli_err(CMD, "GPU %u: %s (%s)", gpu, eerl_strerror(r),
                         eerl_device_last_error(dev));
            *failed = 1;
            for (k = i; k < sizeof(results) / sizeof(results[0]); k++)
                *results[k] = r;
            break;
        }
        *results[i] = check(dev, gpu, what[i], r, failed);
    }
    if (w->r_clocks == 0)
        w->step = regular_step(w->clocks, w->n_clocks);
}

static void format_clocks(const struct row *w, char *buf, size_t len)
{
    if (w->r_clocks < 0)
        snprintf(buf, len, "n/a");
    else if (w->n_clocks == 1)
        snprintf(buf, len, "%u", w->clocks[0]);
    else if (w->step)
        snprintf(buf, len, "%u-%u/%u", w->clocks[w->n_clocks - 1], w->clocks[0], w->step);
    else
        snprintf(buf, len, "%zu values %u-%u", w->n_clocks, w->clocks[w->n_clocks - 1],
                 w->clocks[0]);
}

static void format_throttle(const struct row *w, char *buf, size_t len)
{
    size_t i, used = 0;
    uint64_t rest = w->throttle;

    buf[0] = '\0';
    if (w->r_throttle < 0) {
        snprintf(buf, len, "n/a");
        return;
    }
    if (w->throttle == 0) {
        snprintf(buf, len, "none");
        return;
    }
    for (i = 0; i < N_THROTTLE; i++) {
        if (!(w->throttle & throttle_names[i].bit))
            continue;
        rest &= ~throttle_names[i].bit;
        used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "," : "",
                                 throttle_names[i].name);
    }
    if (rest)
        snprintf(buf + used, used < len ? len - used : 0, "%s0x%llx", used ? "," : "",
                 (unsigned long long)rest);
}

static void print_table(const struct row *rows, unsigned n)
{
    char clocks[64], sm[16], power[24], energy[32], thr[160];
    int wu = 4, wn = 4, wc = 13;
    unsigned i;

    for (i = 0; i < n; i++) {
        int lu = (int)strlen(rows[i].r_uuid ? "n/a" : rows[i].uuid);
        int ln = (int)strlen(rows[i].r_name ? "n/a" : rows[i].name);

        format_clocks(&rows[i], clocks, sizeof(clocks));
        wu = lu > wu ? lu : wu;
        wn = ln > wn ? ln : wn;
        wc = (int)strlen(clocks) > wc ? (int)strlen(clocks) : wc;
    }
    printf("%-3s  %-*s  %-*s  %-*s  %6s  %8s  %14s  %s\n", "GPU", wu, "UUID", wn, "NAME", wc,
           "SM CLOCKS MHz", "SM MHz", "POWER W", "ENERGY J", "THROTTLE");
    for (i = 0; i < n; i++) {
        const struct row *w = &rows[i];

        format_clocks(w, clocks, sizeof(clocks));
        format_throttle(w, thr, sizeof(thr));
        if (w->r_sm < 0)
            snprintf(sm, sizeof(sm), "n/a");
        else
            snprintf(sm, sizeof(sm), "%u", w->sm_mhz);
        if (w->r_power < 0)
            snprintf(power, sizeof(power), "n/a");
        else
            snprintf(power, sizeof(power), "%.1f", w->power_mw / 1000.0);
        if (w->r_energy < 0)
            snprintf(energy, sizeof(energy), "n/a");
        else
            snprintf(energy, sizeof(energy), "%.3f", (double)w->energy_mj / 1000.0);
        printf("%-3u  %-*s  %-*s  %-*s  %6s  %8s  %14s  %s\n", w->index, wu,
               w->r_uuid ? "n/a" : w->uuid, wn,
               w->r_name == EERL_EGPULOST ? "(GPU lost)"
               : w->r_name                ? "n/a"
                                          : w->name,
               wc, clocks, sm, power, energy, thr);
    }
}

/* One GPU as JSON; readings that are unavailable are null. */
static json_t *row_json(const struct row *w)
{
    json_t *o = json_object(), *list, *range, *names;
    size_t i;

    if (!o)
        return NULL;
    json_object_set_new(o, "index", json_integer(w->index));
    json_object_set_new(o, "lost", json_boolean(w->r_uuid == EERL_EGPULOST));
    json_object_set_new(o, "uuid", w->r_uuid ? json_null() : json_string(w->uuid));
    json_object_set_new(o, "name", w->r_name ? json_null() : json_string(w->name));
    if (w->r_clocks == 0) {
        list = json_array();
        for (i = 0; i < w->n_clocks; i++)
            json_array_append_new(list, json_integer(w->clocks[i]));
        range = json_pack("{s:I, s:I, s:o, s:I}", "min", (json_int_t)w->clocks[w->n_clocks - 1],
                          "max", (json_int_t)w->clocks[0], "step",
                          w->step ? json_integer(w->step) : json_null(), "count",
                          (json_int_t)w->n_clocks);
        json_object_set_new(o, "sm_clock_range_mhz", range);
        json_object_set_new(o, "supported_sm_clocks_mhz", list);
    } else {
        json_object_set_new(o, "sm_clock_range_mhz", json_null());
        json_object_set_new(o, "supported_sm_clocks_mhz", json_null());
    }
    json_object_set_new(o, "sm_clock_mhz", w->r_sm ? json_null() : json_integer(w->sm_mhz));
    json_object_set_new(o, "power_w", w->r_power ? json_null() : json_real(w->power_mw / 1000.0));
    json_object_set_new(o, "energy_j",
                        w->r_energy ? json_null() : json_real((double)w->energy_mj / 1000.0));
    json_object_set_new(o, "energy_mj",
                        w->r_energy ? json_null() : json_integer((json_int_t)w->energy_mj));
    if (w->r_throttle == 0) {
        names = json_array();
        for (i = 0; i < N_THROTTLE; i++)
            if (w->throttle & throttle_names[i].bit)
                json_array_append_new(names, json_string(throttle_names[i].name));
        json_object_set_new(
            o, "throttle_reasons",
            json_pack("{s:I, s:o}", "mask", (json_int_t)w->throttle, "names", names));
    } else {
        json_object_set_new(o, "throttle_reasons", json_null());
    }
    return o;
}

static int print_json(const struct row *rows, unsigned n)
{
    json_t *arr = json_array();
    char *text;
    unsigned i;

    if (!arr)
        return -1;
    for (i = 0; i < n; i++) {
        json_t *o = row_json(&rows[i]);

        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return -1;
        }
    }
    text = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(arr);
    if (!text)
        return -1;
    puts(text);
    free(text);
    return 0;
}

int eerl_cmd_devices(int argc, char **argv)
{
    eerl_device *dev;
    struct eerl_agent *agent = NULL;
    const char *sock = NULL;
    struct row *rows = NULL;
    unsigned n = 0, i;
    int json = 0, failed = 0, r, a, ret = EERL_EXIT_FAIL;

    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--json")) {
            json = 1;
        } else if (!strcmp(argv[a], "--socket") && a + 1 < argc) {
            sock = argv[++a];
        } else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else {
            eerl_cli_err(CMD, "unknown %s '%s'; valid options: --json, --socket PATH, --help",
                         argv[a][0] == '-' ? "option" : "argument", argv[a]);
            return EERL_EXIT_USAGE;
        }
    }
    /* Through eerld when asked to (--socket or $EERL_SOCKET), else NVML in-process. */
    dev = sock || getenv("EERL_SOCKET") ? eerl_cli_open_agent_devices(CMD, sock, &agent)
                                        : eerl_cli_open_devices(CMD);
    if (!dev)
        return EERL_EXIT_FAIL;
    r = eerl_device_count(dev, &n);
    if (r < 0) {
        eerl_cli_err(CMD, "counting GPUs failed: %s (%s)", eerl_strerror(r),
                     eerl_device_last_error(dev));
        goto out;
    }
    rows = calloc(n ? n : 1, sizeof(*rows));
    if (!rows) {
        eerl_cli_err(CMD, "%s", eerl_strerror(EERL_ENOMEM));
        goto out;
    }
    for (i = 0; i < n; i++)
        read_row(dev, i, &rows[i], &failed);
    if (json) {
        if (print_json(rows, n) < 0) {
            eerl_cli_err(CMD, "could not build the JSON output: %s", eerl_strerror(EERL_ENOMEM));
            goto out;
        }
    } else if (n == 0) {
        printf("no GPUs\n");
    } else {
        print_table(rows, n);
    }
    ret = failed ? EERL_EXIT_FAIL : EERL_EXIT_OK;
out:
    free(rows);
    eerl_device_free(dev);
    eerl_agent_free(agent);
    return ret;
}
