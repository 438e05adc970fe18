/*
 * instr_resync.h - when an agent is asked again for all its classes after records of its
 * cmr.classes partition were lost (instr_worker.c, "Lost class records").
 *
 * An agent is asked once per gap: not again while its last ask is newer than the partition's
 * last gap. A later gap asks again (the resend itself may have been among the lost records),
 * at most CMR_RESYNC_MAX times per CMR_RESYNC_WINDOW_MS and not sooner than
 * CMR_RESYNC_RETRY_MS after the previous ask, doubled with each ask of the window, so that
 * a broker that keeps too little is not flooded. An ask that is only too soon is not
 * dropped: the verdict says when it is due, and the worker asks then.
 *
 * Pure: the caller keeps one mark per agent (a uint64_t, 0 for an agent never asked) and
 * the clock; nothing here sends or logs.
 */
#ifndef CMR_INSTR_RESYNC_H
#define CMR_INSTR_RESYNC_H

#include <stdint.h>

#define CMR_RESYNC_WINDOW_MS (10 * 60 * 1000) /* the window in which an agent is asked ... */
#define CMR_RESYNC_MAX 5                      /* ... at most this many times */
#define CMR_RESYNC_RETRY_MS 1000              /* the first wait after an ask */

typedef enum cmr_resync_verdict {
    CMR_RESYNC_ASK,   /* ask now, then keep cmr_resync_asked()'s mark */
    CMR_RESYNC_SKIP,  /* asked since the gap, or asked CMR_RESYNC_MAX times in the window */
    CMR_RESYNC_LATER, /* too soon after the last ask: ask at *due_ms */
} cmr_resync_verdict_t;

/* The verdict for an agent whose mark is `mark` and whose partition's last gap was found
 * at lost_at_ms (> 0), at now_ms; *due_ms is set for CMR_RESYNC_LATER only. */
cmr_resync_verdict_t cmr_resync_decide(uint64_t mark, int64_t lost_at_ms, int64_t now_ms, int64_t *due_ms);

/* The agent's mark after an ask at now_ms (the verdict was CMR_RESYNC_ASK). */
uint64_t cmr_resync_asked(uint64_t mark, int64_t now_ms);

/* The asks in the mark's window (for logs and tests). */
unsigned cmr_resync_asks(uint64_t mark);

#endif
