/*
 * cf_arena.c - memory for the class-file engine.
 *
 * cf_arena: a chain of blocks owned by one cf_class; everything allocated from it is freed
 * together by cf_arena_free (so parse errors never leak and nothing is freed twice).
 * (The writers' growable buffer, cf_buf, is the toolbox's cmr_buf_t: see cf_internal.h.)
 */
#include "cf_internal.h"

#include <stdlib.h>

typedef struct cf_block {
    struct cf_block *next;
    size_t used, cap;
    _Alignas(16) uint8_t mem[];
} cf_block;

struct cf_arena {
    cf_block *head;
};

cf_arena *cf_arena_new(void)
{
    return calloc(1, sizeof(cf_arena));
}

void cf_arena_free(cf_arena *a)
{
    if (!a)
        return;
    cf_block *b = a->head;
    while (b) {
        cf_block *n = b->next;
        free(b);
        b = n;
    }
    free(a);
}

void *cf_arena_alloc(cf_arena *a, size_t n)
{
    void *p = cf_arena_alloc_raw(a, n);
    if (p)
        memset(p, 0, (n + 15) & ~(size_t)15);
    return p;
}

void *cf_arena_alloc_raw(cf_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    cf_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof(cf_block) + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    return p;
}
