/*
 * clock.c - the sleep of the toolbox's clock. See cmr/clock.h.
 */
#include "cmr/clock.h"

#include <errno.h>

void cmr_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}
