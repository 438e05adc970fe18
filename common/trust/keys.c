/*
 * keys.c - Ed25519 key files: generation, and parsing of the public and secret key text.
 * See cmr/trust.h for the formats. Internal helpers are in trust_internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmr/file.h"
#include "cmr/trust.h"
#include "trust_internal.h"

#define KEY_FILE_MAX 4096

int cmr_trust_init(void)
{
    return sodium_init() < 0 ? -1 : 0;
}

void cmr_trust_digest(const void *p, size_t n, uint8_t out[CMR_TRUST_DIGEST_BYTES])
{
    crypto_generichash(out, CMR_TRUST_DIGEST_BYTES, p, n, NULL, 0);
}

void trust_key_id(const uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES], char out[CMR_TRUST_KEY_ID_CHARS + 1])
{
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(pk, CMR_TRUST_PUBLIC_KEY_BYTES, d);
    sodium_bin2hex(out, CMR_TRUST_KEY_ID_CHARS + 1, d, CMR_TRUST_KEY_ID_CHARS / 2);
}

/* Decodes "<label> <base64>" (the label optional when label_optional) into exactly n
 * bytes. Surrounding white space is ignored. 0 or -1; never quotes the text. */
int trust_parse_key_text(const char *text, size_t text_len, const char *label, bool label_optional, uint8_t *out,
                         size_t n)
{
    const char *p = text, *end = text + text_len;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        end--;
    size_t ll = strlen(label);
    if ((size_t)(end - p) > ll && !memcmp(p, label, ll) && (p[ll] == ' ' || p[ll] == '\t')) {
        p += ll;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
    } else if (!label_optional) {
        return -1;
    }
    size_t got = 0;
    const char *b64_end = NULL;
    if (sodium_base642bin(out, n, p, (size_t)(end - p), NULL, &got, &b64_end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        got != n || b64_end != end)
        return -1;
    return 0;
}

/* Writes text to path, creating it with mode (refuses an existing file). */
static int write_new_file(const char *path, const char *text, mode_t mode, char *errbuf, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    int rc = (w == (ssize_t)len && fsync(fd) == 0) ? 0 : -1;
    if (rc != 0)
        snprintf(errbuf, errlen, "%s: write failed: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == 0) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

int cmr_trust_keygen(const char *dir, const char *name, char *errbuf, size_t errlen)
{
    if (cmr_trust_init() != 0) {
        snprintf(errbuf, errlen, "libsodium cannot be initialised");
        return -1;
    }
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(pk, sk);
    char b64[sodium_base64_ENCODED_LEN(crypto_sign_SECRETKEYBYTES, sodium_base64_VARIANT_ORIGINAL)];
    char line[sizeof b64 + 64], key_path[4096], pub_path[4096];
    int rc = -1;
    if ((size_t)snprintf(key_path, sizeof key_path, "%s/%s.key", dir, name) >= sizeof key_path ||
        (size_t)snprintf(pub_path, sizeof pub_path, "%s/%s.pub", dir, name) >= sizeof pub_path) {
        snprintf(errbuf, errlen, "key path too long");
        goto out;
    }
    sodium_bin2base64(b64, sizeof b64, sk, sizeof sk, sodium_base64_VARIANT_ORIGINAL);
    snprintf(line, sizeof line, "%s %s\n", TRUST_SECRET_LABEL, b64);
    if (write_new_file(key_path, line, 0600, errbuf, errlen) != 0)
        goto out;
    sodium_bin2base64(b64, sizeof b64, pk, sizeof pk, sodium_base64_VARIANT_ORIGINAL);
    snprintf(line, sizeof line, "%s %s\n", TRUST_PUBLIC_LABEL, b64);
    if (write_new_file(pub_path, line, 0644, errbuf, errlen) != 0) {
        unlink(key_path);
        goto out;
    }
    rc = 0;
out:
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(line, sizeof line);
    sodium_memzero(b64, sizeof b64);
    return rc;
}

int trust_read_key_file(const char *path, bool secret, cmr_buf_t *out, char *errbuf, size_t errlen)
{
    unsigned mode = 0;
    if (cmr_file_read_mode(path, KEY_FILE_MAX, out, &mode, errbuf, errlen) != 0) {
        cmr_buf_free(out);
        return -1;
    }
    if (secret && (mode & 077)) { /* the mode of the file that was read, not of the path now */
        snprintf(errbuf, errlen, "%s: a secret key must be readable by its owner only (chmod 600)", path);
        if (out->data)
            sodium_memzero(out->data, out->len);
        cmr_buf_free(out);
        return -1;
    }
    return 0;
}
