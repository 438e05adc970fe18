/*
 * instr_resync.c - when to ask an agent again for all its classes (see instr_resync.h).
 * A mark packs the last ask's time (ms of the caller's clock) << 8 | the asks in its window.
 */
#include "cmr/instr_resync.h"

static int64_t last_ask(uint64_t mark)
{
    return (int64_t)(mark >> 8);
}

unsigned cmr_resync_asks(uint64_t mark)
{
    return (unsigned)(mark & 0xFF);
}

/* The asks of the window the next ask at now_ms belongs to. */
static unsigned asks_in_window(uint64_t mark, int64_t now_ms)
{
    return now_ms - last_ask(mark) >= CMR_RESYNC_WINDOW_MS ? 0 : cmr_resync_asks(mark);
}

cmr_resync_verdict_t cmr_resync_decide(uint64_t mark, int64_t lost_at_ms, int64_t now_ms, int64_t *due_ms)
{
    if (!mark)
        return CMR_RESYNC_ASK;
    int64_t last = last_ask(mark);
    if (last >= lost_at_ms)
        return CMR_RESYNC_SKIP; /* asked since the gap */
    unsigned asks = asks_in_window(mark, now_ms);
    if (asks == 0)
        return CMR_RESYNC_ASK;
    if (asks >= CMR_RESYNC_MAX)
        return CMR_RESYNC_SKIP;
    int64_t due = last + ((int64_t)CMR_RESYNC_RETRY_MS << (asks - 1));
    if (now_ms >= due)
        return CMR_RESYNC_ASK;
    *due_ms = due;
    return CMR_RESYNC_LATER;
}

uint64_t cmr_resync_asked(uint64_t mark, int64_t now_ms)
{
    unsigned asks = mark ? asks_in_window(mark, now_ms) : 0;
    return (uint64_t)now_ms << 8 | (asks + 1);
}
