/*
 * cp_support.c - control-plane test helpers (see cp_support.h).
 */
#include "cp_support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/clock.h"
#include "cmr/command.h"
#include "cmr/ids.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

extern char **environ;

int64_t cp_mono_ms(void)
{
    return cmr_mono_ms();
}

void cp_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "cp_fmt: \"%s...\" does not fit %zu bytes\n", buf, len);
        abort();
    }
}

void cp_unique(const char *prefix, char *buf, size_t len)
{
    uint8_t raw[6];
    char hex[13];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    cp_fmt(buf, len, "%s-%s", prefix, hex);
}

int cp_tmpdir(char *buf, size_t len)
{
    cp_fmt(buf, len, "/tmp/cmr-cp-XXXXXX");
    return mkdtemp(buf) ? 0 : -1;
}

void cp_rmrf(const char *dir)
{
    if (!dir || strncmp(dir, "/tmp/cmr-cp-", 12) != 0)
        return;
    const char *argv[] = {"/bin/rm", "-rf", dir, NULL};
    cp_run(argv, NULL);
}

/* --- processes ---------------------------------------------------------------------- */

/* Every process started and not yet stopped: killed when the test program exits, so that
 * a failed assertion (cmocka jumps out of the test) leaves no worker running. */
#define CP_MAX_LIVE 64
static pid_t live[CP_MAX_LIVE];

static void kill_live(void)
{
    for (int i = 0; i < CP_MAX_LIVE; i++)
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
}

static void track(pid_t pid, bool add)
{
    static bool registered;
    if (!registered) {
        atexit(kill_live);
        registered = true;
    }
    for (int i = 0; i < CP_MAX_LIVE; i++)
        if (add ? live[i] == 0 : live[i] == pid) {
            live[i] = add ? pid : 0;
            return;
        }
}

int cp_proc_start(cp_proc_t *p, const char *const *argv, const char *log)
{
    memset(p, 0, sizeof *p);
    cp_fmt(p->log, sizeof p->log, "%s", log);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    int rc = posix_spawn(&p->pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(rc));
        p->pid = 0;
        return -1;
    }
    track(p->pid, true);
    return 0;
}

int cp_bench_worker_start(cp_proc_t *p, const char *bin, const char *bootstrap, const char *const *extra,
                          const char *log)
{
    const char *argv[32] = {bin,
                            "--bootstrap",
                            bootstrap,
                            "-X",
                            "kafka.fetch.wait.max.ms=5",
                            "-X",
                            cp_signing_key_option(),
                            "--log-level",
                            getenv("CP_LOG_LEVEL") ? getenv("CP_LOG_LEVEL") : "info"};
    size_t n = 9;
    const char *x = getenv("CP_WORKER_X"); /* one more KEY=VALUE, e.g. instrumenter.threads=1 */
    if (x && *x) {
        argv[n++] = "-X";
        argv[n++] = x;
    }
    for (size_t i = 0; extra && extra[i]; i++) {
        if (n + 1 >= sizeof argv / sizeof *argv)
            return -1;
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    return cp_proc_start(p, argv, log);
}

int cp_proc_stop(cp_proc_t *p)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100; i++) {
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
            track(p->pid, false);
            p->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        usleep(100000);
    }
    cp_proc_kill(p);
    return -1;
}

void cp_proc_forget(cp_proc_t *p)
{
    track(p->pid, false);
    p->pid = 0;
}

void cp_proc_kill(cp_proc_t *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    track(p->pid, false);
    p->pid = 0;
}

/* The whole file, NUL-terminated (malloc'd; NULL when it cannot be read). */
static char *read_file(const char *path, size_t *len)
{
    cmr_buf_t b = {0};
    char err[512];
    if (cmr_file_read(path, (size_t)1 << 30, &b, err, sizeof err) != 0) {
        cmr_buf_free(&b);
        return NULL;
    }
    if (len)
        *len = b.len;
    return cmr_buf_take(&b);
}

int cp_proc_wait_log(const cp_proc_t *p, const char *needle, int timeout_ms)
{
    int64_t deadline = cp_mono_ms() + timeout_ms;
    while (cp_mono_ms() < deadline) {
        char *text = read_file(p->log, NULL);
        int found = text && strstr(text, needle);
        free(text);
        if (found)
            return 0;
        usleep(50000);
    }
    return -1;
}

void cp_proc_dump_log(const cp_proc_t *p, int lines)
{
    char *text = read_file(p->log, NULL);
    if (!text)
        return;
    const char *at = text + strlen(text);
    for (int n = 0; at > text && n <= lines; at--)
        if (at[-1] == '\n')
            n++;
    fprintf(stderr, "--- last lines of %s ---\n%s\n---\n", p->log, at);
    free(text);
}

int cp_proc_count_log(const cp_proc_t *p, const char *needle)
{
    char *text = read_file(p->log, NULL);
    int n = 0;
    for (const char *at = text; at && (at = strstr(at, needle)); at += strlen(needle))
        n++;
    free(text);
    return n;
}

int cp_run(const char *const *argv, char **out)
{
    char tmpl[] = "/tmp/cmr-cp-run-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
        return -1;
    close(fd);
    cp_proc_t p;
    if (cp_proc_start(&p, argv, tmpl) != 0) {
        unlink(tmpl);
        return -1;
    }
    int status;
    waitpid(p.pid, &status, 0);
    track(p.pid, false);
    if (out)
        *out = read_file(tmpl, NULL);
    unlink(tmpl);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --- keys ------------------------------------------------------------------------------ */

static char key_path[512], pub_path[512], key_option[600];

int cp_keys_make(const char *cmr_config_bin, const char *dir)
{
    const char *argv[] = {cmr_config_bin, "keygen", "--dir", dir, "--name", "harness", NULL};
    char *out = NULL;
    int rc = cp_run(argv, &out);
    if (rc != 0) {
        fprintf(stderr, "cmr-config keygen failed (%d): %s\n", rc, out ? out : "");
        free(out);
        return -1;
    }
    free(out);
    cp_fmt(key_path, sizeof key_path, "%s/harness.key", dir);
    cp_fmt(pub_path, sizeof pub_path, "%s/harness.pub", dir);
    cp_fmt(key_option, sizeof key_option, "trust.signing_key=%s", key_path);
    return cmr_trust_init();
}

const char *cp_signing_key(void)
{
    return key_path;
}

const char *cp_public_key(void)
{
    return pub_path;
}

const char *cp_signing_key_option(void)
{
    return key_option;
}

/* --- the scripted agent ------------------------------------------------------------- */

int cp_peer_open(cp_peer_t *p, const cmr_conf_t *conf, const char *name, const char *host, const char *ip)
{
    char err[512], group[128];
    memset(p, 0, sizeof *p);
    p->conf = conf;
    cp_fmt(p->name, sizeof p->name, "%s", name);
    cp_fmt(p->host, sizeof p->host, "%s", host);
    cp_fmt(p->ip, sizeof p->ip, "%s", ip);
    p->start_time_ms = cmr_wall_ms();
    if (cmr_instance_id_new(p->instance_id, sizeof p->instance_id) != 0 ||
        cmr_topic_command(p->instance_id, p->cmd_topic, sizeof p->cmd_topic) != 0)
        return -1;
    p->agent_id = (int64_t)cmr_agent_id(name, host, p->instance_id);
    p->verifier = cmr_verifier_new(p->instance_id, NULL);
    if (!p->verifier || !pub_path[0] || cmr_verifier_add_key_file(p->verifier, pub_path, err, sizeof err) != 0) {
        fprintf(stderr, "peer: cannot pin the harness's public key: %s\n", pub_path[0] ? err : "cp_keys_make first");
        return -1;
    }
    if (cmr_admin_ensure_topic(conf, p->cmd_topic, 1, -1, 0, 10000, err, sizeof err) != 0) {
        fprintf(stderr, "peer: %s\n", err);
        return -1;
    }
    p->producer = cmr_producer_new(conf, "cp-peer", NULL, NULL, err, sizeof err);
    cp_fmt(group, sizeof group, "cmr-agent-%s", p->instance_id);
    const char *topics[] = {p->cmd_topic};
    p->commands = p->producer ? cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err) : NULL;
    if (!p->commands) {
        fprintf(stderr, "peer: %s\n", err);
        return -1;
    }
    return 0;
}

void cp_peer_close(cp_peer_t *p)
{
    if (p->commands)
        cmr_consumer_close(p->commands);
    if (p->producer)
        cmr_producer_destroy(p->producer, 2000);
    cmr_verifier_free(p->verifier);
    p->commands = NULL;
    p->producer = NULL;
    p->verifier = NULL;
}

int cp_peer_register(cp_peer_t *p, int attempt)
{
    return cp_peer_register_queued(p, attempt) == 0 ? cmr_producer_flush(p->producer, 10000) : -1;
}

int cp_peer_register_queued(cp_peer_t *p, int attempt)
{
    char err[256];
    char *ips[] = {p->ip};
    cmr_agent_registration_t r = {
        .instance_id = p->instance_id,
        .agent_name = p->name,
        .hostname = p->host,
        .ip_addresses = {ips, 1},
        .pid = getpid(),
        .jvm_vendor = "cp-peer",
        .jvm_version = "0",
        .agent_version = "test",
        .start_time_ms = p->start_time_ms,
        .attempt = attempt,
    };
    return cmr_producer_send(p->producer, CMR_MSG_AGENT_REGISTRATION, &r, NULL, NULL, err, sizeof err) == CMR_SEND_OK
               ? 0
               : -1;
}

int cp_peer_next(cp_peer_t *p, int timeout_ms, cmr_msg_t *out)
{
    int64_t deadline = cp_mono_ms() + timeout_ms;
    do {
        cmr_record_t *rec;
        int64_t left = deadline - cp_mono_ms();
        int rc = cmr_consumer_poll(p->commands, left > 50 ? 50 : left > 0 ? (int)left : 0, &rec);
        if (rc == 1) {
            char err[256];
            /* hand out an owned copy: decode the raw bytes again */
            int ok = cmr_msg_decode(rec->payload, rec->len, out, err, sizeof err) == CMR_WIRE_OK;
            cmr_consumer_done(p->commands, rec);
            cmr_record_free(rec);
            if (!ok)
                continue;
            /* like the agent: only the command inside an envelope that verifies */
            cmr_trust_verdict_t v = cmr_command_open(p->verifier, out, cmr_wall_ms());
            if (v == CMR_TRUST_OK)
                return 1;
            fprintf(stderr, "peer %s: command refused (%s): %s\n", p->name, cmr_trust_verdict_name(v),
                    cmr_msg_type_name(out->type));
            cmr_msg_free(out);
            p->refused++;
            return -1;
        }
    } while (cp_mono_ms() < deadline);
    return 0;
}

int cp_peer_expect(cp_peer_t *p, cmr_msg_type_t type, int timeout_ms, cmr_msg_t *out)
{
    int64_t deadline = cp_mono_ms() + timeout_ms;
    while (cp_mono_ms() < deadline) {
        if (cp_peer_next(p, (int)(deadline - cp_mono_ms()), out) != 1)
            return 0;
        if (out->type == type)
            return 1;
        fprintf(stderr, "peer %s: skipping %s while waiting for %s\n", p->name, cmr_msg_type_name(out->type),
                cmr_msg_type_name(type));
        cmr_msg_free(out);
    }
    return 0;
}

void cp_peer_configure(cp_peer_t *p, const cmr_agent_configuration_t *c)
{
    p->agent_id = c->agent_id;
    cp_fmt(p->env_id, sizeof p->env_id, "%s", c->environment_id);
    p->revision = c->revision;
}

int cp_peer_send_class(cp_peer_t *p, const char *class_name, int64_t loader, const uint8_t *bytes, size_t len,
                       cmr_class_cause_t cause, int64_t request_id)
{
    char err[256];
    cmr_class_loaded_t c = {
        .agent_id = p->agent_id,
        .instance_id = p->instance_id,
        .environment_id = p->env_id,
        .revision = p->revision,
        .class_name = (char *)class_name,
        .loader_id = loader,
        .loader_name = loader ? "app" : NULL,
        .class_hash = (int64_t)cmr_class_hash(bytes, len),
        .cause = cause,
        .request_id = request_id,
        .bytecode = {(uint8_t *)bytes, len},
        .agent_features = p->agent_features,
    };
    int rc = cmr_producer_send(p->producer, CMR_MSG_CLASS_LOADED, &c, NULL, NULL, err, sizeof err);
    if (rc != CMR_SEND_OK)
        fprintf(stderr, "peer: send class: %s\n", rc == CMR_SEND_QUEUE_FULL ? "queue full" : err);
    return rc == CMR_SEND_OK ? 0 : -1;
}

int cp_peer_flush(cp_peer_t *p)
{
    return cmr_producer_flush(p->producer, 20000);
}

/* --- Java classes ------------------------------------------------------------------- */

static int add_class(cp_classes_t *c, const char *name, const char *path)
{
    size_t len;
    char *data = read_file(path, &len);
    if (!data)
        return -1;
    cp_class_t *items = realloc(c->items, (c->count + 1) * sizeof *items);
    if (!items) {
        free(data);
        return -1;
    }
    c->items = items;
    cp_class_t *k = &c->items[c->count++];
    cp_fmt(k->name, sizeof k->name, "%s", name);
    k->bytes = (uint8_t *)data;
    k->len = len;
    return 0;
}

/* Adds every .class under dir/rel (recursively), named by their path. */
static int scan(cp_classes_t *c, const char *root, const char *rel, const char *prefix, size_t max)
{
    char path[1024];
    cp_fmt(path, sizeof path, "%s/%s", root, rel);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) && rc == 0 && c->count < max) {
        if (e->d_name[0] == '.')
            continue;
        char sub[1024], full[1200];
        cp_fmt(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        cp_fmt(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            rc = scan(c, root, sub, prefix, max);
        } else {
            size_t n = strlen(sub);
            if (n > 6 && strcmp(sub + n - 6, ".class") == 0 && strncmp(sub, prefix, strlen(prefix)) == 0 &&
                strcmp(e->d_name, "module-info.class") != 0) {
                sub[n - 6] = '\0';
                rc = add_class(c, sub, full);
            }
        }
    }
    closedir(d);
    return rc;
}

static const char *jdk_bin(const char *tool, char *buf, size_t len)
{
    const char *home = getenv("CMR_JAVA_HOME");
    cp_fmt(buf, len, "%s/bin/%s", home ? home : "/usr/lib/jvm/java-17-openjdk-amd64", tool);
    return buf;
}

int cp_java_compile(const char *const *sources, cp_classes_t *out)
{
    memset(out, 0, sizeof *out);
    if (cp_tmpdir(out->dir, sizeof out->dir) != 0)
        return -1;
    char src[300], cls[300], javac[300];
    cp_fmt(src, sizeof src, "%s/src", out->dir);
    cp_fmt(cls, sizeof cls, "%s/classes", out->dir);
    mkdir(src, 0755);
    mkdir(cls, 0755);
    const char *argv[72] = {jdk_bin("javac", javac, sizeof javac), "-g", "-d", cls};
    int n = 4;
    char paths[64][400];
    for (int i = 0; i < 64 && sources[2 * i]; i++) {
        cp_fmt(paths[i], sizeof paths[i], "%s/%s", src, sources[2 * i]);
        FILE *f = fopen(paths[i], "w");
        if (!f || fputs(sources[2 * i + 1], f) < 0 || fclose(f) != 0)
            return -1;
        argv[n++] = paths[i];
    }
    argv[n] = NULL;
    char *output = NULL;
    int rc = cp_run(argv, &output);
    if (rc != 0) {
        fprintf(stderr, "javac failed (%d): %s\n", rc, output ? output : "");
        free(output);
        return -1;
    }
    free(output);
    return scan(out, cls, "", "", SIZE_MAX);
}

int cp_jdk_classes(const char *module, const char *prefix, size_t max, cp_classes_t *out)
{
    memset(out, 0, sizeof *out);
    if (cp_tmpdir(out->dir, sizeof out->dir) != 0)
        return -1;
    char jimage[300], modules[300], dest[300];
    const char *home = getenv("CMR_JAVA_HOME");
    cp_fmt(modules, sizeof modules, "%s/lib/modules", home ? home : "/usr/lib/jvm/java-17-openjdk-amd64");
    cp_fmt(dest, sizeof dest, "%s/x", out->dir);
    char include[300];
    cp_fmt(include, sizeof include, "--include=regex:/%s/%s.*", module, prefix);
    const char *argv[] = {jdk_bin("jimage", jimage, sizeof jimage), "extract", include, "--dir", dest, modules, NULL};
    char *output = NULL;
    int rc = cp_run(argv, &output);
    if (rc != 0) {
        fprintf(stderr, "jimage failed (%d): %s\n", rc, output ? output : "");
        free(output);
        return -1;
    }
    free(output);
    char root[400];
    cp_fmt(root, sizeof root, "%s/%s", dest, module);
    return scan(out, root, "", prefix, max);
}

const cp_class_t *cp_classes_find(const cp_classes_t *c, const char *name)
{
    for (size_t i = 0; i < c->count; i++)
        if (strcmp(c->items[i].name, name) == 0)
            return &c->items[i];
    return NULL;
}

void cp_classes_free(cp_classes_t *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->items[i].bytes);
    free(c->items);
    cp_rmrf(c->dir);
    memset(c, 0, sizeof *c);
}

/* --- configuration ------------------------------------------------------------------ */

int cp_apply(const char *cmr_config_bin, const char *bootstrap, const char *yaml, char **out)
{
    char path[] = "/tmp/cmr-cp-env-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t n = strlen(yaml);
    if (write(fd, yaml, n) != (ssize_t)n) {
        close(fd);
        unlink(path);
        return -1;
    }
    close(fd);
    const char *argv[] = {cmr_config_bin, "--bootstrap", bootstrap, "--log-level", "warn", "apply", path, NULL};
    int rc = cp_run(argv, out);
    unlink(path);
    return rc;
}
