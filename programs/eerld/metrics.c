/* Textfile metrics (see metrics.h). The format is Prometheus text exposition 0.0.4. The temp
 * file is created afresh in the directory's fd (never through a link someone planted), then
 * renamed over the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "eerl/tools/safefile.h"

int eerld_metrics_write(int dfd, const char *path, const char *name, eerl_device *dev,
                        const struct eerld_metrics_gpu *g, unsigned n, char *why, size_t why_len)
{
    char tmp[4200], tmpname[300];
    FILE *f;
    unsigned i;
    int fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    snprintf(tmpname, sizeof(tmpname), "%s.tmp", name);
    fd = eerl_safe_create(dfd, tmpname, 0644);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fprintf(f, "# HELP eerl_gpu_energy_joules_total GPU energy since the driver loaded (NVML).\n"
               "# TYPE eerl_gpu_energy_joules_total counter\n");
    for (i = 0; i < n; i++) {
        uint64_t mj;
        if (eerl_device_energy_mj(dev, i, &mj) == 0)
            fprintf(f, "eerl_gpu_energy_joules_total{gpu=\"%u\",UUID=\"%s\"} %llu.%03u\n", i,
                    g[i].uuid, (unsigned long long)(mj / 1000), (unsigned)(mj % 1000));
    }
    fprintf(f, "# HELP eerl_gpu_power_watts GPU power draw.\n# TYPE eerl_gpu_power_watts gauge\n");
    for (i = 0; i < n; i++) {
        unsigned mw;
        if (eerl_device_power_mw(dev, i, &mw) == 0)
            fprintf(f, "eerl_gpu_power_watts{gpu=\"%u\",UUID=\"%s\"} %u.%03u\n", i, g[i].uuid,
                    mw / 1000, mw % 1000);
    }
    fprintf(f, "# HELP eerl_gpu_sm_clock_mhz Current SM clock.\n"
               "# TYPE eerl_gpu_sm_clock_mhz gauge\n");
    for (i = 0; i < n; i++) {
        unsigned mhz;
        if (eerl_device_sm_clock(dev, i, &mhz) == 0)
            fprintf(f, "eerl_gpu_sm_clock_mhz{gpu=\"%u\",UUID=\"%s\"} %u\n", i, g[i].uuid, mhz);
    }
    fprintf(f, "# HELP eerl_gpu_locked_clock_mhz Upper SM clock eerld has locked (0: default "
               "governor).\n# TYPE eerl_gpu_locked_clock_mhz gauge\n");
    for (i = 0; i < n; i++)
        fprintf(f, "eerl_gpu_locked_clock_mhz{gpu=\"%u\",UUID=\"%s\"} %u\n", i, g[i].uuid,
                g[i].locked_max_mhz);
    fprintf(f, "# HELP eerl_gpu_lease_info The client holding a GPU's lease (1 per leased GPU).\n"
               "# TYPE eerl_gpu_lease_info gauge\n");
    for (i = 0; i < n; i++)
        if (g[i].leased)
            fprintf(f, "eerl_gpu_lease_info{gpu=\"%u\",UUID=\"%s\",uid=\"%u\",pid=\"%u\"} 1\n", i,
                    g[i].uuid, g[i].uid, g[i].pid);
    if (fflush(f) != 0 || ferror(f)) {
        snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
        fclose(f);
        unlinkat(dfd, tmpname, 0);
        return -1;
    }
    fclose(f);
    if (renameat(dfd, tmpname, dfd, name) < 0) {
        snprintf(why, why_len, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlinkat(dfd, tmpname, 0);
        return -1;
    }
    return 0;
}
