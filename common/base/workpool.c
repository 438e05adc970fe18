/*
 * workpool.c - one round of independent jobs on a few threads (see workpool.h).
 *
 * A round is an index range: whoever is free takes the next index under the lock and runs
 * the job outside it; the last job to finish wakes the caller. Helpers sleep on `work`
 * between rounds. The caller clears the range before it returns, so a helper that wakes
 * late finds nothing to take, and an index is handed out once.
 */
#include "cmr/workpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct cmr_workpool {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    cmr_work_fn_t *fn; /* the round's, while one runs */
    void *ctx;
    size_t n, next, pending;
    bool stop;
    int max_threads, nthreads;
    pthread_t threads[CMR_WORKPOOL_MAX_THREADS];
};

/* Runs the round's next job when one is left: true, or false when every job is taken
 * (lock held on entry and exit, released while the job runs). */
static bool take_job(cmr_workpool_t *p)
{
    if (p->next >= p->n)
        return false;
    size_t i = p->next++;
    cmr_work_fn_t *fn = p->fn;
    void *ctx = p->ctx;
    pthread_mutex_unlock(&p->lock);
    fn(ctx, i);
    pthread_mutex_lock(&p->lock);
    if (--p->pending == 0)
        pthread_cond_signal(&p->done);
    return true;
}

/* Runs the round's jobs while there are any left (lock held on entry and exit). */
static void take_jobs(cmr_workpool_t *p)
{
    while (take_job(p))
        ;
}

static void *helper_main(void *arg)
{
    cmr_workpool_t *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        take_jobs(p);
        if (!p->stop)
            pthread_cond_wait(&p->work, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

cmr_workpool_t *cmr_workpool_new(int max_threads)
{
    if (max_threads < 0 || max_threads > CMR_WORKPOOL_MAX_THREADS)
        return NULL;
    cmr_workpool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->max_threads = max_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    return p;
}

void cmr_workpool_start(cmr_workpool_t *p, size_t n, cmr_work_fn_t *fn, void *ctx)
{
    pthread_mutex_lock(&p->lock);
    /* as many helpers as the round can use besides the caller */
    while (p->nthreads < p->max_threads && (size_t)p->nthreads + 1 < n &&
           pthread_create(&p->threads[p->nthreads], NULL, helper_main, p) == 0)
        p->nthreads++;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->next = 0;
    p->pending = n;
    if (p->nthreads && n)
        pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
}

bool cmr_workpool_help(cmr_workpool_t *p)
{
    pthread_mutex_lock(&p->lock);
    bool took = take_job(p);
    pthread_mutex_unlock(&p->lock);
    return took;
}

void cmr_workpool_wait(cmr_workpool_t *p)
{
    pthread_mutex_lock(&p->lock);
    take_jobs(p);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->lock);
    p->fn = NULL;
    p->ctx = NULL;
    p->n = p->next = 0;
    pthread_mutex_unlock(&p->lock);
}

void cmr_workpool_run(cmr_workpool_t *p, size_t n, cmr_work_fn_t *fn, void *ctx)
{
    if (n == 0)
        return;
    cmr_workpool_start(p, n, fn, ctx);
    cmr_workpool_wait(p);
}

int cmr_workpool_threads(const cmr_workpool_t *p)
{
    return p->nthreads;
}

void cmr_workpool_free(cmr_workpool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}
