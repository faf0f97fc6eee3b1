/* Owns the per-test scratch directory. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[512];
static char pathbuf[1024];

const char *tu_tmpdir(void)
{
    const char *base;

    if (tmpdir[0])
        return tmpdir;
    base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/eerl-test-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        abort();
    }
    return tmpdir;
}

const char *tu_write_file(const char *name, const char *text)
{
    FILE *f;

    snprintf(pathbuf, sizeof(pathbuf), "%s/%s", tu_tmpdir(), name);
    f = fopen(pathbuf, "w");
    if (!f) {
        perror(pathbuf);
        abort();
    }
    fputs(text, f);
    fclose(f);
    return pathbuf;
}

char *tu_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else if (buf) {
            buf[n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

void tu_cleanup(void)
{
    char cmd[600];

    if (!tmpdir[0])
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    tmpdir[0] = '\0';
}

const eerl_ctl_config *tu_paper_cfg(eerl_mode mode)
{
    static eerl_ctl_config c[EERL_MODE_COUNT];

    if ((unsigned)mode >= EERL_MODE_COUNT || eerl_ctl_config_default(mode, &c[mode]) < 0)
        abort();
    c[mode].strategy = EERL_STRATEGY_PAPER;
    return &c[mode];
}
