/* eerl status: what eerld serves, one row (or JSON object) per GPU: UUID, current SM clock,
 * power, the clock eerld has locked, the lease holder (uid, pid, client name) and the policy's
 * floor/ceiling. Also owns the helpers every daemon-talking command shares: connecting to eerld
 * (--socket PATH, else $EERL_SOCKET, else the default) with a clear error, and opening the
 * device view through it for `eerl devices --socket`. Read-only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "cli.h"

#define CMD "status"

struct eerl_agent *eerl_cli_connect_agent(const char *cmd, const char *path)
{
    eerl_agent *a = NULL;
    char why[512] = "";
    int e = eerl_agent_connect(path, "eerl", why, sizeof(why), &a);

    if (e < 0) {
        eerl_cli_err(cmd, "%s", why[0] ? why : eerl_strerror(e));
        return NULL;
    }
    return a;
}

struct eerl_device *eerl_cli_open_agent_devices(const char *cmd, const char *path,
                                                struct eerl_agent **ret_agent)
{
    eerl_agent *a = eerl_cli_connect_agent(cmd, path);
    eerl_device *dev = NULL;
    int e;

    if (!a)
        return NULL;
    e = eerl_agent_device(a, &dev);
    if (e < 0) {
        eerl_cli_err(cmd, "reading the device list from eerld failed: %s (%s)", eerl_strerror(e),
                     eerl_agent_last_error(a));
        eerl_agent_free(a);
        return NULL;
    }
    *ret_agent = a;
    return dev;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl status [--json] [--socket PATH]\n\n"
            "Shows the GPUs eerld serves: UUID, current SM clock, power, the clock eerld has\n"
            "locked, who holds the lease (uid, pid, client) and the policy's clock floor and\n"
            "ceiling. Changes nothing.\n\n"
            "options:\n"
            "  --json          print a JSON array, one object per GPU\n"
            "  --socket PATH   eerld's socket (default: $EERL_SOCKET, else %s)\n"
            "  --help          show this help\n",
            EERL_AGENT_DEFAULT_SOCKET);
}

static json_t *to_json(const struct eerl_agent_gpu_status *s)
{
    json_t *o =
        json_pack("{s:i,s:s,s:s}", "gpu", (json_int_t)s->gpu, "uuid", s->uuid, "name", s->name);

    if (s->err) {
        json_object_set_new(o, "error", json_string(eerl_err_name(s->err)));
        json_object_set_new(o, "message", json_string(s->error));
    } else {
        json_object_set_new(o, "sm_mhz", json_integer(s->sm_mhz));
        json_object_set_new(o, "power_mw", json_integer(s->power_mw));
        json_object_set_new(o, "energy_mj", json_integer((json_int_t)s->energy_mj));
    }
    json_object_set_new(o, "locked_mhz",
                        s->locked_max_mhz ? json_pack("[i,i]", (json_int_t)s->locked_min_mhz,
                                                      (json_int_t)s->locked_max_mhz)
                                          : json_null());
    json_object_set_new(o, "holder",
                        s->leased ? json_pack("{s:i,s:i}", "uid", (json_int_t)s->holder_uid, "pid",
                                              (json_int_t)s->holder_pid)
                                  : json_null());
    json_object_set_new(o, "floor_mhz", s->floor_mhz ? json_integer(s->floor_mhz) : json_null());
    json_object_set_new(o, "ceiling_mhz",
                        s->ceiling_mhz ? json_integer(s->ceiling_mhz) : json_null());
    json_object_set_new(o, "min_mhz", json_integer(s->min_mhz));
    json_object_set_new(o, "max_mhz", json_integer(s->max_mhz));
    return o;
}

int eerl_cmd_status(int argc, char **argv)
{
    struct eerl_agent_gpu_status *st = NULL;
    struct eerl_agent_info info;
    const char *sock = NULL;
    eerl_agent *a;
    size_t n = 0, i;
    int json = 0, e, ret = EERL_EXIT_FAIL, a_i;

    for (a_i = 1; a_i < argc; a_i++) {
        if (!strcmp(argv[a_i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[a_i], "--socket") && a_i + 1 < argc) {
            sock = argv[++a_i];
        } else if (!strcmp(argv[a_i], "--help") || !strcmp(argv[a_i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else {
            eerl_cli_err(CMD, "unknown %s '%s'; valid options: --json, --socket PATH, --help",
                         argv[a_i][0] == '-' ? "option" : "argument", argv[a_i]);
            return EERL_EXIT_USAGE;
        }
    }
    a = eerl_cli_connect_agent(CMD, sock);
    if (!a)
        return EERL_EXIT_FAIL;
    eerl_agent_info(a, &info);
    st = calloc(info.gpus + 1, sizeof(*st));
    if (!st)
        goto out;
    e = eerl_agent_status(a, st, info.gpus + 1, &n);
    if (e < 0) {
        eerl_cli_err(CMD, "%s (%s)", eerl_strerror(e), eerl_agent_last_error(a));
        goto out;
    }
    ret = EERL_EXIT_OK;
    if (json) {
        json_t *arr = json_array();
        char *text;

        for (i = 0; i < n; i++)
            json_array_append_new(arr, to_json(&st[i]));
        text = json_dumps(arr, JSON_INDENT(2));
        json_decref(arr);
        if (!text)
            goto out;
        puts(text);
        free(text);
    } else {
        printf("eerld: %s, %zu GPUs\n", info.server, n);
        printf("%-3s %-42s %7s %8s %11s %-26s %s\n", "GPU", "UUID", "SM MHz", "POWER W",
               "LOCKED MHz", "HOLDER", "FLOOR-CEILING MHz");
        for (i = 0; i < n; i++) {
            const struct eerl_agent_gpu_status *s = &st[i];
            char locked[32] = "-", holder[64] = "-", bounds[32] = "-";

            if (s->locked_max_mhz && s->locked_min_mhz != s->locked_max_mhz)
                snprintf(locked, sizeof(locked), "%u-%u", s->locked_min_mhz, s->locked_max_mhz);
            else if (s->locked_max_mhz)
                snprintf(locked, sizeof(locked), "%u", s->locked_max_mhz);
            if (s->leased)
                snprintf(holder, sizeof(holder), "uid %u pid %u", s->holder_uid, s->holder_pid);
            if (s->floor_mhz || s->ceiling_mhz)
                snprintf(bounds, sizeof(bounds), "%u-%u", s->floor_mhz ? s->floor_mhz : s->min_mhz,
                         s->ceiling_mhz ? s->ceiling_mhz : s->max_mhz);
            if (s->err) {
                printf("%-3u %-42s %-28s %-26s %s\n", s->gpu, s->uuid, "unreadable", holder,
                       bounds);
                eerl_cli_err(CMD, "GPU %u: %s", s->gpu, s->error);
                ret = EERL_EXIT_FAIL;
            } else {
                printf("%-3u %-42s %7u %8.1f %11s %-26s %s\n", s->gpu, s->uuid, s->sm_mhz,
                       s->power_mw / 1000.0, locked, holder, bounds);
            }
        }
    }
out:
    free(st);
    eerl_agent_free(a);
    return ret;
}
