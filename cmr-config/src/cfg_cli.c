/*
 * cfg_cli.c - apply / diff / list / show / delete (see cfg_cli.h).
 *
 * Ownership: every command loads its own state and frees it before returning.
 */
#include "cmr/cfg_cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/cfg_doc.h"
#include "cmr/reader.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/map.h"

/* Reads cmr.config to its end. NULL with the reason on stderr. */
static cmr_cfg_state_t *load_state(const cmr_conf_t *conf)
{
    char err[512];
    int64_t timeout;
    if (cmr_conf_get_int(conf, "config.timeout_ms", 30000, 100, 3600000, &timeout, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: %s\n", err);
        return NULL;
    }
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_CONFIG), 0, err, sizeof err);
    if (!r) {
        fprintf(stderr, "cmr-config: cannot read the configuration: %s\n", err);
        return NULL;
    }
    cmr_cfg_state_t *s = cmr_cfg_state_new();
    int64_t deadline = cmr_mono_ms() + timeout;
    cmr_reader_rec_t rec;
    while (s && !cmr_reader_caught_up(r)) {
        int rc = cmr_mono_ms() > deadline ? -1 : cmr_reader_poll(r, 200, &rec);
        if (rc < 0) {
            fprintf(stderr, "cmr-config: could not read %s to its end within %" PRId64 " ms\n",
                    cmr_topic_name(CMR_TOPIC_CONFIG), timeout);
            cmr_cfg_state_free(s);
            s = NULL;
        } else if (rc == 1 && cmr_cfg_state_apply(s, rec.payload, rec.len, NULL, err, sizeof err) < 0) {
            cmr_log(CMR_LOG_WARN, "config.bad_record", "partition=%d offset=%" PRId64 " error=\"%s\"", rec.partition,
                    rec.offset, err);
        }
    }
    cmr_reader_free(r);
    return s;
}

/* The author recorded in the changes: config.author, or user@host built whole in buf
 * (owned by the caller). */
static const char *author(const cmr_conf_t *conf, cmr_buf_t *buf)
{
    const char *a = cmr_conf_get(conf, "config.author", NULL);
    if (a)
        return a;
    char host[256] = "?"; /* HOST_NAME_MAX is 64 */
    gethostname(host, sizeof host - 1);
    const char *user = getenv("USER");
    cmr_buf_printf(buf, "%s@%s", user ? user : "?", host);
    return cmr_buf_ok(buf) ? cmr_buf_str(buf) : "?";
}

/* --- the plan: what apply would publish --------------------------------------------- */

typedef struct plan {
    cmr_config_change_t *changes;
    const char **what; /* "created", "updated" */
    size_t n;
} plan_t;

static int mappings_equal(const cmr_agent_mapping_t *a, size_t na, const cmr_agent_mapping_t *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].agent_pattern, b[i].agent_pattern) || strcmp(a[i].address, b[i].address) ||
            strcmp(a[i].environment_id, b[i].environment_id))
            return 0;
    return 1;
}

/* Checks the document against the state and lists the changes. -1 when rejected. */
static int make_plan(const cmr_cfg_state_t *s, const cmr_cfg_doc_t *doc, const char *path, const char *who,
                     plan_t *plan)
{
    plan->changes = calloc(doc->n_envs + 1, sizeof *plan->changes);
    plan->what = calloc(doc->n_envs + 1, sizeof *plan->what);
    if (!plan->changes || !plan->what)
        return -1;
    cmr_map_t in_file = {0}; /* the file's environment ids: linear in environments + mappings */
    for (size_t j = 0; j < doc->n_envs; j++)
        if (cmr_map_put(&in_file, doc->envs[j].id, strlen(doc->envs[j].id), NULL) != 0) {
            cmr_map_free(&in_file);
            fprintf(stderr, "cmr-config: out of memory\n");
            return -1;
        }
    for (size_t i = 0; i < doc->n_mappings; i++) {
        const char *e = doc->mappings[i].environment_id;
        int known = cmr_cfg_state_env(s, e, NULL) != NULL || cmr_map_has(&in_file, e, strlen(e));
        if (!known) {
            cmr_map_free(&in_file);
            fprintf(stderr,
                    "cmr-config: %s:%d: mappings[%zu].environment: environment \"%s\" is neither in this file "
                    "nor in the CMR (see 'cmr-config list')\n",
                    path, doc->mapping_lines[i], i, e);
            return -1;
        }
    }
    cmr_map_free(&in_file);
    int64_t t = cmr_wall_ms();
    for (size_t i = 0; i < doc->n_envs; i++) {
        const cmr_environment_t *cur = cmr_cfg_state_env(s, doc->envs[i].id, NULL);
        if (cur && cmr_cfg_env_equal(cur, &doc->envs[i]))
            continue;
        plan->what[plan->n] = cur ? "updated" : "created";
        plan->changes[plan->n++] = (cmr_config_change_t){
            .kind = CMR_CONFIG_ENVIRONMENT,
            .revision = cmr_cfg_state_key_revision(s, doc->envs[i].id) + 1,
            .time_ms = t,
            .author = (char *)who,
            .environment = &doc->envs[i],
        };
    }
    size_t ncur;
    const cmr_agent_mapping_t *cur = cmr_cfg_state_mappings(s, &ncur, NULL);
    if (doc->has_mappings && !mappings_equal(cur, ncur, doc->mappings, doc->n_mappings)) {
        plan->what[plan->n] = "updated";
        cmr_config_change_t *c = &plan->changes[plan->n++];
        *c = (cmr_config_change_t){.kind = CMR_CONFIG_MAPPINGS,
                                   .revision = cmr_cfg_state_key_revision(s, "mappings") + 1,
                                   .time_ms = t,
                                   .author = (char *)who};
        c->mappings.items = doc->mappings;
        c->mappings.count = doc->n_mappings;
    }
    return 0;
}

static void print_plan(const plan_t *plan, int dry_run, FILE *out)
{
    for (size_t i = 0; i < plan->n; i++) {
        const cmr_config_change_t *c = &plan->changes[i];
        if (c->kind == CMR_CONFIG_MAPPINGS)
            fprintf(out, "%smappings: %s (%zu entries, revision %" PRId64 ")\n", dry_run ? "~ " : "", plan->what[i],
                    c->mappings.count, c->revision);
        else
            fprintf(out, "%senvironment %s: %s (%zu sensor assignments, revision %" PRId64 ")\n", dry_run ? "~ " : "",
                    c->environment->id, plan->what[i], c->environment->assignments.count, c->revision);
    }
    if (plan->n == 0)
        fprintf(out, "no changes\n");
}

static int publish(const cmr_conf_t *conf, const cmr_config_change_t *changes, size_t n)
{
    char err[512];
    cmr_producer_t *p = cmr_producer_new(conf, "cmr-config-cli", NULL, NULL, err, sizeof err);
    if (!p) {
        fprintf(stderr, "cmr-config: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (cmr_producer_send(p, CMR_MSG_CONFIG_CHANGE, &changes[i], NULL, NULL, err, sizeof err) != CMR_SEND_OK) {
            fprintf(stderr, "cmr-config: cannot send: %s\n", err);
            rc = 1;
        }
    cmr_producer_stats_t st;
    if (rc == 0 && cmr_producer_flush(p, 30000) != 0)
        rc = 1;
    cmr_producer_stats(p, &st);
    if (st.failed || st.delivered != n)
        rc = 1;
    if (rc)
        fprintf(stderr, "cmr-config: not every change was delivered (%" PRIu64 " of %zu): run apply again\n",
                st.delivered, n);
    cmr_producer_destroy(p, 1000);
    return rc;
}

int cmr_cfg_cli_apply(const cmr_conf_t *conf, const char *path, int dry_run, FILE *out)
{
    cmr_cfg_doc_t doc;
    char err[1024];
    cmr_buf_t who = {0};
    if (cmr_cfg_doc_load(path, &doc, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: %s\ncmr-config: nothing changed\n", err);
        return 1;
    }
    cmr_cfg_state_t *s = load_state(conf);
    plan_t plan = {0};
    int rc = 1;
    if (s && make_plan(s, &doc, path, author(conf, &who), &plan) == 0) {
        print_plan(&plan, dry_run, out);
        rc = dry_run || plan.n == 0 ? 0 : publish(conf, plan.changes, plan.n);
    } else if (s) {
        fprintf(stderr, "cmr-config: nothing changed\n");
    }
    free(plan.changes);
    free(plan.what);
    cmr_cfg_state_free(s);
    cmr_cfg_doc_free(&doc);
    cmr_buf_free(&who);
    return rc;
}

int cmr_cfg_cli_list(const cmr_conf_t *conf, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf);
    if (!s)
        return 1;
    fprintf(out, "%-24s %-9s %-8s %s\n", "ENVIRONMENT", "REVISION", "SENSORS", "NAME");
    int64_t rev;
    for (size_t i = 0; i < cmr_cfg_state_env_count(s); i++) {
        const cmr_environment_t *e = cmr_cfg_state_env_at(s, i, &rev);
        fprintf(out, "%-24s %-9" PRId64 " %-8zu %s\n", e->id, rev, e->assignments.count, e->name);
    }
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, &rev);
    fprintf(out, "\n# mappings, revision %" PRId64 " (first match wins)\n", rev);
    cmr_cfg_write_mappings(m, n, out);
    cmr_cfg_state_free(s);
    return 0;
}

int cmr_cfg_cli_show(const cmr_conf_t *conf, const char *id, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf);
    if (!s)
        return 1;
    int rc = 0;
    int64_t rev;
    if (strcmp(id, "mappings") == 0) {
        size_t n;
        const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, &rev);
        fprintf(out, "# revision %" PRId64 "\nversion: %d\n", rev, CMR_CFG_FORMAT_VERSION);
        cmr_cfg_write_mappings(m, n, out);
    } else {
        const cmr_environment_t *e = cmr_cfg_state_env(s, id, &rev);
        if (e) {
            fprintf(out, "# revision %" PRId64 "\nversion: %d\nenvironments:\n", rev, CMR_CFG_FORMAT_VERSION);
            cmr_cfg_write_env(e, out);
        } else {
            fprintf(stderr, "cmr-config: no environment \"%s\" (see 'cmr-config list')\n", id);
            rc = 1;
        }
    }
    cmr_cfg_state_free(s);
    return rc;
}

int cmr_cfg_cli_delete(const cmr_conf_t *conf, const char *id, FILE *out)
{
    cmr_cfg_state_t *s = load_state(conf);
    if (!s)
        return 1;
    int rc = 1;
    const cmr_environment_t *e = cmr_cfg_state_env(s, id, NULL);
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s, &n, NULL);
    for (size_t i = 0; e && i < n; i++)
        if (strcmp(m[i].environment_id, id) == 0) {
            fprintf(stderr,
                    "cmr-config: mapping %zu (agent \"%s\") still names environment \"%s\": change the "
                    "mappings first\n",
                    i + 1, m[i].agent_pattern, id);
            e = NULL;
            n = 0;
            rc = 2;
        }
    if (!e && rc == 1)
        fprintf(stderr, "cmr-config: no environment \"%s\"\n", id);
    if (e) {
        cmr_buf_t who = {0};
        cmr_environment_t gone = {.id = (char *)id, .name = (char *)id, .description = ""};
        cmr_config_change_t c = {.kind = CMR_CONFIG_ENVIRONMENT_DELETED,
                                 .revision = cmr_cfg_state_key_revision(s, id) + 1,
                                 .time_ms = cmr_wall_ms(),
                                 .author = (char *)author(conf, &who),
                                 .environment = &gone};
        rc = publish(conf, &c, 1);
        if (rc == 0)
            fprintf(out, "environment %s: deleted (revision %" PRId64 ")\n", id, c.revision);
        cmr_buf_free(&who);
    }
    cmr_cfg_state_free(s);
    return rc ? 1 : 0;
}
