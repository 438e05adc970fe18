/*
 * ing_store.c - the RocksDB stores of cmr-ingest.
 *
 * Layout under the store root:
 *   p000, p001, ...  one RocksDB per cmr.events partition. A partition's history moves
 *                    with the partition: the worker that gets it opens its store.
 *   meta/0, meta/1   one per running worker (the first slot whose lock is free): the
 *                    method and agent tables. Every worker reads both topics fully, so
 *                    any slot answers; queries merge them.
 *
 * Column families of a partition store (keys big endian, so byte order = numeric order):
 *   batches       trace | agent | segment | batch_seq -> stored batch (ing_batch.c)
 *   traces        trace -> summary (ing_state.c)
 *   idx_time      0xFF | group                  -> (trace id, start) per new trace
 *   idx_duration  duration | trace              -> ""
 *   idx_root      root method | group           -> trace ids (16 bytes each)
 *   idx_agent     agent | group                 -> trace ids
 *   idx_method    method | group                -> trace ids   (every method entered)
 *                 postings: per group commit of the partition one entry per root, JVM
 *                 or method seen first in a trace of the group, with those traces (a
 *                 trace whose root changes is posted again under the new one; queries
 *                 check every candidate against its summary). The group key is at least
 *                 the latest start (ms) of the group's traces and greater than the one
 *                 before (kept under "postings_group" in the default column family), so
 *                 a posting whose group is older than the oldest trace left names only
 *                 deleted traces (a trace's start only moves earlier): after retention a
 *                 compaction filter drops those. Stores written before postings hold
 *                 agent | trace -> "" and method | trace -> "" (24-byte keys;
 *                 `legacy_index`): queries read both forms, retention deletes the old
 *                 ones per trace.
 *                 Time groups (idx_time, key 0xFF | group | written ms) list the traces
 *                 new in the group, each with its start then: one entry per group commit
 *                 where the format before had one per trace and change. Every trace of a
 *                 group started before the end of the group key's millisecond, so a
 *                 newest-first query stops early (ing_query.c), and retention deletes
 *                 whole groups, oldest first: those whose traces all started before its
 *                 cutoff, or that were written before it. A start more than a minute
 *                 past the wall clock raises a group key no further (ing_engine.c
 *                 next_group).
 *                 Stores written before time groups (`legacy_time`: index_format
 *                 "postings" or none) hold start | trace -> "" in idx_time and root |
 *                 start | trace -> "" in idx_root. Queries read both forms; the engine
 *                 deletes the time key of a trace whose start changes and puts the trace
 *                 into the group's time entry with all its postings, and posts one whose
 *                 root key changes under its root; retention deletes them per trace,
 *                 before the groups, and marks the store "groups" when none is left.
 *   idx_diagnosis diagnosis | trace             -> ""   (the ids of the trace's summary)
 * A column family added after stores existed (idx_diagnosis) is created when a worker
 * opens the store (create_missing_column_families); a read-only open of a store that does
 * not have it yet opens without it: cmr_store_cf() gives NULL, an empty index.
 * The default column family holds one key, "applied_offset": the offset (8 bytes, big
 * endian) of the last cmr.events record of the partition whose effects are in the store,
 * written in the same atomic write as those effects (cmr_store_put_applied), so that a
 * worker that is assigned the partition knows what to restore from the topic.
 * Meta store: methods (method id -> value), agents (agent id -> value), see ing_names.c;
 * status (agent id | time ms -> AgentStatus as received), see ing_agents.c.
 *
 * Index column families keep their memtable as a vector (appends; sorted when flushed or
 * read) and are only ever scanned; `batches` and `traces` hash theirs by trace id and are
 * only read one trace at a time; `traces` has bloom filters (tune_partition_cfs).
 * WAL is always on; writes are synced (fsync) when opts.sync is set (the default).
 * Ownership: a cmr_store_t owns its RocksDB handles; cmr_store_close() releases them.
 */
#include <assert.h>
#include <stdatomic.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/log.h"

static const char *const part_cfs[] = {"default",  "batches",   "traces",     "idx_time",     "idx_duration",
                                       "idx_root", "idx_agent", "idx_method", "idx_diagnosis"};
#define NPART_CFS 9
_Static_assert(NPART_CFS == CMR_CF__COUNT + 1, "a name per column family");
/* The first partition column family that stores may lack (added later): from here on a
 * read-only open goes on without a missing one. */
#define PART_CF_OPTIONAL (1 + CMR_CF_IDX_DIAGNOSIS)
static const char *const meta_cfs[] = {"default", "methods", "agents", "status"};
#define NMETA_CFS 4
#define EST_EVENT_BYTES 3 /* a stored event, on average (compact encoding: 2 to 3 bytes) */

struct cmr_store {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_options_t *cf_opts[NPART_CFS];
    rocksdb_block_based_table_options_t *traces_table; /* the bloom filter of `traces` */
    rocksdb_compactionfilter_t *postings_filter;       /* drops postings before the cutoff */
    _Atomic int64_t postings_cutoff_ms;                /* 0 until retention deleted traces */
    bool legacy_index; /* written before postings: may hold agent|trace, method|trace keys */
    bool legacy_time;  /* written before time groups: may hold start|trace, root|start|trace keys */
    rocksdb_column_family_handle_t *cfs[NPART_CFS];
    int ncfs;
    rocksdb_writeoptions_t *wo;
    rocksdb_readoptions_t *ro;
    int partition; /* -1 for a meta store */
    cmr_store_opts_t o;
    char path[4096];
};

static int mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static rocksdb_options_t *cf_options(size_t write_buffer, bool compress)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_write_buffer_size(o, write_buffer);
    rocksdb_options_set_compression(o, compress ? rocksdb_lz4_compression : rocksdb_no_compression);
    return o;
}

/* Memtables and filters of a partition store, for what ingest does per trace (issue 15,
 * "cheap small traces"; docs/benchmarks.md):
 *  - `batches` and `traces` are keyed by trace id first, and only ever read one trace at
 *    a time (a point lookup, or a seek to the trace and on while the key starts with it):
 *    their memtables are hashed by the trace id (the 16-byte prefix) into small skip
 *    lists, so an insert does not search one list of the whole memtable. Reading across
 *    traces in key order needs total_order_seek (tests do; nothing else reads that way).
 *  - the index column families get a vector memtable: an insert is an append (a skip
 *    list insert of a random key is a dozen cache misses, which made index entries most
 *    of ingest's CPU); the vector is sorted once when it is flushed, and an iterator over
 *    it sorts a copy, which queries and retention pay once per scan. Nothing reads an
 *    index with a point lookup (that too would sort a copy: ing_query.c checks filters
 *    on the batches instead). Vector memtables take one writer at a time, so concurrent
 *    memtable writes are off (a store has one writer, its partition's).
 *  - `traces` gets a bloom filter, in its memtable and in its tables: the summary of
 *    every new trace is looked up first (ing_engine.c get_trace), and almost every
 *    lookup misses.
 *  - `traces` gets as large a memtable as `batches` (store_open): a summary is small, but
 *    with the 2 MiB of the index column families its memtable filled every ~20,000 traces,
 *    and each flush of a hashed memtable first sorts it whole, then its level-0 files
 *    are compacted and every lookup checks their filters: 4-event traces cost 12.8 µs
 *    of CPU each with the small memtable, 10.2 µs with this (docs/benchmarks.md). */
#define TRACE_BUCKETS (1u << 15) /* hash buckets of a `batches` / `traces` memtable: 256 KiB each */

/* Compaction filter of idx_root / idx_agent / idx_method: a posting (16-byte key,
 * id | group) of a group older than the cutoff names only traces retention deleted. */
static unsigned char filter_postings(void *state, int level, const char *key, size_t klen, const char *val, size_t vlen,
                                     char **new_val, size_t *new_len, unsigned char *changed)
{
    (void)level, (void)val, (void)vlen, (void)new_val, (void)new_len, (void)changed;
    cmr_store_t *s = state;
    return klen == 16 && (int64_t)cmr_be64((const uint8_t *)key + 8) < atomic_load(&s->postings_cutoff_ms);
}

static const char *postings_filter_name(void *state)
{
    (void)state;
    return "cmr.postings";
}

static void no_destroy(void *state)
{
    (void)state;
}

static void tune_partition_cfs(cmr_store_t *s)
{
    rocksdb_options_set_allow_concurrent_memtable_write(s->opts, 0);
    for (int i = 1 + CMR_CF_IDX_TIME; i < s->ncfs; i++)
        rocksdb_options_set_memtable_vector_rep(s->cf_opts[i]);
    for (int i = 1 + CMR_CF_BATCHES; i <= 1 + CMR_CF_TRACES; i++) {
        rocksdb_options_set_prefix_extractor(s->cf_opts[i], rocksdb_slicetransform_create_fixed_prefix(16));
        rocksdb_options_set_hash_skip_list_rep(s->cf_opts[i], TRACE_BUCKETS, 4, 4);
    }
    rocksdb_options_t *t = s->cf_opts[1 + CMR_CF_TRACES];
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(t, 0.05);
    rocksdb_options_set_memtable_whole_key_filtering(t, 1);
    s->traces_table = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_filter_policy(s->traces_table, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(s->traces_table, 1);
    rocksdb_options_set_block_based_table_factory(t, s->traces_table);
    if (!s->o.read_only) {
        s->postings_filter = rocksdb_compactionfilter_create(s, no_destroy, filter_postings, postings_filter_name);
        rocksdb_options_set_compaction_filter(s->cf_opts[1 + CMR_CF_IDX_ROOT], s->postings_filter);
        rocksdb_options_set_compaction_filter(s->cf_opts[1 + CMR_CF_IDX_AGENT], s->postings_filter);
        rocksdb_options_set_compaction_filter(s->cf_opts[1 + CMR_CF_IDX_METHOD], s->postings_filter);
    }
}

/* The positions of names[] to open read-only: all of them, except the optional ones
 * (from `optional` on) that the store at path does not have. Returns their count. */
static int present_cfs(const rocksdb_options_t *opts, const char *path, const char *const *names, int n, int optional,
                       int pos[])
{
    size_t nlisted = 0;
    char *e = NULL;
    char **listed = rocksdb_list_column_families(opts, path, &nlisted, &e);
    free(e); /* no list (no store yet): open all and let the open say why not */
    int k = 0;
    for (int i = 0; i < n; i++) {
        bool have = !listed || i < optional;
        for (size_t j = 0; !have && j < nlisted; j++)
            have = !strcmp(listed[j], names[i]);
        if (have)
            pos[k++] = i;
    }
    if (listed)
        rocksdb_list_column_families_destroy(listed, nlisted);
    return k;
}

static cmr_store_t *store_open(const char *path, const char *const *names, int n, int partition,
                               const cmr_store_opts_t *o, int wait_ms, char *err, size_t errlen)
{
    cmr_store_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->partition = partition;
    s->o = *o;
    s->ncfs = n;
    snprintf(s->path, sizeof s->path, "%s", path);
    if (!o->read_only && mkdirs(path) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        free(s);
        return NULL;
    }
    s->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(s->opts, 1);
    rocksdb_options_set_create_missing_column_families(s->opts, 1);
    rocksdb_options_set_max_background_jobs(s->opts, 2);
    rocksdb_options_set_keep_log_file_num(s->opts, 2);
    rocksdb_options_set_max_total_wal_size(s->opts, 128u << 20);
    /* memory: per store at most db_write_buffer_size of memtables (a worker holds up to
     * one store per partition it owns) */
    size_t wb = o->write_buffer_bytes ? (size_t)o->write_buffer_bytes : (16u << 20);
    rocksdb_options_set_db_write_buffer_size(s->opts, wb * 2);
    for (int i = 0; i < n; i++)
        s->cf_opts[i] =
            cf_options(partition >= 0 && (i == 1 + CMR_CF_BATCHES || i == 1 + CMR_CF_TRACES) ? wb : (2u << 20),
                       i == 1 + CMR_CF_BATCHES);
    if (partition >= 0)
        tune_partition_cfs(s);
    const rocksdb_options_t *cfo[NPART_CFS];
    for (int i = 0; i < n; i++)
        cfo[i] = s->cf_opts[i];
    /* read-only: the column families the store has (optional ones may be missing) */
    const char *ro_names[NPART_CFS];
    const rocksdb_options_t *ro_cfo[NPART_CFS];
    rocksdb_column_family_handle_t *ro_cfs[NPART_CFS];
    int ro_pos[NPART_CFS], nro = 0;
    if (o->read_only)
        nro = present_cfs(s->opts, path, names, n, partition >= 0 ? PART_CF_OPTIONAL : n, ro_pos);
    for (int i = 0; i < nro; i++) {
        ro_names[i] = names[ro_pos[i]];
        ro_cfo[i] = cfo[ro_pos[i]];
    }
    char *e = NULL;
    for (int waited = 0;; waited += 100) {
        e = NULL;
        if (o->read_only) {
            s->db = rocksdb_open_for_read_only_column_families(s->opts, path, nro, ro_names, ro_cfo, ro_cfs, 0, &e);
            for (int i = 0; s->db && i < nro; i++)
                s->cfs[ro_pos[i]] = ro_cfs[i];
        } else
            s->db = rocksdb_open_column_families(s->opts, path, n, (const char *const *)names, cfo, s->cfs, &e);
        if (s->db || waited >= wait_ms || !e || !strstr(e, "lock"))
            break;
        free(e);
        cmr_sleep_ms(100);
    }
    if (!s->db) {
        snprintf(err, errlen, "cannot open store %s: %s", path, e ? e : "unknown error");
        free(e);
        s->ncfs = 0;
        cmr_store_close(s);
        return NULL;
    }
    s->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->wo, o->sync);
    s->ro = rocksdb_readoptions_create();
    return s;
}

/* The value under a key of the default column family: 1 (*v to rocksdb_free), 0 no such
 * key, -1 read error. */
static int get_default(cmr_store_t *s, const char *key, char **v, size_t *vl)
{
    char *e = NULL;
    *v = rocksdb_get_cf(s->db, s->ro, s->cfs[0], key, strlen(key), vl, &e);
    if (e) {
        free(e);
        return -1;
    }
    return *v != NULL;
}

/* A number (8 bytes, big endian) under a key of the default column family: 1 read into
 * *out, 0 no such key, -1 read error or not 8 bytes. */
static int get_number(cmr_store_t *s, const char *key, int64_t *out)
{
    char *v;
    size_t vl;
    int rc = get_default(s, key, &v, &vl);
    if (rc != 1)
        return rc;
    rc = vl == 8 ? 1 : -1;
    if (rc == 1)
        *out = (int64_t)cmr_be64((const uint8_t *)v);
    rocksdb_free(v);
    return rc;
}

static void put_number(cmr_store_t *s, void *writebatch, const char *key, int64_t value)
{
    uint8_t v[8];
    cmr_put_be64(v, (uint64_t)value);
    rocksdb_writebatch_put_cf(writebatch, s->cfs[0], key, strlen(key), (const char *)v, sizeof v);
}

#define INDEX_FORMAT_KEY "index_format" /* default column family: "postings", "groups" */
#define FORMAT_GROUPS "groups"
#define GROUP_KEY "postings_group" /* default column family: the last group key */

int64_t cmr_store_last_group(cmr_store_t *s)
{
    int64_t g = 0;
    return get_number(s, GROUP_KEY, &g) == 1 ? g : 0;
}

void cmr_store_put_group(cmr_store_t *s, void *writebatch, int64_t group)
{
    put_number(s, writebatch, GROUP_KEY, group);
}

/* Marks the store's index format (INDEX_FORMAT_KEY). 0 or -1. */
static int mark_format(cmr_store_t *s, const char *format)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put_cf(wb, s->cfs[0], INDEX_FORMAT_KEY, strlen(INDEX_FORMAT_KEY), format, strlen(format));
    char err[512];
    int rc = cmr_store_write(s, wb, err, sizeof err);
    rocksdb_writebatch_destroy(wb);
    return rc;
}

/* Which older index formats the store may hold: one with traces and no INDEX_FORMAT_KEY
 * may hold those before postings (legacy_index) and before time groups (legacy_time),
 * one marked "postings" those before time groups. A store without traces is marked as
 * of this format. 0 or -1. */
static int note_index_format(cmr_store_t *s)
{
    char *v;
    size_t vl;
    int marked = get_default(s, INDEX_FORMAT_KEY, &v, &vl);
    if (marked < 0)
        return -1;
    bool groups = marked == 1 && vl == strlen(FORMAT_GROUPS) && !memcmp(v, FORMAT_GROUPS, vl);
    if (marked == 1)
        rocksdb_free(v);
    if (groups)
        return 0;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_total_order_seek(ro, 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro, s->cfs[1 + CMR_CF_TRACES]);
    rocksdb_iter_seek_to_first(it);
    bool has_traces = rocksdb_iter_valid(it);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    s->legacy_index = has_traces && marked == 0;
    s->legacy_time = has_traces;
    if (has_traces)
        return 0;
    return mark_format(s, FORMAT_GROUPS);
}

static void set_postings_cutoff(cmr_store_t *s);

cmr_store_t *cmr_store_open_partition(const char *root, int partition, const cmr_store_opts_t *o, int wait_ms,
                                      char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/p%03d", root, partition);
    cmr_store_t *s = store_open(path, part_cfs, NPART_CFS, partition, o, wait_ms, err, errlen);
    if (s && !o->read_only && note_index_format(s) != 0) {
        snprintf(err, errlen, "cannot write %s", path);
        cmr_store_close(s);
        return NULL;
    }
    if (s && !o->read_only)
        set_postings_cutoff(s); /* groups deleted before a restart: their postings too */
    return s;
}

cmr_store_t *cmr_store_open_meta(const char *root, int slot, const cmr_store_opts_t *o, char *err, size_t errlen)
{
    char path[4096];
    if (o->read_only) {
        snprintf(path, sizeof path, "%s/meta/%d", root, slot);
        return store_open(path, meta_cfs, NMETA_CFS, -1, o, 0, err, errlen);
    }
    for (int i = 0; i < 64; i++) { /* the first slot no running worker holds */
        snprintf(path, sizeof path, "%s/meta/%d", root, i);
        cmr_store_t *s = store_open(path, meta_cfs, NMETA_CFS, -1, o, 0, err, errlen);
        if (s || !strstr(err, "lock"))
            return s;
    }
    return NULL;
}

void cmr_store_close(cmr_store_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->ncfs; i++)
        if (s->cfs[i])
            rocksdb_column_family_handle_destroy(s->cfs[i]);
    if (s->db)
        rocksdb_close(s->db);
    for (int i = 0; i < NPART_CFS; i++)
        if (s->cf_opts[i])
            rocksdb_options_destroy(s->cf_opts[i]);
    if (s->opts)
        rocksdb_options_destroy(s->opts);
    if (s->traces_table)
        rocksdb_block_based_options_destroy(s->traces_table);
    if (s->postings_filter)
        rocksdb_compactionfilter_destroy(s->postings_filter);
    if (s->wo)
        rocksdb_writeoptions_destroy(s->wo);
    if (s->ro)
        rocksdb_readoptions_destroy(s->ro);
    free(s);
}

int cmr_store_partition(const cmr_store_t *s)
{
    return s->partition;
}

void *cmr_store_db(cmr_store_t *s)
{
    return s->db;
}

/* NULL for an optional column family a read-only store does not have yet. */
void *cmr_store_cf(cmr_store_t *s, int cf)
{
    assert(cf >= 0 && cf + 1 < s->ncfs); /* a CMR_CF_* of a partition, 0 / 1 of a meta store */
    return cf >= 0 && cf + 1 < s->ncfs ? s->cfs[cf + 1] : NULL;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static size_t list_dirs(const char *dir, const char *prefix, int **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    size_t pl = strlen(prefix);
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, pl) || !de->d_name[pl])
            continue;
        char *end;
        long num = strtol(de->d_name + pl, &end, 10);
        if (*end || num < 0 || num > 100000)
            continue;
        if (CMR_ARRAY_GROW(v, cap, n + 1) != 0)
            break;
        v[n++] = (int)num;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof *v, cmp_int);
    *out = v;
    return n;
}

size_t cmr_store_list_partitions(const char *root, int **parts)
{
    return list_dirs(root, "p", parts);
}

size_t cmr_store_list_meta(const char *root, int **slots)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/meta", root);
    return list_dirs(dir, "", slots);
}

int cmr_store_write(cmr_store_t *s, void *writebatch, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_write(s->db, s->wo, writebatch, &e);
    if (e) {
        snprintf(err, errlen, "write %s: %s", s->path, e);
        free(e);
        return -1;
    }
    return 0;
}

int cmr_store_trace_batches(cmr_store_t *s, const uint8_t trace_id[16], cmr_ingest_batch_t **batches, void **vals)
{
    *batches = NULL;
    *vals = NULL;
    cmr_buf_t buf = {0}; /* records of (key length, value length, key, value) */
    size_t n = 0;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[1 + CMR_CF_BATCHES]);
    rocksdb_iter_seek(it, (const char *)trace_id, 16);
    for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl < 16 || memcmp(k, trace_id, 16))
            break;
        const char *v = rocksdb_iter_value(it, &vl);
        uint64_t lens[2] = {kl, vl};
        cmr_buf_put(&buf, lens, sizeof lens);
        cmr_buf_put(&buf, k, kl);
        cmr_buf_put(&buf, v, vl);
        if (!cmr_buf_ok(&buf))
            break;
        n++;
    }
    rocksdb_iter_destroy(it);
    cmr_ingest_batch_t *b = cmr_buf_ok(&buf) ? calloc(n + 1, sizeof *b) : NULL;
    if (!b) {
        cmr_buf_free(&buf);
        return -1;
    }
    size_t off = 0, good = 0;
    for (size_t i = 0; i < n; i++) {
        assert(off + sizeof(uint64_t[2]) <= buf.len);
        uint64_t lens[2];
        memcpy(lens, buf.data + off, sizeof lens);
        off += sizeof lens;
        const uint8_t *k = buf.data + off, *v = k + lens[0];
        off += lens[0] + lens[1];
        if (cmr_ingest_batch_decode(k, lens[0], v, lens[1], &b[good]) == 0)
            good++;
        else
            cmr_log(CMR_LOG_WARN, "ingest.corrupt_batch", "store=%s", s->path);
    }
    *batches = b;
    *vals = buf.data; /* the batches point into it: handed over with them */
    return (int)good;
}

void cmr_store_batches_free(cmr_ingest_batch_t *batches, void *vals)
{
    free(batches);
    free(vals);
}

int cmr_store_get_summary(cmr_store_t *s, const uint8_t trace_id[16], cmr_trace_summary_t *out)
{
    char *e = NULL;
    size_t vl;
    char *v = rocksdb_get_cf(s->db, s->ro, s->cfs[1 + CMR_CF_TRACES], (const char *)trace_id, 16, &vl, &e);
    if (e) {
        free(e);
        return -1;
    }
    if (!v)
        return 0;
    int rc = cmr_trace_summary_decode((const uint8_t *)v, vl, out) == 0 ? 1 : -1;
    rocksdb_free(v);
    return rc;
}

#define APPLIED_KEY "applied_offset"

int cmr_store_get_applied(cmr_store_t *s, int64_t *offset)
{
    *offset = -1;
    return get_number(s, APPLIED_KEY, offset);
}

void cmr_store_put_applied(cmr_store_t *s, void *writebatch, int64_t offset)
{
    put_number(s, writebatch, APPLIED_KEY, offset);
}

static int load_cf(cmr_store_t *s, int cf, cmr_names_t *names, int agents)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[cf]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        if (kl != 8)
            continue;
        uint64_t id = cmr_be64((const uint8_t *)k);
        if (agents)
            cmr_names_load_agent(names, id, v, vl);
        else
            cmr_names_load_method(names, id, v, vl);
    }
    rocksdb_iter_destroy(it);
    return 0;
}

int cmr_store_load_names(cmr_store_t *meta, cmr_names_t *names)
{
    if (meta->partition >= 0)
        return -1;
    load_cf(meta, 1, names, 0);
    load_cf(meta, 2, names, 1);
    return 0;
}

void cmr_store_index_keys(const cmr_trace_summary_t *s, uint8_t time_key[24], uint8_t dur_key[24], uint8_t root_key[32])
{
    cmr_put_be64_ordered(time_key, s->start_ns);
    memcpy(time_key + 8, s->trace_id, 16);
    cmr_put_be64_ordered(dur_key, s->end_ns - s->start_ns);
    memcpy(dur_key + 8, s->trace_id, 16);
    cmr_put_be64(root_key, s->root_method);
    cmr_put_be64_ordered(root_key + 8, s->start_ns);
    memcpy(root_key + 16, s->trace_id, 16);
}

bool cmr_store_time_legacy(const cmr_store_t *s)
{
    return s->legacy_time;
}

void cmr_store_time_group_key(uint8_t key[CMR_TIME_GROUP_KEY], int64_t group, int64_t written_ms)
{
    key[0] = CMR_TIME_GROUP_TAG;
    cmr_put_be64(key + 1, (uint64_t)group);
    cmr_put_be64(key + 9, (uint64_t)written_ms);
}

int64_t cmr_store_time_group_end_ns(int64_t group)
{
    if (group >= INT64_MAX / 1000000)
        return INT64_MAX;
    if (group < INT64_MIN / 1000000)
        return INT64_MIN;
    return group * 1000000 + 999999;
}

typedef struct ids2 {
    cmr_buf_t agents, methods; /* uint64_t ids, native order */
} ids2_t;

static void on_agent(void *o, uint64_t id)
{
    cmr_buf_put(&((ids2_t *)o)->agents, &id, sizeof id);
}

static void on_method(void *o, uint64_t id)
{
    cmr_buf_put(&((ids2_t *)o)->methods, &id, sizeof id);
}

/* Deletes the index entries (cf: id | trace) of every id in ids. */
static void delete_indexed(rocksdb_writebatch_t *wb, rocksdb_column_family_handle_t *cf, const cmr_buf_t *ids,
                           const uint8_t trace_id[16])
{
    uint8_t k[24];
    memcpy(k + 8, trace_id, 16);
    for (size_t i = 0; i < ids->len / 8; i++) {
        uint64_t id;
        memcpy(&id, ids->data + i * 8, 8);
        cmr_put_be64(k, id);
        rocksdb_writebatch_delete_cf(wb, cf, (const char *)k, 24);
    }
}

/* The JVMs and methods of a stored trace, for the index entries of a legacy store. */
static int trace_ids(cmr_store_t *s, const uint8_t trace_id[16], ids2_t *ids)
{
    cmr_ingest_batch_t *b;
    void *vals;
    int n = cmr_store_trace_batches(s, trace_id, &b, &vals);
    if (n < 0)
        return -1;
    cmr_trace_state_t *st = cmr_trace_state_new(trace_id);
    for (int i = 0; st && i < n; i++)
        cmr_trace_state_apply(st, &b[i], on_agent, on_method, ids);
    cmr_store_batches_free(b, vals);
    cmr_trace_state_free(st);
    return 0;
}

/* Queues into wb the deletion of every key of index family cf that is klen bytes long and
 * ends with trace_id: the per-trace index keys of a trace whose summary, which would say
 * them, cannot be read. Walks the whole family: only for damaged summaries (each logged). */
static void queue_delete_naming(cmr_store_t *s, rocksdb_writebatch_t *wb, int cf, size_t klen,
                                const uint8_t trace_id[16])
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[1 + cf]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl == klen && !memcmp(k + klen - 16, trace_id, 16))
            rocksdb_writebatch_delete_cf(wb, s->cfs[1 + cf], k, kl);
    }
    rocksdb_iter_destroy(it);
}

/* Queues the deletion of one trace into wb: its batches (point deletes of the keys the
 * iterator over `batches` finds; a range deletion per trace would leave a range tombstone
 * per trace, which every later read of `batches` has to fragment), its summary and its
 * per-trace index keys. Postings and time groups are not deleted per trace
 * (filter_postings, retention). 1 queued, 0 no such trace (nothing queued), -1 a read
 * failed (nothing queued). */
static int queue_delete_trace(cmr_store_t *s, rocksdb_writebatch_t *wb, rocksdb_iterator_t *batches,
                              const uint8_t trace_id[16])
{
    cmr_trace_summary_t sum;
    int found = cmr_store_get_summary(s, trace_id, &sum);
    if (found == 0)
        return 0;
    ids2_t ids = {0};
    if (found < 0) { /* unreadable: its batches and summary go all the same (a retention that
                      * stopped at it would never get past it), and its per-trace index keys
                      * are looked for in the indexes */
        char hex[33];
        cmr_hex(trace_id, 16, hex);
        cmr_log(CMR_LOG_WARN, "ingest.corrupt_summary", "partition=%d trace=%s", s->partition, hex);
        queue_delete_naming(s, wb, CMR_CF_IDX_DURATION, 24, trace_id);
        queue_delete_naming(s, wb, CMR_CF_IDX_DIAGNOSIS, 24, trace_id);
        if (s->legacy_time) {
            queue_delete_naming(s, wb, CMR_CF_IDX_TIME, 24, trace_id);
            queue_delete_naming(s, wb, CMR_CF_IDX_ROOT, 32, trace_id);
        }
        if (s->legacy_index) {
            queue_delete_naming(s, wb, CMR_CF_IDX_AGENT, 24, trace_id);
            queue_delete_naming(s, wb, CMR_CF_IDX_METHOD, 24, trace_id);
        }
    } else if (s->legacy_index && trace_ids(s, trace_id, &ids) != 0) {
        return -1;
    }
    for (rocksdb_iter_seek(batches, (const char *)trace_id, 16); rocksdb_iter_valid(batches);
         rocksdb_iter_next(batches)) {
        size_t kl;
        const char *k = rocksdb_iter_key(batches, &kl);
        if (kl < 16 || memcmp(k, trace_id, 16))
            break;
        rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_BATCHES], k, kl);
    }
    rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_TRACES], (const char *)trace_id, 16);
    if (found < 0)
        return 1;
    uint8_t tk[24], dk[24], rk[32];
    cmr_store_index_keys(&sum, tk, dk, rk);
    rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_IDX_DURATION], (const char *)dk, 24);
    if (s->legacy_time) { /* time groups and root postings go whole (retention, filter) */
        rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_IDX_TIME], (const char *)tk, 24);
        rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_IDX_ROOT], (const char *)rk, 32);
    }
    uint8_t k[24];
    memcpy(k + 8, trace_id, 16);
    for (uint32_t i = 0; i < sum.ndiagnoses; i++) {
        cmr_put_be64(k, sum.diagnoses[i]);
        rocksdb_writebatch_delete_cf(wb, s->cfs[1 + CMR_CF_IDX_DIAGNOSIS], (const char *)k, 24);
    }
    delete_indexed(wb, s->cfs[1 + CMR_CF_IDX_AGENT], &ids.agents, trace_id);
    delete_indexed(wb, s->cfs[1 + CMR_CF_IDX_METHOD], &ids.methods, trace_id);
    cmr_buf_free(&ids.agents);
    cmr_buf_free(&ids.methods);
    return 1;
}

/* Deletes the traces (16-byte ids, n of them) with what wb holds already, in one write
 * (wb is the caller's). The count deleted (traces not there do not count), -1 when a read
 * or the write failed (nothing deleted). */
static long delete_traces(cmr_store_t *s, rocksdb_writebatch_t *wb, const uint8_t *ids, size_t n)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[1 + CMR_CF_BATCHES]);
    long deleted = 0;
    for (size_t i = 0; i < n && deleted >= 0; i++) {
        int r = queue_delete_trace(s, wb, it, ids + i * 16);
        deleted = r < 0 ? -1 : deleted + r;
    }
    rocksdb_iter_destroy(it);
    char err[512] = "a read failed";
    if (deleted < 0 || cmr_store_write(s, wb, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_WARN, "ingest.delete_failed", "partition=%d error=\"%s\"", s->partition, err);
        deleted = -1;
    }
    return deleted;
}

int cmr_store_delete_trace(cmr_store_t *s, const uint8_t trace_id[16])
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    long n = delete_traces(s, wb, trace_id, 1);
    rocksdb_writebatch_destroy(wb);
    return n < 0 ? -1 : 0;
}

static uint64_t batches_bytes(cmr_store_t *s)
{
    char *v = rocksdb_property_value_cf(s->db, s->cfs[1 + CMR_CF_BATCHES], "rocksdb.estimate-live-data-size");
    uint64_t disk = v ? strtoull(v, NULL, 10) : 0;
    free(v);
    v = rocksdb_property_value_cf(s->db, s->cfs[1 + CMR_CF_BATCHES], "rocksdb.cur-size-all-mem-tables");
    uint64_t mem = v ? strtoull(v, NULL, 10) : 0;
    free(v);
    return disk + mem;
}

/* The start (ms) of the oldest per-trace time key of the older format, INT64_MAX when
 * there is none. */
static int64_t oldest_legacy_ms(cmr_store_t *s)
{
    int64_t ms = INT64_MAX;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[1 + CMR_CF_IDX_TIME]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl == 24) {
            ms = cmr_be64_ordered(k) / 1000000;
            break;
        }
        if (cmr_store_is_time_group_key(k, kl))
            break; /* past the older keys */
    }
    rocksdb_iter_destroy(it);
    return ms;
}

/* The key of the oldest time group, INT64_MAX when there is none. */
static int64_t oldest_group(cmr_store_t *s)
{
    int64_t g = INT64_MAX;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro, s->cfs[1 + CMR_CF_IDX_TIME]);
    const char tag = (char)CMR_TIME_GROUP_TAG;
    for (rocksdb_iter_seek(it, &tag, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (cmr_store_is_time_group_key(k, kl)) {
            g = (int64_t)cmr_be64(k + 1);
            break;
        }
    }
    rocksdb_iter_destroy(it);
    return g;
}

/* After retention deleted traces, and when a worker opens the store: postings of groups
 * before the oldest trace left go at the next compaction. A posting of group g names
 * traces new in group g or before (a trace from before time groups whose start changed
 * is posted whole again in the group it joins), and retention deletes time groups oldest
 * first, whole; a trace from before time groups that kept its per-trace time key has
 * postings of groups at least its start, so the oldest of those keys bounds the cutoff
 * too. None when no trace is left: the next group's key is not known. */
static void set_postings_cutoff(cmr_store_t *s)
{
    int64_t legacy = s->legacy_time ? oldest_legacy_ms(s) : INT64_MAX;
    int64_t group = oldest_group(s);
    int64_t cutoff = legacy < group ? legacy : group;
    if (cutoff != INT64_MAX && cutoff > atomic_load(&s->postings_cutoff_ms))
        atomic_store(&s->postings_cutoff_ms, cutoff);
}

/* What retention is after: traces started before `cutoff` (ns), then the oldest while
 * `excess` (bytes of batches over the bound) is positive; about RETENTION_STEP traces a
 * step (whole time groups), deleted in one write. */
#define RETENTION_STEP 1024

typedef struct retention {
    cmr_store_t *s;
    int64_t cutoff, excess;
    cmr_buf_t victims; /* trace ids, 16 bytes each */
} retention_t;

/* Takes one trace as a victim; its estimated size counts against the excess unless it
 * is old. */
static void retain_victim(retention_t *r, const uint8_t trace[16], bool old)
{
    if (!old) {
        cmr_trace_summary_t sum;
        if (cmr_store_get_summary(r->s, trace, &sum) == 1)
            r->excess -= (int64_t)(sum.events * EST_EVENT_BYTES + sum.segments * 64u);
        else
            r->excess -= 64;
    }
    cmr_buf_put(&r->victims, trace, 16);
}

static size_t victims(const retention_t *r)
{
    return r->victims.len / 16;
}

/* The older format's per-trace time keys, oldest first: their traces become victims and
 * the keys themselves are deleted in *wb (whatever their trace's summary says). true
 * when there is none left. */
static bool retain_legacy(retention_t *r, rocksdb_writebatch_t *wb)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->s->db, r->s->ro, r->s->cfs[1 + CMR_CF_IDX_TIME]);
    bool none = true;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it) && victims(r) < RETENTION_STEP; rocksdb_iter_next(it)) {
        size_t kl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (cmr_store_is_time_group_key(k, kl))
            break;
        if (kl != 24)
            continue;
        none = false;
        bool old = cmr_be64_ordered(k) < r->cutoff;
        if (!old && r->excess <= 0)
            break;
        retain_victim(r, k + 8, old);
        rocksdb_writebatch_delete_cf(wb, r->s->cfs[1 + CMR_CF_IDX_TIME], (const char *)k, kl);
    }
    rocksdb_iter_destroy(it);
    return none;
}

/* Time groups, oldest first, whole: their traces become victims (those still stored) and
 * the groups' keys are deleted in *wb. A group is old when its traces all started
 * before the cutoff, or when it was written before it: a start far in the future (a
 * JVM's clock, or a forged one) raises the key of every later group, not their age. */
static void retain_groups(retention_t *r, rocksdb_writebatch_t *wb)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->s->db, r->s->ro, r->s->cfs[1 + CMR_CF_IDX_TIME]);
    const char tag = (char)CMR_TIME_GROUP_TAG;
    for (rocksdb_iter_seek(it, &tag, 1); rocksdb_iter_valid(it) && victims(r) < RETENTION_STEP; rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (!cmr_store_is_time_group_key(k, kl))
            continue;
        int64_t g = (int64_t)cmr_be64(k + 1);
        int64_t written = (int64_t)cmr_be64(k + 9);
        int64_t end = cmr_store_time_group_end_ns(g < written ? g : written);
        bool old = end < r->cutoff;
        if (!old && r->excess <= 0)
            break;
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        for (size_t i = 0; i + CMR_TIME_REC <= vl; i += CMR_TIME_REC)
            retain_victim(r, v + i, old); /* one deleted already is skipped then */
        rocksdb_writebatch_delete_cf(wb, r->s->cfs[1 + CMR_CF_IDX_TIME], (const char *)k, kl);
    }
    rocksdb_iter_destroy(it);
}

long cmr_store_retention(cmr_store_t *s, int64_t now_ns, bool *more)
{
    *more = false;
    if (s->partition < 0 || s->o.read_only)
        return 0;
    retention_t r = {.s = s};
    int64_t age = s->o.retention_age_ms;
    r.cutoff = age > 0 && age < INT64_MAX / 1000000 ? now_ns - age * 1000000 : INT64_MIN; /* larger: forever */
    uint64_t size = s->o.retention_bytes > 0 ? batches_bytes(s) : 0;
    r.excess = s->o.retention_bytes > 0 ? (int64_t)size - s->o.retention_bytes : 0;
    if (r.cutoff == INT64_MIN && r.excess <= 0)
        return 0;
    bool by_size = r.excess > 0;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create(); /* the groups', then the traces' deletes */
    bool legacy_none = s->legacy_time && retain_legacy(&r, wb);
    if (victims(&r) < RETENTION_STEP)
        retain_groups(&r, wb);
    long deleted = 0;
    size_t nv = victims(&r);
    int index_keys = rocksdb_writebatch_count(wb); /* time groups and per-trace time keys */
    if (!cmr_buf_ok(&r.victims)) {
        cmr_log(CMR_LOG_WARN, "ingest.delete_failed", "partition=%d error=\"out of memory\"", s->partition);
        deleted = -1;
    } else if (nv || index_keys) {
        deleted = delete_traces(s, wb, r.victims.data, nv);
    }
    rocksdb_writebatch_destroy(wb);
    cmr_buf_free(&r.victims);
    if (deleted < 0)
        return 0; /* logged; the next call tries again */
    /* a full step of old traces: more may be old (by size, the estimate of the store's
     * size moves only with compactions: one step a call) */
    *more = !by_size && nv >= RETENTION_STEP;
    if (legacy_none && !s->legacy_index && mark_format(s, FORMAT_GROUPS) == 0)
        s->legacy_time = false; /* the older per-trace keys are all gone */
    if (deleted || index_keys)
        set_postings_cutoff(s);
    if (deleted)
        cmr_log(CMR_LOG_INFO, "ingest.retention", "partition=%d deleted=%ld", s->partition, deleted);
    return deleted;
}
