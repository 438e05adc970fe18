/*
 * grant_store.c - the agent's on-disk cache of instrumented classes (see grant_store.h).
 *
 * Every path operation is relative to the directory's descriptor, opened once and
 * checked (a directory, ours, closed to others): a symbolic link put in place of the
 * directory later changes nothing, and files are opened with O_NOFOLLOW.
 */
#include "grant_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/file.h"
#include "cmr/ids.h"
#include "cmr/map.h"

#define FILE_MAGIC "CMRCCG1\n"
#define MAGIC_LEN 8
#define KEY_BYTES 16
#define FILE_NAME_LEN 38 /* "g-" + 32 hex + ".ccg" */
#define TEMP_STALE_S 600 /* temporary files older than this are left-overs */
#define ENV_FILE_MAX 256

/* What a complete verification of a file established (cmr_grant_store_preverify), so
 * that a load whose file still has the same content needs no signature check: the
 * digest of the whole file and the grant as verified (known_match checks its environment,
 * class, original digest and validity against the load). */
typedef struct verified {
    uint8_t file_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_grant_t grant; /* as verified: environment, class, digests, validity */
} verified_t;

typedef struct index_entry {
    size_t size;
    int64_t mtime_ns;     /* eviction order: oldest written first */
    verified_t *known;    /* owned; NULL until preverified */
    bool preverify_tried; /* preverify looked at it (verified or not ours) */
} index_entry_t;

static void entry_free(index_entry_t *e)
{
    if (!e)
        return;
    free(e->known);
    free(e);
}

struct cmr_grant_store {
    int dirfd;
    const cmr_verifier_t *verifier; /* not owned */
    size_t max_bytes, max_files;
    pthread_mutex_t lock; /* guards everything below */
    char expected[CMR_GRANT_ENV_MAX + 1];
    cmr_map_t index; /* 16-byte key -> index_entry_t * (owned) */
    size_t untried;  /* entries preverify has not looked at yet */
    cmr_grant_store_stats_t stats;
};

static void key_of(const char *env, const uint8_t digest[CMR_TRUST_DIGEST_BYTES], uint8_t key[KEY_BYTES])
{
    cmr_buf_t b = {0};
    cmr_buf_puts(&b, env);
    cmr_buf_putc(&b, '\0');
    cmr_buf_put(&b, digest, CMR_TRUST_DIGEST_BYTES);
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(b.data, b.len, d);
    cmr_buf_free(&b);
    memcpy(key, d, KEY_BYTES);
}

static void name_of_key(const uint8_t key[KEY_BYTES], char out[40])
{
    char hex[2 * KEY_BYTES + 1];
    cmr_hex(key, KEY_BYTES, hex);
    snprintf(out, 40, "g-%s.ccg", hex);
}

void cmr_grant_store_file_name(const char *environment_id, const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES],
                               char out[40])
{
    uint8_t key[KEY_BYTES];
    key_of(environment_id, original_digest, key);
    name_of_key(key, out);
}

/* The key of a grant file's name; false for any other name. */
static bool key_of_name(const char *name, uint8_t key[KEY_BYTES])
{
    if (strlen(name) != FILE_NAME_LEN || strncmp(name, "g-", 2) != 0 || strcmp(name + 34, ".ccg") != 0)
        return false;
    for (int i = 0; i < KEY_BYTES; i++) {
        unsigned v;
        char pair[3] = {name[2 + 2 * i], name[3 + 2 * i], 0};
        if (!strchr("0123456789abcdef", pair[0]) || !strchr("0123456789abcdef", pair[1]) ||
            sscanf(pair, "%2x", &v) != 1)
            return false;
        key[i] = (uint8_t)v;
    }
    return true;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* --- index (lock held) ------------------------------------------------------------------ */

static void index_drop(cmr_grant_store_t *s, const uint8_t key[KEY_BYTES])
{
    void *old = NULL;
    if (cmr_map_del(&s->index, key, KEY_BYTES, &old) && old) {
        s->stats.files--;
        s->stats.bytes -= ((index_entry_t *)old)->size;
        s->untried -= !((index_entry_t *)old)->preverify_tried;
        entry_free(old);
    }
}

static void index_set(cmr_grant_store_t *s, const uint8_t key[KEY_BYTES], size_t size, int64_t mtime)
{
    index_drop(s, key);
    index_entry_t *e = malloc(sizeof *e);
    if (!e)
        return; /* not indexed: a miss, the file stays until evicted or replaced */
    *e = (index_entry_t){.size = size, .mtime_ns = mtime};
    if (cmr_map_put(&s->index, key, KEY_BYTES, e) != 0) {
        free(e);
        return;
    }
    s->stats.files++;
    s->stats.bytes += size;
    s->untried++;
}

/* Removes the oldest files until the bounds hold. */
static void evict(cmr_grant_store_t *s)
{
    while (s->stats.files > s->max_files || s->stats.bytes > s->max_bytes) {
        size_t it = 0, klen;
        const void *k;
        void *v;
        uint8_t oldest[KEY_BYTES];
        int64_t t = INT64_MAX;
        bool any = false;
        while (cmr_map_next(&s->index, &it, &k, &klen, &v)) {
            index_entry_t *e = v;
            if (e->mtime_ns < t) {
                t = e->mtime_ns;
                memcpy(oldest, k, KEY_BYTES);
                any = true;
            }
        }
        if (!any)
            return;
        char name[40];
        name_of_key(oldest, name);
        unlinkat(s->dirfd, name, 0);
        index_drop(s, oldest);
        s->stats.evicted++;
    }
}

/* --- opening -------------------------------------------------------------------------- */

/* The directory's descriptor once it is checked: a directory, owned by this user, that
 * no one else may read or write. -1 with errbuf filled. */
static int open_dir(const char *dir, char *errbuf, size_t errlen)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(errbuf, errlen, "%s: cannot create: %s", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(errbuf, errlen, "%s: cannot open: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(errbuf, errlen,
                 "%s: must be a directory of this user (uid %u) that no one else may use (chmod 700); it is uid %u "
                 "mode %03o",
                 dir, (unsigned)geteuid(), (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
        close(fd);
        return -1;
    }
    return fd;
}

/* Lists the grant files into the index; removes temporary files left by a crash. */
static void read_index(cmr_grant_store_t *s)
{
    int fd = dup(s->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        uint8_t key[KEY_BYTES];
        if (strncmp(de->d_name, ".tmp-", 5) == 0) {
            if (fstatat(s->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > TEMP_STALE_S)
                unlinkat(s->dirfd, de->d_name, 0);
            continue;
        }
        if (!key_of_name(de->d_name, key) || fstatat(s->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        index_set(s, key, (size_t)st.st_size, mtime_ns(&st));
    }
    closedir(d);
}

cmr_grant_store_t *cmr_grant_store_open(const char *dir, const char *environment_id, const cmr_verifier_t *v,
                                        size_t max_bytes, size_t max_files, char *errbuf, size_t errlen)
{
    if (cmr_trust_init() != 0) {
        snprintf(errbuf, errlen, "libsodium cannot run here");
        return NULL;
    }
    int fd = open_dir(dir, errbuf, errlen);
    if (fd < 0)
        return NULL;
    cmr_grant_store_t *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    s->dirfd = fd;
    s->verifier = v;
    s->max_bytes = max_bytes;
    s->max_files = max_files;
    pthread_mutex_init(&s->lock, NULL);
    cmr_grant_store_expect(s, environment_id);
    pthread_mutex_lock(&s->lock);
    read_index(s);
    evict(s);
    pthread_mutex_unlock(&s->lock);
    return s;
}

void cmr_grant_store_close(cmr_grant_store_t *s)
{
    if (!s)
        return;
    size_t it = 0;
    void *v;
    while (cmr_map_next(&s->index, &it, NULL, NULL, &v))
        entry_free(v);
    cmr_map_free(&s->index);
    close(s->dirfd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void cmr_grant_store_expect(cmr_grant_store_t *s, const char *environment_id)
{
    const char *env = environment_id && strlen(environment_id) <= CMR_GRANT_ENV_MAX ? environment_id : "";
    pthread_mutex_lock(&s->lock);
    if (strcmp(env, s->expected) != 0) {
        /* preverify judged the files against the environment before: look again */
        size_t it = 0;
        void *v;
        while (cmr_map_next(&s->index, &it, NULL, NULL, &v))
            ((index_entry_t *)v)->preverify_tried = false;
        s->untried = s->stats.files;
        snprintf(s->expected, sizeof s->expected, "%s", env);
    }
    pthread_mutex_unlock(&s->lock);
}

void cmr_grant_store_expected(cmr_grant_store_t *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->lock);
    snprintf(out, cap, "%s", s->expected);
    pthread_mutex_unlock(&s->lock);
}

/* --- reading ---------------------------------------------------------------------------- */

/* Reads a whole regular file of at most CMR_GRANT_STORE_FILE_MAX bytes; -2 when there is
 * no such file (another JVM sharing the directory evicted it), -1 otherwise. */
static int read_whole(int dirfd, const char *name, cmr_buf_t *out)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? -2 : -1;
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size <= CMR_GRANT_STORE_FILE_MAX) {
        uint8_t *p = cmr_buf_append(out, (size_t)st.st_size);
        size_t got = 0;
        while (p && got < (size_t)st.st_size) {
            ssize_t n = read(fd, p + got, (size_t)st.st_size - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        rc = p && got == (size_t)st.st_size ? 0 : -1;
    }
    close(fd);
    return rc;
}

/* Splits a cache file into its grant and its bytes; false when it is not one. */
static bool split_file(const cmr_buf_t *f, const uint8_t **grant, size_t *glen, const uint8_t **bytes, size_t *blen)
{
    const uint8_t *p = f->data, *end = f->data + f->len;
    if (f->len < MAGIC_LEN + 8 || memcmp(p, FILE_MAGIC, MAGIC_LEN) != 0)
        return false;
    p += MAGIC_LEN;
    uint32_t n = cmr_be32(p);
    p += 4;
    if (n > CMR_GRANT_MAX_BYTES || (size_t)(end - p) < (size_t)n + 4)
        return false;
    *grant = p;
    *glen = n;
    p += n;
    n = cmr_be32(p);
    p += 4;
    if ((size_t)(end - p) != n || n == 0)
        return false;
    *bytes = p;
    *blen = n;
    return true;
}

static void count_refusal(cmr_grant_store_t *s, const uint8_t key[KEY_BYTES], cmr_grant_verdict_t why)
{
    pthread_mutex_lock(&s->lock);
    index_drop(s, key);
    s->stats.refused++;
    s->stats.refusals[(unsigned)why < CMR_GRANT_VERDICT__COUNT ? why : CMR_GRANT_MALFORMED]++;
    pthread_mutex_unlock(&s->lock);
}

/* Whether the file f read for key is the one verified ahead, for environment env, class
 * name and original digest, and still valid at now_ms (then *grant_out, when not NULL, is
 * its grant): what the verification established, checked again but for the signature
 * and the instrumented bytes' digest, which the content's digest covers. */
static bool known_match(cmr_grant_store_t *s, const uint8_t key[KEY_BYTES], const cmr_buf_t *f, const char *env,
                        const char *name, const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], int64_t now_ms,
                        cmr_grant_t *grant_out)
{
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(f->data, f->len, digest);
    pthread_mutex_lock(&s->lock);
    index_entry_t *e = cmr_map_get(&s->index, key, KEY_BYTES);
    const verified_t *k = e ? e->known : NULL;
    bool match = k && memcmp(k->file_digest, digest, sizeof digest) == 0 && name &&
                 strcmp(k->grant.class_name, name) == 0 && strcmp(k->grant.environment_id, env) == 0 &&
                 memcmp(k->grant.original_digest, original_digest, CMR_TRUST_DIGEST_BYTES) == 0 &&
                 now_ms <= k->grant.not_after_ms + CMR_GRANT_CLOCK_SKEW_MS &&
                 now_ms >= k->grant.issued_ms - CMR_GRANT_CLOCK_SKEW_MS;
    if (match && grant_out)
        *grant_out = k->grant;
    if (match)
        s->stats.preverified_hits++;
    pthread_mutex_unlock(&s->lock);
    return match;
}

cmr_grant_lookup_t cmr_grant_store_lookup(cmr_grant_store_t *s, const char *name,
                                          const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], int64_t now_ms,
                                          uint8_t **bytes, size_t *len, cmr_grant_t *grant_out,
                                          cmr_grant_verdict_t *why)
{
    char env[CMR_GRANT_ENV_MAX + 1];
    uint8_t key[KEY_BYTES];
    *bytes = NULL;
    *len = 0;
    *why = CMR_GRANT_OK;
    pthread_mutex_lock(&s->lock);
    snprintf(env, sizeof env, "%s", s->expected);
    bool known = false;
    if (env[0]) {
        key_of(env, original_digest, key);
        known = cmr_map_has(&s->index, key, KEY_BYTES);
    }
    if (!known)
        s->stats.misses++;
    pthread_mutex_unlock(&s->lock);
    if (!known)
        return CMR_GRANT_LOOKUP_MISS;

    char file[40];
    name_of_key(key, file);
    cmr_buf_t f = {0};
    const uint8_t *grant = NULL, *code = NULL;
    size_t glen = 0, clen = 0;
    cmr_grant_verdict_t v = CMR_GRANT_MALFORMED;
    if (read_whole(s->dirfd, file, &f) == 0 && split_file(&f, &grant, &glen, &code, &clen)) {
        if (known_match(s, key, &f, env, name, original_digest, now_ms, grant_out)) {
            v = CMR_GRANT_OK; /* the content verified ahead, unchanged */
        } else {
            cmr_grant_expect_t want = {env, name, original_digest, code, clen};
            v = cmr_grant_verify(s->verifier, grant, glen, &want, now_ms, grant_out);
        }
    }
    if (v != CMR_GRANT_OK || !(*bytes = malloc(clen))) {
        *why = v != CMR_GRANT_OK ? v : CMR_GRANT_MALFORMED;
        cmr_buf_free(&f);
        count_refusal(s, key, *why);
        return CMR_GRANT_LOOKUP_REFUSED;
    }
    memcpy(*bytes, code, clen);
    *len = clen;
    cmr_buf_free(&f);
    pthread_mutex_lock(&s->lock);
    s->stats.hits++;
    pthread_mutex_unlock(&s->lock);
    return CMR_GRANT_LOOKUP_HIT;
}

bool cmr_grant_store_has(cmr_grant_store_t *s, const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES])
{
    uint8_t key[KEY_BYTES];
    pthread_mutex_lock(&s->lock);
    bool has = false;
    if (s->expected[0]) {
        key_of(s->expected, original_digest, key);
        has = cmr_map_has(&s->index, key, KEY_BYTES);
    }
    pthread_mutex_unlock(&s->lock);
    return has;
}

/* --- verification ahead ----------------------------------------------------------------- */

/* Up to max keys of the index not looked at yet by preverify; how many. Lock held. */
static size_t untried_keys(cmr_grant_store_t *s, uint8_t (*keys)[KEY_BYTES], size_t max)
{
    size_t it = 0, klen, n = 0;
    const void *k;
    void *v;
    while (n < max && cmr_map_next(&s->index, &it, &k, &klen, &v)) {
        index_entry_t *e = v;
        if (e->preverify_tried)
            continue;
        e->preverify_tried = true;
        s->untried--;
        memcpy(keys[n++], k, KEY_BYTES);
    }
    return n;
}

/* Verifies one file for the expected environment env. Returns its memo when it verifies;
 * NULL otherwise, with *why set when it is refused as a load would refuse it (OK when it
 * is not one of env's files, or memory ran out: left for the load to judge), and *gone
 * when the file no longer exists. */
static verified_t *verify_file(cmr_grant_store_t *s, const uint8_t key[KEY_BYTES], const char *env, int64_t now_ms,
                               cmr_grant_verdict_t *why, bool *gone)
{
    char file[40];
    name_of_key(key, file);
    cmr_buf_t f = {0};
    const uint8_t *grant = NULL, *code = NULL;
    size_t glen = 0, clen = 0;
    cmr_grant_t named; /* what the grant says it is for, before it is verified */
    verified_t *k = NULL;
    *why = CMR_GRANT_OK;
    *gone = false;
    int rc = read_whole(s->dirfd, file, &f);
    if (rc == -2) {
        *gone = true;
    } else if (rc != 0 || !split_file(&f, &grant, &glen, &code, &clen) ||
               cmr_grant_decode(grant, glen, &named) != CMR_GRANT_OK) {
        *why = CMR_GRANT_MALFORMED;
    } else {
        uint8_t own[KEY_BYTES];
        key_of(named.environment_id, named.original_digest, own);
        /* another environment's file (or one named for other content): not ours to judge */
        if (strcmp(named.environment_id, env) == 0 && memcmp(own, key, KEY_BYTES) == 0) {
            cmr_grant_expect_t want = {env, named.class_name, named.original_digest, code, clen};
            cmr_grant_t g;
            *why = cmr_grant_verify(s->verifier, grant, glen, &want, now_ms, &g);
            if (*why == CMR_GRANT_OK && (k = malloc(sizeof *k)) != NULL) {
                cmr_trust_digest(f.data, f.len, k->file_digest);
                k->grant = g;
            }
        }
    }
    cmr_buf_free(&f);
    return k;
}

size_t cmr_grant_store_preverify(cmr_grant_store_t *s, int64_t now_ms, size_t max_files, cmr_grant_preverify_t *out)
{
    char env[CMR_GRANT_ENV_MAX + 1];
    size_t n = 0, verified = 0;
    cmr_grant_preverify_t res = {0};
    pthread_mutex_lock(&s->lock);
    bool work = s->expected[0] && s->untried > 0 && max_files > 0;
    snprintf(env, sizeof env, "%s", s->expected);
    pthread_mutex_unlock(&s->lock);
    uint8_t(*keys)[KEY_BYTES] = work ? malloc(max_files * KEY_BYTES) : NULL;
    if (keys) {
        pthread_mutex_lock(&s->lock);
        n = untried_keys(s, keys, max_files);
        pthread_mutex_unlock(&s->lock);
    }
    for (size_t i = 0; i < n; i++) {
        cmr_grant_verdict_t why;
        bool gone;
        verified_t *k = verify_file(s, keys[i], env, now_ms, &why, &gone);
        if (gone) {
            pthread_mutex_lock(&s->lock);
            index_drop(s, keys[i]);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        if (why != CMR_GRANT_OK) {
            count_refusal(s, keys[i], why);
            if (res.refused++ == 0) {
                res.first_refusal = why;
                name_of_key(keys[i], res.first_refused_file);
            }
            continue;
        }
        if (!k)
            continue;
        pthread_mutex_lock(&s->lock);
        index_entry_t *e = cmr_map_get(&s->index, keys[i], KEY_BYTES);
        /* the memo of the content read now; a file replaced meanwhile has another content,
         * which the load's digest sees (and the new entry is looked at again) */
        if (e) {
            free(e->known);
            e->known = k;
            k = NULL;
            s->stats.preverified++;
            verified++;
        }
        pthread_mutex_unlock(&s->lock);
        free(k);
    }
    free(keys);
    pthread_mutex_lock(&s->lock);
    res.left = env[0] ? s->untried : 0;
    pthread_mutex_unlock(&s->lock);
    if (out)
        *out = res;
    return verified;
}

/* --- writing ---------------------------------------------------------------------------- */

/* Writes data to `name` in the directory: a temporary file (0600, O_EXCL), then rename. */
static int write_atomically(cmr_grant_store_t *s, const char *name, const void *data, size_t len, char *errbuf,
                            size_t errlen)
{
    uint8_t r[8];
    char hex[17], tmp[64];
    cmr_random_bytes(r, sizeof r);
    cmr_hex(r, sizeof r, hex);
    snprintf(tmp, sizeof tmp, ".tmp-%s", hex);
    int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot create a file in the cache directory: %s", strerror(errno));
        return -1;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const uint8_t *)data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    int err = done == len ? 0 : errno ? errno : EIO;
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err && renameat(s->dirfd, tmp, s->dirfd, name) != 0)
        err = errno;
    if (err) {
        unlinkat(s->dirfd, tmp, 0);
        snprintf(errbuf, errlen, "cannot write %s in the cache directory: %s", name, strerror(err));
        return -1;
    }
    return 0;
}

int cmr_grant_store_put(cmr_grant_store_t *s, const void *grant, size_t grant_len,
                        const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                        int64_t now_ms, char *errbuf, size_t errlen)
{
    cmr_grant_t g;
    cmr_grant_verdict_t v = cmr_grant_decode(grant, grant_len, &g);
    if (v == CMR_GRANT_OK) {
        cmr_grant_expect_t want = {g.environment_id, NULL, original_digest, bytes, len};
        v = cmr_grant_verify(s->verifier, grant, grant_len, &want, now_ms, &g);
    }
    if (v != CMR_GRANT_OK || MAGIC_LEN + 8 + grant_len + len > CMR_GRANT_STORE_FILE_MAX) {
        snprintf(errbuf, errlen, "grant refused: %s",
                 v != CMR_GRANT_OK ? cmr_grant_verdict_name(v) : "class larger than a cache file may be");
        pthread_mutex_lock(&s->lock);
        s->stats.write_failures++;
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    cmr_buf_t f = {0};
    cmr_buf_put(&f, FILE_MAGIC, MAGIC_LEN);
    cmr_buf_put_be32(&f, (uint32_t)grant_len);
    cmr_buf_put(&f, grant, grant_len);
    cmr_buf_put_be32(&f, (uint32_t)len);
    cmr_buf_put(&f, bytes, len);
    uint8_t key[KEY_BYTES];
    char name[40];
    key_of(g.environment_id, original_digest, key);
    name_of_key(key, name);
    int rc = cmr_buf_ok(&f) ? write_atomically(s, name, f.data, f.len, errbuf, errlen)
                            : (snprintf(errbuf, errlen, "out of memory"), -1);
    size_t size = f.len;
    cmr_buf_free(&f);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&s->lock);
    if (rc == 0) {
        s->stats.written++;
        index_set(s, key, size, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
        evict(s);
    } else {
        s->stats.write_failures++;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* --- the environment of the previous run ------------------------------------------------- */

static void env_file_name(const char *agent_name, char out[24])
{
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    char hex[17];
    cmr_trust_digest(agent_name, strlen(agent_name), d);
    cmr_hex(d, 8, hex);
    snprintf(out, 24, "env-%s", hex);
}

static bool valid_env(const char *s, size_t n)
{
    if (n == 0 || n > CMR_GRANT_ENV_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

void cmr_grant_store_recorded_environment(const char *dir, const char *agent_name, char *out, size_t cap)
{
    char name[24], path[4200], err[256];
    out[0] = '\0';
    env_file_name(agent_name, name);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return;
    cmr_buf_t b = {0};
    if (cmr_file_read(path, ENV_FILE_MAX, &b, err, sizeof err) == 0) {
        size_t n = b.len;
        while (n > 0 && (b.data[n - 1] == '\n' || b.data[n - 1] == '\r'))
            n--;
        if (valid_env((const char *)b.data, n) && n < cap) {
            memcpy(out, b.data, n);
            out[n] = '\0';
        }
    }
    cmr_buf_free(&b);
}

int cmr_grant_store_record_environment(cmr_grant_store_t *s, const char *agent_name, const char *environment_id,
                                       char *errbuf, size_t errlen)
{
    if (!valid_env(environment_id, strlen(environment_id))) {
        snprintf(errbuf, errlen, "environment id of bad length or with control characters");
        return -1;
    }
    char name[24], text[CMR_GRANT_ENV_MAX + 2];
    env_file_name(agent_name, name);
    int n = snprintf(text, sizeof text, "%s\n", environment_id);
    return write_atomically(s, name, text, (size_t)n, errbuf, errlen);
}

void cmr_grant_store_stats(cmr_grant_store_t *s, cmr_grant_store_stats_t *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
}
