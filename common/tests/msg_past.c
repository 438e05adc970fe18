/*
 * msg_past.c - messages of past schema versions for tests (see msg_past.h).
 */
#include "msg_past.h"

#include <avro.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/file.h"
#include "cmr/wire.h"

int msg_past_file(uint64_t fingerprint, char *path, size_t len)
{
    const char *src = getenv("CMR_SOURCE_DIR");
    char dir[512], want[32];
    snprintf(dir, sizeof dir, "%s/schemas/past", src ? src : ".");
    snprintf(want, sizeof want, ".%016llx.avsc", (unsigned long long)fingerprint);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = -1;
    for (struct dirent *e; rc != 0 && (e = readdir(d));) {
        size_t n = strlen(e->d_name), w = strlen(want);
        if (n > w && strcmp(e->d_name + n - w, want) == 0 && (size_t)snprintf(path, len, "%s/%s", dir, e->d_name) < len)
            rc = 0;
    }
    closedir(d);
    return rc;
}

int msg_encode_past(cmr_msg_type_t type, const void *body, uint64_t fingerprint, cmr_buf_t *out)
{
    char err[256] = "", path[1024];
    cmr_buf_t cur = {0}, past = {0};
    avro_schema_t ws = NULL, rs = NULL;
    avro_value_iface_t *wi = NULL, *ri = NULL, *resolver = NULL;
    avro_value_t wv = {0}, resolved = {0}, pv = {0};
    avro_reader_t r = NULL;
    avro_writer_t w = NULL;
    int rc = -1;
    const char *cur_text = cmr_msg_schema_json(type);

    if (cmr_msg_encode(type, body, &cur, err, sizeof err) != CMR_WIRE_OK) {
        fprintf(stderr, "msg_encode_past: encode %s: %s\n", cmr_msg_type_name(type), err);
    } else if (msg_past_file(fingerprint, path, sizeof path) != 0 ||
               cmr_file_read(path, 1 << 20, &past, err, sizeof err) != 0) {
        fprintf(stderr, "msg_encode_past: no schemas/past file for %016llx %s\n", (unsigned long long)fingerprint, err);
    } else if (avro_schema_from_json_length(cur_text, strlen(cur_text), &ws) != 0 ||
               avro_schema_from_json_length(cmr_buf_str(&past), past.len, &rs) != 0 ||
               !(wi = avro_generic_class_from_schema(ws)) || !(ri = avro_generic_class_from_schema(rs)) ||
               !(resolver = avro_resolved_reader_new(ws, rs)) || avro_generic_value_new(wi, &wv) != 0 ||
               avro_resolved_reader_new_value(resolver, &resolved) != 0 || avro_generic_value_new(ri, &pv) != 0) {
        fprintf(stderr, "msg_encode_past: %s: %s\n", path, avro_strerror());
    } else {
        r = avro_reader_memory((const char *)cur.data + CMR_WIRE_HEADER_SIZE,
                               (int64_t)(cur.len - CMR_WIRE_HEADER_SIZE));
        avro_resolved_reader_set_source(&resolved, &wv);
        size_t size = 0;
        uint8_t *at;
        if (avro_value_read(r, &wv) != 0 || avro_value_copy(&pv, &resolved) != 0 ||
            avro_value_sizeof(&pv, &size) != 0) {
            fprintf(stderr, "msg_encode_past: as %s: %s\n", path, avro_strerror());
        } else {
            cmr_buf_reset(out);
            at = cmr_buf_append(out, CMR_WIRE_HEADER_SIZE + size);
            at[0] = 0xC3;
            at[1] = 0x01;
            for (int i = 0; i < 8; i++)
                at[2 + i] = (uint8_t)(fingerprint >> (8 * i));
            w = avro_writer_memory((const char *)at + CMR_WIRE_HEADER_SIZE, (int64_t)size);
            rc = avro_value_write(w, &pv) == 0 ? 0 : -1;
        }
    }
    if (w)
        avro_writer_free(w);
    if (r)
        avro_reader_free(r);
    if (pv.self)
        avro_value_decref(&pv);
    if (resolved.self)
        avro_value_decref(&resolved);
    if (wv.self)
        avro_value_decref(&wv);
    if (resolver)
        avro_value_iface_decref(resolver);
    if (ri)
        avro_value_iface_decref(ri);
    if (wi)
        avro_value_iface_decref(wi);
    if (rs)
        avro_schema_decref(rs);
    if (ws)
        avro_schema_decref(ws);
    cmr_buf_free(&past);
    cmr_buf_free(&cur);
    return rc;
}
