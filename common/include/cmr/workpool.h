/*
 * workpool.h - a small pool of threads that runs one round of independent jobs side by
 * side: "for i in 0..n-1, fn(ctx, i)", and returns when every job has run.
 *
 * Part of the toolbox (cmr_base). Used where a worker's loop has a batch of pure work
 * whose parts do not touch each other: cmr-ingest's group commit (one RocksDB write and
 * fsync per partition) and cmr-instrumenter's unit (instrumenting, digesting and signing
 * the classes of a burst). The calling thread works too; helper threads are started on
 * first need, up to max_threads, and wait for the next round between rounds. One round
 * at a time: cmr_workpool_run() is called from one thread.
 *
 * Ownership: the caller owns ctx and whatever the jobs write; the pool owns its threads,
 * stopped and joined by cmr_workpool_free().
 */
#ifndef CMR_WORKPOOL_H
#define CMR_WORKPOOL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cmr_workpool cmr_workpool_t;

typedef void(cmr_work_fn_t)(void *ctx, size_t i);

#define CMR_WORKPOOL_MAX_THREADS 64

/* A pool of at most max_threads helper threads (0..CMR_WORKPOOL_MAX_THREADS; 0: every job
 * runs on the calling thread). NULL when out of memory. */
cmr_workpool_t *cmr_workpool_new(int max_threads);
/* Runs fn(ctx, i) for every i < n, on the helpers and the calling thread, in no given
 * order; returns when all have returned. A helper that cannot be started leaves its share
 * to the others. */
void cmr_workpool_run(cmr_workpool_t *p, size_t n, cmr_work_fn_t *fn, void *ctx);
/* The same in steps, for a caller that uses each result as soon as it is there (in
 * order, while later jobs still run): start the round (returns at once; the helpers take
 * jobs from the lowest index up), take jobs here with cmr_workpool_help() while waiting
 * for the one it needs (each job says itself when it is done), and end the round with
 * cmr_workpool_wait(), which returns when every job has run. */
void cmr_workpool_start(cmr_workpool_t *p, size_t n, cmr_work_fn_t *fn, void *ctx);
/* Runs the round's next job not taken yet on the calling thread: true, or false when
 * every job is taken (by now or before). */
bool cmr_workpool_help(cmr_workpool_t *p);
void cmr_workpool_wait(cmr_workpool_t *p);
/* Helper threads running now (started so far). */
int cmr_workpool_threads(const cmr_workpool_t *p);
/* Stops and joins the helpers; NULL is ignored. Not during a run. */
void cmr_workpool_free(cmr_workpool_t *p);

#endif
