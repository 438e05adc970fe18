/*
 * destroy.c - librdkafka consumers closed, and handles destroyed, within bounds
 * (kafka_internal.h).
 *
 * rd_kafka_consumer_close() waits for the group's coordinator without bound: a consumer
 * is closed on a queue of its own until a deadline instead, then destroyed without the
 * close if it did not finish.
 *
 * rd_kafka_destroy() of a group consumer whose coordinator is gone waits for the offset
 * commit of its unassigned partitions to fail, which librdkafka 2.0 (Debian 12's) does
 * only after the group's session timeout (45 s by default), while its main thread spins
 * on a CPU: a worker stopped during a Kafka outage stayed alive and busy for about a
 * minute. Handles are therefore destroyed on a thread of their own and waited for
 * within a bound; past it the handle is abandoned to that thread, counted and logged,
 * and the process, which is ending, ends without it (cmr_kafka_process_end).
 *
 * Ownership: a destroy job belongs to its waiter until the bound passes, then to its
 * thread, which frees it when the destroy returns (the `abandoned` flag, under the
 * job's mutex, says which).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "kafka_internal.h"

typedef struct destroy_job {
    rd_kafka_t *rk;
    int flags;
    cmr_kafka_destroy_fn *destroy;
    pthread_mutex_t lock; /* guards done and abandoned */
    pthread_cond_t cond;  /* CLOCK_MONOTONIC: signalled when done */
    bool done, abandoned;
} destroy_job_t;

/* handles abandoned whose destroy has not returned yet */
static atomic_int abandoned_running;

static void real_destroy(rd_kafka_t *rk, int flags)
{
    rd_kafka_destroy_flags(rk, flags);
}

static void job_free(destroy_job_t *job)
{
    pthread_cond_destroy(&job->cond);
    pthread_mutex_destroy(&job->lock);
    free(job);
}

static void *destroy_main(void *arg)
{
    destroy_job_t *job = arg;
    job->destroy(job->rk, job->flags);
    pthread_mutex_lock(&job->lock);
    job->done = true;
    bool abandoned = job->abandoned;
    pthread_cond_signal(&job->cond);
    pthread_mutex_unlock(&job->lock);
    if (abandoned) {
        atomic_fetch_sub(&abandoned_running, 1);
        job_free(job);
    }
    return NULL;
}

static destroy_job_t *job_new(rd_kafka_t *rk, int flags, cmr_kafka_destroy_fn *destroy)
{
    destroy_job_t *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&job->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) {
        free(job);
        return NULL;
    }
    pthread_mutex_init(&job->lock, NULL);
    job->rk = rk;
    job->flags = flags;
    job->destroy = destroy ? destroy : real_destroy;
    return job;
}

bool cmr_kafka_destroy_within(rd_kafka_t *rk, int flags, int timeout_ms, cmr_kafka_destroy_fn *destroy)
{
    char name[128];
    snprintf(name, sizeof name, "%s", rd_kafka_name(rk));
    destroy_job_t *job = job_new(rk, flags, destroy);
    pthread_t thread;
    if (!job || pthread_create(&thread, NULL, destroy_main, job) != 0) {
        /* no thread to bound it with: destroyed here, as librdkafka would */
        cmr_log(CMR_LOG_WARN, "kafka.destroy_unbounded", "client=%s reason=\"no thread for a bounded destroy\"", name);
        (destroy ? destroy : real_destroy)(rk, flags);
        if (job)
            job_free(job);
        return true;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    int64_t ns = deadline.tv_nsec + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&job->lock);
    while (!job->done && pthread_cond_timedwait(&job->cond, &job->lock, &deadline) == 0)
        ;
    bool done = job->done;
    if (!done) {
        job->abandoned = true;
        atomic_fetch_add(&abandoned_running, 1);
    }
    pthread_mutex_unlock(&job->lock);
    if (done) {
        pthread_join(thread, NULL);
        job_free(job);
        return true;
    }
    pthread_detach(thread);
    cmr_log(CMR_LOG_WARN, "kafka.destroy_abandoned",
            "client=%s waited_ms=%d effect=\"the handle is left to finish on its own thread; the process ends "
            "without waiting for it\"",
            name, timeout_ms);
    return false;
}

/* rd_kafka_consumer_close() of rk until deadline_ms, on a queue of its own, each rebalance
 * event met handed to on_rebalance (may be NULL) as librdkafka's close would. true when
 * closed; false when the deadline passed (logged) or the close could not start. */
static bool close_until(rd_kafka_t *rk, int64_t deadline_ms, cmr_kafka_rebalance_fn *on_rebalance, void *opaque)
{
    int64_t t0 = cmr_mono_ms();
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_error_t *error = q ? rd_kafka_consumer_close_queue(rk, q) : NULL;
    bool closed = false;
    if (!q || error) {
        cmr_log(CMR_LOG_WARN, "kafka.close_failed", "client=%s error=\"%s\"", rd_kafka_name(rk),
                error ? rd_kafka_error_string(error) : "out of memory");
    } else {
        while (!(closed = rd_kafka_consumer_closed(rk)) && cmr_mono_ms() < deadline_ms) {
            rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);
            if (ev && rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE && on_rebalance)
                on_rebalance(rk, ev, opaque);
            if (ev)
                rd_kafka_event_destroy(ev);
        }
        if (!closed)
            cmr_log(CMR_LOG_WARN, "kafka.close_timeout",
                    "client=%s waited_ms=%lld effect=\"left without leaving the group: its partitions move after the "
                    "session timeout\"",
                    rd_kafka_name(rk), (long long)(cmr_mono_ms() - t0));
    }
    if (error)
        rd_kafka_error_destroy(error);
    if (q)
        rd_kafka_queue_destroy(q);
    return closed;
}

bool cmr_kafka_close_within(rd_kafka_t *rk, int64_t deadline_ms, cmr_kafka_rebalance_fn *on_rebalance, void *opaque)
{
    bool closed = close_until(rk, deadline_ms, on_rebalance, opaque);
    return cmr_kafka_destroy_within(rk, closed ? 0 : RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE, CMR_KAFKA_DESTROY_WAIT_MS,
                                    NULL);
}

int cmr_kafka_abandoned_handles(void)
{
    return atomic_load(&abandoned_running);
}

int cmr_kafka_process_end(int rc)
{
    if (atomic_load(&abandoned_running) == 0)
        return rc;
    /* a librdkafka thread is still inside a destroy: exit()'s handlers (OpenSSL's, the C++
     * runtime's) must not run under it */
    cmr_log(CMR_LOG_INFO, "kafka.process_end", "abandoned_handles=%d", atomic_load(&abandoned_running));
    fflush(NULL);
    _exit(rc);
}
