/*
 * cfg_cli.h - the operator commands of cmr-config: apply, diff, list, show, delete, and
 * keygen (the CMR's command signing key, docs/SECURITY.md).
 *
 * Each reads the current configuration from cmr.config (reader.h + cfg_state.h) and,
 * for apply and delete, publishes one ConfigChange per changed key (revision = held + 1).
 * A file that does not parse or does not fit the current configuration (a mapping naming
 * an unknown environment) is rejected before anything is sent.
 * Return values: 0 done, 1 rejected or failed (the reason is on stderr).
 */
#ifndef CMR_CFG_CLI_H
#define CMR_CFG_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "cmr/buf.h"
#include "cmr/conf.h"
#include "cmr/reader.h"
#include "cmr/topics.h"

/* Reads a whole topic (created first when ensure is set), handing each record to fn, for
 * at most config.timeout_ms. 0, or -1 with the reason on stderr. */
typedef void cmr_cfg_record_fn(const cmr_reader_rec_t *rec, void *ud);
int cmr_cfg_read_topic(const cmr_conf_t *conf, cmr_topic_t topic, bool ensure, cmr_cfg_record_fn *fn, void *ud);
/* The same, with the reason in err instead of on stderr (for programs that link the
 * library: a server answers with it). */
int cmr_cfg_read_topic_err(const cmr_conf_t *conf, cmr_topic_t topic, bool ensure, cmr_cfg_record_fn *fn, void *ud,
                           char *err, size_t errlen);
/* The author recorded in what an operator writes: config.author, or user@host built in
 * buf (the caller's, freed by the caller). */
const char *cmr_cfg_author(const cmr_conf_t *conf, cmr_buf_t *buf);

int cmr_cfg_cli_apply(const cmr_conf_t *conf, const char *path, int dry_run, FILE *out);
/* The same for a document in memory (`origin` names it in messages, "file:line"): the plan
 * (or the outcome) on out, every reason it was refused or failed on err_out (not stderr),
 * for programs that link the library (the web UI). 0 done (or planned), 1 refused (bad
 * document: nothing sent), 2 the cluster failed (cmr.config unreadable, or not every change
 * published: the output says which). */
int cmr_cfg_apply_text(const cmr_conf_t *conf, const char *text, size_t len, const char *origin, int dry_run, FILE *out,
                       FILE *err_out);
int cmr_cfg_cli_list(const cmr_conf_t *conf, FILE *out);
int cmr_cfg_cli_show(const cmr_conf_t *conf, const char *id, FILE *out);
int cmr_cfg_cli_delete(const cmr_conf_t *conf, const char *id, FILE *out);

/* keygen: writes a new signing key pair DIR/NAME.key (mode 0600) and DIR/NAME.pub
 * (cmr_trust_keygen; refuses to overwrite) and prints both paths and the key id. dir and
 * name come from --dir (keygen.dir) and --name (keygen.name, default "cmr"). Touches no
 * broker. 0 done, 1 failed, 2 no --dir (reasons on stderr). */
int cmr_cfg_cli_keygen(const cmr_conf_t *conf, FILE *out);

#endif
