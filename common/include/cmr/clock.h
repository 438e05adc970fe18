/*
 * clock.h - time: a monotonic clock for durations and deadlines, the wall clock for
 * timestamps that leave the process, and a sleep.
 *
 * Part of the toolbox (cmr_base): the one place the project reads a clock. Monotonic
 * time (CLOCK_MONOTONIC) never jumps and is what every timeout, rate limit and latency
 * measurement uses; wall time (CLOCK_REALTIME, nanoseconds since the Unix epoch) is what
 * goes on the wire and into logs. Event timestamps in call trees are wall time, so that
 * segments recorded in different JVMs line up.
 */
#ifndef CMR_CLOCK_H
#define CMR_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t cmr_clock_read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Monotonic nanoseconds (arbitrary origin): durations and deadlines. */
static inline int64_t cmr_mono_ns(void)
{
    return cmr_clock_read_ns(CLOCK_MONOTONIC);
}

static inline int64_t cmr_mono_ms(void)
{
    return cmr_mono_ns() / 1000000;
}

/* Wall-clock nanoseconds since the Unix epoch: timestamps that leave the process. */
static inline int64_t cmr_wall_ns(void)
{
    return cmr_clock_read_ns(CLOCK_REALTIME);
}

static inline int64_t cmr_wall_ms(void)
{
    return cmr_wall_ns() / 1000000;
}

/* CPU time of the whole process, in nanoseconds: what benchmarks report. */
static inline int64_t cmr_process_cpu_ns(void)
{
    return cmr_clock_read_ns(CLOCK_PROCESS_CPUTIME_ID);
}

/* Sleeps ms milliseconds (through signals: the full time unless ms <= 0). */
/* The absolute CLOCK_REALTIME time ms milliseconds from now, as pthread_cond_timedwait
 * (with a default condition variable) and pthread_timedjoin_np want their deadlines. */
static inline struct timespec cmr_wall_deadline(int64_t ms)
{
    int64_t ns = cmr_wall_ns() + ms * 1000000;
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
}

void cmr_sleep_ms(int64_t ms);

/* A duration people type: a number of milliseconds, or a number with a unit (ms, s, m,
 * h, d; "1.5s"). 0, or -1 when s is not one (or is negative or absurd: over 10 years). */
int cmr_duration_parse_ms(const char *s, int64_t *ms);

#endif
