/* See prior.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "eerl/error.h"
#include "runtime/prior.h"
#include "runtime/resume.h"

#define PRIOR_MAX 4096 /* entries read at most */

struct entries {
    unsigned char **buf;
    size_t *len;
    char **name;
    size_t n, cap;
};

static void entries_free(struct entries *es)
{
    size_t i;

    for (i = 0; i < es->n; i++) {
        free(es->buf[i]);
        free(es->name[i]);
    }
    free(es->buf);
    free(es->len);
    free(es->name);
}

/* Reads one file into the entries; a missing file (1 from the reader) is no entry. */
static int add_file(struct entries *es, const char *path, char *detail, size_t detail_len)
{
    unsigned char *b = NULL;
    size_t len = 0;
    int e;

    if (es->n == es->cap) {
        size_t cap = es->cap ? 2 * es->cap : 16;
        unsigned char **nb = realloc(es->buf, cap * sizeof(*nb));
        if (nb)
            es->buf = nb;
        size_t *nl = realloc(es->len, cap * sizeof(*nl));
        if (nl)
            es->len = nl;
        char **nn = realloc(es->name, cap * sizeof(*nn));
        if (nn)
            es->name = nn;
        if (!nb || !nl || !nn)
            return EERL_ENOMEM;
        es->cap = cap;
    }
    e = eerl__resume_read(path, &b, &len, detail, detail_len);
    if (e != 0)
        return e == 1 ? 0 : e;
    es->name[es->n] = strdup(path);
    if (!es->name[es->n]) {
        free(b);
        return EERL_ENOMEM;
    }
    es->buf[es->n] = b;
    es->len[es->n++] = len;
    return 0;
}

static int ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), m = strlen(end);

    return n >= m && strcmp(s + n - m, end) == 0;
}

/* The directory's entries, in name order. */
static int read_dir(struct entries *es, const char *dir, char *detail, size_t detail_len)
{
    struct dirent **list = NULL;
    char p[4096];
    struct stat sb;
    int i, n, e = 0;

    n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) {
        snprintf(detail, detail_len, "prior '%s': %s", dir, strerror(errno));
        return EERL_EIO;
    }
    for (i = 0; i < n && e == 0; i++) {
        const char *f = list[i]->d_name;
        if (es->n >= PRIOR_MAX) {
            snprintf(detail, detail_len, "prior '%s': more than %d saved states", dir, PRIOR_MAX);
            e = EERL_EINVAL;
            break;
        }
        if (f[0] == '.' || (size_t)snprintf(p, sizeof(p), "%s/%s", dir, f) >= sizeof(p))
            continue;
        if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            if ((size_t)snprintf(p, sizeof(p), "%s/%s/%s", dir, f, EERL__RESUME_FILE) < sizeof(p))
                e = add_file(es, p, detail, detail_len);
        } else if (ends_with(f, ".state")) {
            e = add_file(es, p, detail, detail_len);
        }
    }
    for (i = 0; i < n; i++)
        free(list[i]);
    free(list);
    return e;
}

int eerl__prior_load(eerl_ctl *ctl, const char *tag, const char *path, char *detail,
                     size_t detail_len)
{
    struct entries es = {0};
    struct stat sb;
    char why[480];
    int e;

    if (!path || !path[0] || stat(path, &sb) < 0) {
        snprintf(detail, detail_len, "prior '%s': %s", path ? path : "",
                 path && path[0] ? strerror(errno) : "empty path");
        return EERL_EINVAL;
    }
    e = S_ISDIR(sb.st_mode) ? read_dir(&es, path, detail, detail_len)
                            : add_file(&es, path, detail, detail_len);
    if (e < 0)
        goto out;
    e = eerl_ctl_set_prior(ctl, tag, (const void *const *)es.buf, es.len, es.n, why, sizeof(why));
    if (e == EERL_EPARSE) {
        /* why: "entry I: ..." */
        unsigned long i = strtoul(why + 6, NULL, 10);
        snprintf(detail, detail_len, "prior '%s': %s", i < es.n ? es.name[i] : path,
                 strchr(why, ':') ? strchr(why, ':') + 2 : why);
    } else if (e == 1 && es.n == 0) {
        snprintf(detail, detail_len, "prior '%s' holds no saved controller state: fresh search",
                 path);
    } else {
        snprintf(detail, detail_len, "prior '%s': %s%s", path, why, e == 1 ? ": fresh search" : "");
    }
out:
    entries_free(&es);
    return e;
}
