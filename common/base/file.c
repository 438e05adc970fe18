/*
 * file.c - bounded reads of small regular files. See cmr/file.h.
 */
#include "cmr/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cmr_file_read(const char *path, size_t max_bytes, cmr_buf_t *out, char *errbuf, size_t errlen)
{
    return cmr_file_read_mode(path, max_bytes, out, NULL, errbuf, errlen);
}

int cmr_file_read_mode(const char *path, size_t max_bytes, cmr_buf_t *out, unsigned *mode, char *errbuf, size_t errlen)
{
    cmr_buf_reset(out);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(errbuf, errlen, "%s: not a regular file", path);
    } else if ((unsigned long long)st.st_size > max_bytes) {
        snprintf(errbuf, errlen, "%s: larger than %zu bytes", path, max_bytes);
    } else {
        rc = 0;
        if (mode)
            *mode = (unsigned)(st.st_mode & 07777);
    }
    while (rc == 0) {
        uint8_t *at = cmr_buf_append(out, 4096);
        if (!at) {
            snprintf(errbuf, errlen, "%s: out of memory", path);
            rc = -1;
            break;
        }
        ssize_t n = read(fd, at, 4096);
        if (n < 0 && errno == EINTR) {
            cmr_buf_truncate(out, out->len - 4096);
            continue;
        }
        if (n < 0) {
            snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        cmr_buf_truncate(out, out->len - 4096 + (size_t)n);
        if (out->len > max_bytes) { /* grew while we read */
            snprintf(errbuf, errlen, "%s: larger than %zu bytes", path, max_bytes);
            rc = -1;
        }
        if (n == 0)
            break;
    }
    close(fd);
    if (rc != 0)
        cmr_buf_reset(out);
    return rc;
}
