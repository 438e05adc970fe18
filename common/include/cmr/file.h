/*
 * file.h - reading small files that a person or an attacker may have pointed us at.
 *
 * Part of the toolbox (cmr_base). Configuration files, key files and environment files
 * are read whole, through this one function: regular files only (a FIFO, a device such
 * as /dev/zero or a directory is refused without blocking), at most max_bytes (a larger
 * file is refused, never read in part), and the error messages name the path and the
 * reason but never quote the contents.
 */
#ifndef CMR_FILE_H
#define CMR_FILE_H

#include <stddef.h>

#include "cmr/buf.h"

/* Reads the whole file into out (replacing its content; NUL-terminated). 0, or -1 with
 * errbuf filled ("PATH: not a regular file", "PATH: larger than N bytes", ...). */
int cmr_file_read(const char *path, size_t max_bytes, cmr_buf_t *out, char *errbuf, size_t errlen);
/* The same, and *mode gets the permission bits of the file that was read (from the open
 * descriptor: no second look-up of the path that a symlink swap could redirect). */
int cmr_file_read_mode(const char *path, size_t max_bytes, cmr_buf_t *out, unsigned *mode, char *errbuf, size_t errlen);

#endif
