/*
 * clock.c - the sleep of the toolbox's clock. See cmr/clock.h.
 */
#include "cmr/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cmr_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int cmr_duration_parse_ms(const char *s, int64_t *ms)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "") || !strcmp(end, "ms") ? 1
                  : !strcmp(end, "s")                    ? 1e3
                  : !strcmp(end, "m")                    ? 6e4
                  : !strcmp(end, "h")                    ? 3.6e6
                  : !strcmp(end, "d")                    ? 8.64e7
                                                         : 0;
    if (errno || end == s || unit == 0 || !(v >= 0) || v * unit > 3.2e11)
        return -1;
    *ms = (int64_t)(v * unit);
    return 0;
}
