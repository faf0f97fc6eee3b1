/* Policy file parsing (libinih) and the decisions drawn from it. See policy.h. Every error says
 * which line and what value was wrong, because an operator reads it in the journal. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "policy.h"
#include "eerl/tools/safefile.h"

struct parse_ctx {
    struct eerld_policy *p;
    char *why;
    size_t why_len;
    int failed;
};

void eerld_policy_default(struct eerld_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->max_connections = 256;
    p->max_connections_per_user = 32;
}

static int fail(struct parse_ctx *c, const char *section, const char *key, const char *value,
                const char *what)
{
    if (!c->failed)
        snprintf(c->why, c->why_len, "[%s] %s = '%s': %s", section, key, value, what);
    c->failed = 1;
    return 0;
}

static int parse_num(const char *v, unsigned long lo, unsigned long hi, unsigned *ret)
{
    char *end;
    unsigned long x;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    x = strtoul(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *ret = (unsigned)x;
    return 0;
}

static int add_names(struct parse_ctx *c, const char *section, const char *key, const char *value,
                     char (*list)[EERLD_POLICY_NAME_LEN + 1], size_t *n)
{
    const char *s = value;

    while (*s) {
        size_t len = 0, i;

        while (*s == ',' || *s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        while (s[len] && s[len] != ',' && s[len] != ' ' && s[len] != '\t')
            len++;
        if (len > EERLD_POLICY_NAME_LEN)
            return fail(c, section, key, value, "a name is longer than 32 characters");
        for (i = 0; i < len; i++) {
            char ch = s[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
                return fail(c, section, key, value,
                            "names may hold only letters, digits, '-', '_' and '.'");
        }
        if (*n >= EERLD_POLICY_NAMES_MAX)
            return fail(c, section, key, value, "more than 256 names");
        memcpy(list[*n], s, len);
        list[*n][len] = '\0';
        (*n)++;
        s += len;
    }
    return 1;
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
    struct parse_ctx *c = user;
    struct eerld_policy *p = c->p;
    unsigned v;

    if (c->failed)
        return 0;
    if (!key) /* a section header alone (INI_CALL_HANDLER_ON_NEW_SECTION builds) */
        return 1;
    if (!strcmp(section, "access")) {
        if (!strcmp(key, "users"))
            return add_names(c, section, key, value, p->users, &p->n_users);
        if (!strcmp(key, "groups"))
            return add_names(c, section, key, value, p->groups, &p->n_groups);
        return fail(c, section, key, value, "unknown key; [access] takes users and groups");
    }
    if (!strcmp(section, "limits")) {
        if (parse_num(value, 1, 65536, &v) < 0)
            return fail(c, section, key, value, "must be an integer 1-65536");
        if (!strcmp(key, "connections"))
            p->max_connections = v;
        else if (!strcmp(key, "connections_per_user"))
            p->max_connections_per_user = v;
        else
            return fail(c, section, key, value,
                        "unknown key; [limits] takes connections and connections_per_user");
        return 1;
    }
    if (!strcmp(section, "clocks") || !strncmp(section, "gpu ", 4)) {
        unsigned *floor_mhz = &p->floor_mhz, *ceiling_mhz = &p->ceiling_mhz;

        if (section[0] == 'g') {
            unsigned g;

            if (parse_num(section + 4, 0, EERLD_POLICY_GPUS_MAX - 1, &g) < 0)
                return fail(c, section, key, value,
                            "the section must be [gpu N] with N a GPU index 0-1023");
            floor_mhz = &p->gpu[g].floor_mhz;
            ceiling_mhz = &p->gpu[g].ceiling_mhz;
        }
        if (parse_num(value, 1, 100000, &v) < 0)
            return fail(c, section, key, value, "must be a clock in MHz, 1-100000");
        if (!strcmp(key, "floor_mhz"))
            *floor_mhz = v;
        else if (!strcmp(key, "ceiling_mhz"))
            *ceiling_mhz = v;
        else
            return fail(c, section, key, value, "unknown key; takes floor_mhz and ceiling_mhz");
        return 1;
    }
    return fail(c, section, key, value,
                "unknown section; valid: [access], [limits], [clocks], [gpu N]");
}

int eerld_policy_parse(const char *text, size_t len, struct eerld_policy *p, char *why,
                       size_t why_len)
{
    struct parse_ctx c = {p, why, why_len, 0};
    char *copy = malloc(len + 1);
    unsigned g, f, ce;
    int line;

    if (!copy) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    if (strlen(copy) != len) {
        free(copy);
        snprintf(why, why_len, "the file holds a NUL byte");
        return -1;
    }
    eerld_policy_default(p);
    line = ini_parse_string(copy, handler, &c);
    free(copy);
    if (line != 0 || c.failed) {
        char detail[256];

        snprintf(detail, sizeof(detail), "%s", c.failed ? why : "not valid INI syntax");
        if (line > 0)
            snprintf(why, why_len, "line %d: %s", line, detail);
        else
            snprintf(why, why_len, "%s", detail);
        return -1;
    }
    for (g = 0; g < EERLD_POLICY_GPUS_MAX; g++) {
        eerld_policy_bounds(p, g, &f, &ce);
        if (f && ce && f > ce) {
            snprintf(why, why_len, "GPU %u: floor_mhz %u is above ceiling_mhz %u", g, f, ce);
            return -1;
        }
    }
    return 0;
}

/* The file and the directory it lives in (after links) must be root's and writable by nobody
 * else: whoever can change the policy decides who may lock clocks. */
static int policy_safe(FILE *f, const char *path, char *why, size_t why_len)
{
    char real[PATH_MAX], sub[400];
    struct stat st;

    if (eerl_safe_file(fileno(f), "policy file", path, why, why_len) < 0)
        return -1;
    if (!realpath(path, real)) {
        snprintf(why, why_len, "policy file %s: cannot resolve its path: %s", path,
                 strerror(errno));
        return -1;
    }
    if (stat(dirname(real), &st) < 0) {
        snprintf(why, why_len, "policy file %s: cannot stat its directory %s: %s", path, real,
                 strerror(errno));
        return -1;
    }
    if (eerl_safe_dir(&st, "the directory", real, 1, sub, sizeof(sub)) < 0) {
        snprintf(why, why_len, "policy file %s: %s", path, sub);
        return -1;
    }
    return 0;
}

int eerld_policy_load(const char *path, struct eerld_policy *p, char *why, size_t why_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    char sub[256];
    int r;

    if (!f) {
        snprintf(why, why_len, "cannot open policy file %s: %s", path, strerror(errno));
        return -1;
    }
    if (policy_safe(f, path, why, why_len) < 0) {
        fclose(f);
        return -1;
    }
    buf = malloc(1 << 20);
    if (buf)
        n = fread(buf, 1, 1 << 20, f);
    if (!buf || ferror(f) || !feof(f)) {
        snprintf(why, why_len, "cannot read policy file %s (or it is over 1 MiB)", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    r = eerld_policy_parse(buf, n, p, sub, sizeof(sub));
    free(buf);
    if (r < 0)
        snprintf(why, why_len, "policy file %s: %s", path, sub);
    return r;
}

static int name_is(const char *entry, const char *name, unsigned long id)
{
    unsigned v;

    if (parse_num(entry, 0, 0xffffffffu, &v) == 0)
        return v == id;
    return name && !strcmp(entry, name);
}

/* 1 if gid matches a listed group (by number, or by the name NSS gives it). */
static int group_listed(const struct eerld_policy *p, gid_t gid)
{
    struct group gr, *grr = NULL;
    char gbuf[4096];
    size_t i;

    if (getgrgid_r(gid, &gr, gbuf, sizeof(gbuf), &grr) != 0)
        grr = NULL;
    for (i = 0; i < p->n_groups; i++)
        if (name_is(p->groups[i], grr ? grr->gr_name : NULL, gid))
            return 1;
    return 0;
}

int eerld_policy_may_lease(const struct eerld_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                           size_t n_groups)
{
    struct passwd pw, *pwr = NULL;
    char buf[4096];
    size_t i;

    if (uid == 0)
        return 1;
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwr) != 0)
        pwr = NULL;
    for (i = 0; i < p->n_users; i++)
        if (name_is(p->users[i], pwr ? pwr->pw_name : NULL, uid))
            return 1;
    if (!p->n_groups)
        return 0;
    if (group_listed(p, gid))
        return 1;
    for (i = 0; i < n_groups; i++)
        if (group_listed(p, groups[i]))
            return 1;
    return 0;
}

void eerld_policy_bounds(const struct eerld_policy *p, unsigned gpu, unsigned *ret_floor,
                         unsigned *ret_ceiling)
{
    unsigned f = p->floor_mhz, c = p->ceiling_mhz;

    if (gpu < EERLD_POLICY_GPUS_MAX) {
        if (p->gpu[gpu].floor_mhz)
            f = p->gpu[gpu].floor_mhz;
        if (p->gpu[gpu].ceiling_mhz)
            c = p->gpu[gpu].ceiling_mhz;
    }
    *ret_floor = f;
    *ret_ceiling = c;
}
