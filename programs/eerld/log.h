/* eerld's log and clock: messages go to stderr in the foreground, to syslog otherwise, and every
 * part of the daemon reads the same monotonic clock. Owns the syslog switch only. */
#ifndef EERLD_LOG_H
#define EERLD_LOG_H

#include <syslog.h>

/* Logs to stderr in the foreground, to syslog otherwise. prio: LOG_ERR, LOG_WARNING, LOG_INFO. */
void eerld_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void eerld_log_to_syslog(int on);

/* CLOCK_MONOTONIC in seconds: heartbeats, retries and metrics intervals. */
double eerld_now_s(void);

#endif
