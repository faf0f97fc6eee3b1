/* The journal file (see journal.h): {"v":1,"gpus":[{"gpu":0,"uuid":"GPU-...","uid":1000,
 * "pid":4242}]}. jansson writes and reads it; durability comes from fsync before rename and of
 * the directory after, so a power cut leaves the old or the new journal, never half of one.
 * Every open is relative to the state dir's fd, checked by the caller, and never follows a
 * link: the temp file is created afresh (safefile.h), the journal read with O_NOFOLLOW. */
#define _GNU_SOURCE /* O_NOFOLLOW */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "journal.h"
#include "eerl/tools/safefile.h"

#define JOURNAL "journal.json"
#define JOURNAL_TMP "journal.json.tmp"

int eerld_journal_write(int dfd, const char *dir, const struct eerld_journal_entry *e, size_t n,
                        char *why, size_t why_len)
{
    json_t *o = json_object(), *arr = json_array();
    char *text = NULL;
    size_t i, len;
    int fd = -1, r = -1;

    if (!o || !arr) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    for (i = 0; i < n; i++) {
        json_t *g = json_pack("{s:i,s:s,s:I,s:I}", "gpu", (json_int_t)e[i].gpu, "uuid", e[i].uuid,
                              "uid", (json_int_t)e[i].uid, "pid", (json_int_t)e[i].pid);
        json_array_append_new(arr, g);
    }
    json_object_set_new(o, "v", json_integer(1));
    json_object_set(o, "gpus", arr);
    text = json_dumps(o, JSON_COMPACT);
    if (!text) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    len = strlen(text);
    fd = eerl_safe_create(dfd, JOURNAL_TMP, 0600);
    if (fd < 0) {
        snprintf(why, why_len, "cannot create %s/%s: %s", dir, JOURNAL_TMP, strerror(errno));
        goto fail;
    }
    if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
        snprintf(why, why_len, "cannot write %s/%s: %s", dir, JOURNAL_TMP, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    if (renameat(dfd, JOURNAL_TMP, dfd, JOURNAL) < 0) {
        snprintf(why, why_len, "cannot rename %s/%s to %s: %s", dir, JOURNAL_TMP, JOURNAL,
                 strerror(errno));
        goto fail;
    }
    (void)fsync(dfd);
    r = 0;
fail:
    if (fd >= 0)
        close(fd);
    free(text);
    json_decref(arr);
    json_decref(o);
    return r;
}

/* A uid or pid: an integer 0 .. 2^32-1, never a default. */
static int get_id(json_t *g, const char *key, unsigned *ret)
{
    json_t *v = json_object_get(g, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX)
        return -1;
    *ret = (unsigned)json_integer_value(v);
    return 0;
}

int eerld_journal_read(int dfd, const char *dir, struct eerld_journal_entry **ret, size_t *ret_n,
                       char *why, size_t why_len)
{
    json_error_t jerr;
    json_t *o, *arr, *g;
    struct eerld_journal_entry *e = NULL;
    size_t i;
    int fd = openat(dfd, JOURNAL, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0) {
        if (errno == ENOENT) {
            *ret = NULL;
            *ret_n = 0;
            return 0;
        }
        snprintf(why, why_len, "journal %s/%s cannot be read: %s%s", dir, JOURNAL, strerror(errno),
                 errno == ELOOP ? " (it is a symbolic link)" : "");
        return -1;
    }
    o = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!o) {
        snprintf(why, why_len, "journal %s/%s is malformed: %s (line %d)", dir, JOURNAL, jerr.text,
                 jerr.line);
        return -1;
    }
    arr = json_object_get(o, "gpus");
    if (!json_is_integer(json_object_get(o, "v")) ||
        json_integer_value(json_object_get(o, "v")) != 1 || !json_is_array(arr)) {
        snprintf(why, why_len, "journal %s/%s is malformed: needs \"v\": 1 and a \"gpus\" array",
                 dir, JOURNAL);
        json_decref(o);
        return -1;
    }
    e = calloc(json_array_size(arr) + 1, sizeof(*e));
    if (!e) {
        json_decref(o);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    json_array_foreach(arr, i, g)
    {
        json_t *gi = json_object_get(g, "gpu"), *u = json_object_get(g, "uuid");

        if (!json_is_integer(gi) || json_integer_value(gi) < 0 ||
            json_integer_value(gi) > (json_int_t)UINT32_MAX || !json_is_string(u) ||
            get_id(g, "uid", &e[i].uid) < 0 || get_id(g, "pid", &e[i].pid) < 0) {
            snprintf(why, why_len,
                     "journal %s/%s is malformed: entry %zu needs \"gpu\", \"uuid\", and \"uid\" "
                     "and \"pid\" as integers 0-4294967295",
                     dir, JOURNAL, i);
            free(e);
            json_decref(o);
            return -1;
        }
        e[i].gpu = (unsigned)json_integer_value(gi);
        snprintf(e[i].uuid, sizeof(e[i].uuid), "%s", json_string_value(u));
    }
    *ret_n = json_array_size(arr);
    *ret = e;
    json_decref(o);
    return 0;
}
