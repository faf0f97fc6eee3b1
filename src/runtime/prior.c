/* See prior.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "eerl/error.h"
#include "runtime/prior.h"
#include "runtime/resume.h"

#define PRIOR_MAX 4096 /* saved states read at most: the most recent */

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

/* A file of the directory that names a state: its path and when it was written. */
struct cand {
    char *path;
    struct timespec mtime;
    int keep;
};

/* What the directory held besides the states read: entries named like states that are none,
 * and states past the cap (the oldest). Said in the detail. */
struct skipped {
    size_t bad, over;
    char first[600];
};

/* f's state file in dir (f itself, or f/eerl-controller.state for a subdirectory) into p: 1 when
 * it names one, 0 when f is no candidate (another name, a subdirectory without a state). */
static int state_of(const char *dir, const char *f, char *p, size_t len)
{
    struct stat sb;

    if (f[0] == '.' || (size_t)snprintf(p, len, "%s/%s", dir, f) >= len)
        return 0;
    if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if ((size_t)snprintf(p, len, "%s/%s/%s", dir, f, EERL__RESUME_FILE) >= len)
            return 0;
        return lstat(p, &sb) == 0;
    }
    return ends_with(f, ".state");
}

/* Checks a candidate's type and size before anything is read: 0 and its mtime when it can be a
 * saved state, else -1 with the reason in sk. */
static int check_cand(const char *p, struct timespec *mtime, struct skipped *sk)
{
    struct stat sb;
    const char *bad = NULL;

    if (stat(p, &sb) < 0)
        bad = strerror(errno);
    else if (!S_ISREG(sb.st_mode))
        bad = "not a regular file";
    else if (sb.st_size <= 0)
        bad = "empty";
    else if ((unsigned long long)sb.st_size > eerl__resume_max())
        bad = "bigger than any saved state can be";
    if (!bad) {
        *mtime = sb.st_mtim;
        return 0;
    }
    if (sk->bad++ == 0)
        snprintf(sk->first, sizeof(sk->first), "'%.500s': %s", p, bad);
    return -1;
}

static int newer_first(const void *a, const void *b)
{
    const struct cand *x = *(const struct cand *const *)a, *y = *(const struct cand *const *)b;

    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 1;
    return strcmp(y->path, x->path); /* the later name first */
}

/* Marks the PRIOR_MAX most recently written candidates to be read; counts the rest. */
static int keep_recent(struct cand *c, size_t n, struct skipped *sk)
{
    struct cand **order;
    size_t i;

    if (n <= PRIOR_MAX) {
        for (i = 0; i < n; i++)
            c[i].keep = 1;
        return 0;
    }
    order = malloc(n * sizeof(*order));
    if (!order)
        return EERL_ENOMEM;
    for (i = 0; i < n; i++)
        order[i] = &c[i];
    qsort(order, n, sizeof(*order), newer_first);
    for (i = 0; i < n; i++)
        order[i]->keep = i < PRIOR_MAX;
    sk->over = n - PRIOR_MAX;
    free(order);
    return 0;
}

/* The candidates of a directory listing, in name order; what is not a state is counted in sk. */
static int list_cands(const char *dir, struct dirent **list, int n, struct cand **ret_c,
                      size_t *ret_n, struct skipped *sk)
{
    struct cand *c = calloc((size_t)n + 1, sizeof(*c));
    char p[4096];
    size_t k = 0;
    int i;

    if (!c)
        return EERL_ENOMEM;
    for (i = 0; i < n; i++) {
        if (!state_of(dir, list[i]->d_name, p, sizeof(p)) || check_cand(p, &c[k].mtime, sk) < 0)
            continue;
        c[k].path = strdup(p);
        if (!c[k].path)
            break;
        k++;
    }
    *ret_c = c;
    *ret_n = k;
    return i < n ? EERL_ENOMEM : 0;
}

/* The directory's saved states, in name order: at most PRIOR_MAX, the most recent. */
static int read_dir(struct entries *es, const char *dir, struct skipped *sk, char *detail,
                    size_t detail_len)
{
    struct dirent **list = NULL;
    struct cand *c = NULL;
    size_t k, nc = 0;
    int i, n, e;

    n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) {
        snprintf(detail, detail_len, "prior '%s': %s", dir, strerror(errno));
        return EERL_EIO;
    }
    e = list_cands(dir, list, n, &c, &nc, sk);
    if (e == 0)
        e = keep_recent(c, nc, sk);
    for (k = 0; k < nc && e == 0; k++)
        if (c[k].keep)
            e = add_file(es, c[k].path, detail, detail_len);
    for (k = 0; c && k < nc; k++)
        free(c[k].path);
    free(c);
    for (i = 0; i < n; i++)
        free(list[i]);
    free(list);
    return e;
}

/* What was left out, appended to the detail (nothing when nothing was). */
static void say_skipped(const struct skipped *sk, char *detail, size_t detail_len)
{
    size_t n = strlen(detail);

    if (sk->bad && n < detail_len)
        n += (size_t)snprintf(detail + n, detail_len - n,
                              "; skipped %zu entr%s that %s no saved state (%s%s)", sk->bad,
                              sk->bad == 1 ? "y" : "ies", sk->bad == 1 ? "is" : "are", sk->first,
                              sk->bad > 1 ? ", ..." : "");
    if (sk->over && n < detail_len)
        snprintf(detail + n, detail_len - n,
                 "; read the %d most recent saved states and skipped the %zu older ones (at "
                 "most %d are read: move old states out of the directory)",
                 PRIOR_MAX, sk->over, PRIOR_MAX);
}

int eerl__prior_load(eerl_ctl *ctl, const char *tag, const char *path, char *detail,
                     size_t detail_len)
{
    struct entries es = {0};
    struct skipped sk = {0, 0, ""};
    struct stat sb;
    char why[480];
    int e;

    if (!path || !path[0] || stat(path, &sb) < 0) {
        snprintf(detail, detail_len, "prior '%s': %s", path ? path : "",
                 path && path[0] ? strerror(errno) : "empty path");
        return EERL_EINVAL;
    }
    e = S_ISDIR(sb.st_mode) ? read_dir(&es, path, &sk, detail, detail_len)
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
    if (e >= 0)
        say_skipped(&sk, detail, detail_len);
out:
    entries_free(&es);
    return e;
}
