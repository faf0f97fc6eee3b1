/* eerld's log and clock (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "log.h"

static int log_syslog;

void eerld_log_to_syslog(int on)
{
    log_syslog = on;
    if (on)
        openlog("eerld", LOG_PID, LOG_DAEMON);
}

void eerld_log(int prio, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (log_syslog) {
        vsyslog(prio, fmt, ap);
    } else {
        fprintf(stderr, "eerld: %s",
                prio <= LOG_ERR       ? "error: "
                : prio == LOG_WARNING ? "warning: "
                                      : "");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

double eerld_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
