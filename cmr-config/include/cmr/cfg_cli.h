/*
 * cfg_cli.h - the operator commands of cmr-config: apply, diff, list, show, delete.
 *
 * Each reads the current configuration from cmr.config (reader.h + cfg_state.h) and,
 * for apply and delete, publishes one ConfigChange per changed key (revision = held + 1).
 * A file that does not parse or does not fit the current configuration (a mapping naming
 * an unknown environment) is rejected before anything is sent.
 * Return values: 0 done, 1 rejected or failed (the reason is on stderr).
 */
#ifndef CMR_CFG_CLI_H
#define CMR_CFG_CLI_H

#include <stdio.h>

#include "cmr/conf.h"

int cmr_cfg_cli_apply(const cmr_conf_t *conf, const char *path, int dry_run, FILE *out);
int cmr_cfg_cli_list(const cmr_conf_t *conf, FILE *out);
int cmr_cfg_cli_show(const cmr_conf_t *conf, const char *id, FILE *out);
int cmr_cfg_cli_delete(const cmr_conf_t *conf, const char *id, FILE *out);

#endif
