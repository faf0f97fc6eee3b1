/* The journal file (see journal.h): {"v":1,"gpus":[{"gpu":0,"uuid":"GPU-...","uid":1000,
 * "pid":4242}]}. jansson writes and reads it; durability comes from fsync before rename and of
 * the directory after, so a power cut leaves the old or the new journal, never half of one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "journal.h"

int eerld_journal_write(const char *dir, const struct eerld_journal_entry *e, size_t n, char *why,
                        size_t why_len)
{
    char path[4096], tmp[4200];
    json_t *o = json_object(), *arr = json_array();
    char *text = NULL;
    size_t i, len;
    int fd = -1, dfd = -1, r = -1;

    snprintf(path, sizeof(path), "%s/journal.json", dir);
    snprintf(tmp, sizeof(tmp), "%s/journal.json.tmp", dir);
    if (!o || !arr) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    for (i = 0; i < n; i++) {
        json_t *g = json_pack("{s:i,s:s,s:i,s:i}", "gpu", (json_int_t)e[i].gpu, "uuid", e[i].uuid,
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
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
        snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) < 0) {
        snprintf(why, why_len, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        (void)fsync(dfd);
    r = 0;
fail:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    free(text);
    json_decref(arr);
    json_decref(o);
    return r;
}

int eerld_journal_read(const char *dir, struct eerld_journal_entry **ret, size_t *ret_n, char *why,
                       size_t why_len)
{
    char path[4096];
    json_error_t jerr;
    json_t *o, *arr, *g;
    struct eerld_journal_entry *e = NULL;
    size_t i;

    snprintf(path, sizeof(path), "%s/journal.json", dir);
    o = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) {
        if (access(path, F_OK) < 0 && errno == ENOENT) {
            *ret = NULL;
            *ret_n = 0;
            return 0;
        }
        snprintf(why, why_len, "journal %s is malformed: %s (line %d)", path, jerr.text, jerr.line);
        return -1;
    }
    arr = json_object_get(o, "gpus");
    if (!json_is_integer(json_object_get(o, "v")) ||
        json_integer_value(json_object_get(o, "v")) != 1 || !json_is_array(arr)) {
        snprintf(why, why_len, "journal %s is malformed: needs \"v\": 1 and a \"gpus\" array",
                 path);
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

        if (!json_is_integer(gi) || json_integer_value(gi) < 0 || !json_is_string(u)) {
            snprintf(why, why_len, "journal %s is malformed: entry %zu needs \"gpu\" and \"uuid\"",
                     path, i);
            free(e);
            json_decref(o);
            return -1;
        }
        e[i].gpu = (unsigned)json_integer_value(gi);
        snprintf(e[i].uuid, sizeof(e[i].uuid), "%s", json_string_value(u));
        e[i].uid = (unsigned)json_integer_value(json_object_get(g, "uid"));
        e[i].pid = (unsigned)json_integer_value(json_object_get(g, "pid"));
    }
    *ret_n = json_array_size(arr);
    *ret = e;
    json_decref(o);
    return 0;
}
