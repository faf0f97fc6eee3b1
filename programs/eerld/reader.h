/* eerld's reader thread. Device reads (read, status, metrics) run on a thread with its own device
 * handle when the backend is NVML: an H200's energy counter read takes 3-4 ms of driver time, and
 * the event loop must not make a set-phase wait behind it. The loop hands over a job; the reader
 * fills in the readings and wakes the loop through an eventfd, and the loop takes the finished
 * jobs back. Without a thread (simulated GPUs, whose reads cost nanoseconds) a job is done at
 * once on the loop's thread. The thread touches nothing but its device handle and the job; it
 * knows nothing of connections (a job's owner is the caller's). Owns the thread, its device
 * handle and the eventfd; borrows the loop's device handle and the metrics dir's fd. */
#ifndef EERLD_READER_H
#define EERLD_READER_H

#include <pthread.h>
#include <stddef.h>

#include <jansson.h>

#include "eerl/device.h"
#include "eerl/tools/protocol.h"

#include "metrics.h"

struct eerld_job {
    void *owner; /* the caller's (a connection); NULL: a metrics job */
    unsigned gpus[EERL_AGENT_GPU_INDEX_MAX + 1];
    size_t n;
    json_t *reply; /* built by the loop; the reader adds readings */
    json_t *items; /* status: the per-GPU objects to add readings to (borrowed from reply) */
    struct eerld_metrics_gpu *metrics; /* metrics job: snapshot of lease state */
    struct eerld_job *next;
};

struct eerld_reader {
    eerl_device *loop_dev; /* borrowed: reads run on it when there is no thread */
    eerl_device *dev;      /* the thread's own handle */
    pthread_t t;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct eerld_job *todo, *todo_tail, *done;
    int stop;
    int efd;
    int metrics_fd; /* borrowed */
    const char *metrics_path, *metrics_name;
    unsigned n_gpus;
};

/* A job reading gpus (n of them), or NULL without memory. */
struct eerld_job *eerld_job_new(const unsigned *gpus, size_t n);
void eerld_job_free(struct eerld_job *j);

/* Sets rd up to run jobs inline on dev; the metrics file is name in the dir open as metrics_fd
 * (path: the whole path, for messages). */
void eerld_reader_init(struct eerld_reader *rd, eerl_device *dev, int metrics_fd,
                       const char *metrics_path, const char *metrics_name, unsigned n_gpus);

/* Starts the thread if the backend is NVML, its eventfd registered with epfd under tag. If it
 * cannot start, says so and jobs keep running inline. */
void eerld_reader_start(struct eerld_reader *rd, int epfd, void *tag);

/* Runs j: returns 1 if it ran at once (the caller finishes it), 0 if the thread has it (it comes
 * back from eerld_reader_take). */
int eerld_reader_submit(struct eerld_reader *rd, struct eerld_job *j);

/* The jobs the thread finished, oldest first (linked by next), after its eventfd woke the loop. */
struct eerld_job *eerld_reader_take(struct eerld_reader *rd);

/* Stops the thread and returns the jobs it had not handed back (linked by next), for the caller
 * to drop. */
struct eerld_job *eerld_reader_stop(struct eerld_reader *rd);

#endif
