/*
 * ui.h - cmr-ui: the web UI of the CMR and the JSON API behind it (docs/UI.md).
 *
 *   cmr_ui_t *ui = cmr_ui_start(conf, err, sizeof err);   // ui.*, config.*, kafka.* keys
 *   ... cmr_ui_port(ui) ...
 *   cmr_ui_stop(ui);
 *
 * It serves the front end (cmr-ui/web: plain JavaScript modules), passes the reads of
 * traces, metrics, agents and diagnosis reports to cmr-ingest's HTTP API, answers
 * environments and diagnoses from its own projections of cmr.config, cmr.diagnoses and
 * cmr.diagnosis-trees, and turns the writes a person makes on the page into messages on
 * those topics, the way `cmr-config` writes them. It holds no state of its own: any
 * number of cmr-ui processes can run side by side (each applies environments with a
 * transactional id of its own; a person signed in at one is not signed in at another).
 *
 * Ownership: the UI owns its server, forwarder, projections and a copy of conf.
 */
#ifndef CMR_UI_H
#define CMR_UI_H

#include "cmr/conf.h"

typedef struct cmr_ui cmr_ui_t;

/* Starts serving (ui.address, ui.port) and following the topics. NULL with err filled. */
cmr_ui_t *cmr_ui_start(const cmr_conf_t *conf, char *err, size_t errlen);
/* The bound port. */
int cmr_ui_port(const cmr_ui_t *ui);
/* Stops serving (requests in flight finish) and frees. NULL is a no-op. */
void cmr_ui_stop(cmr_ui_t *ui);

#endif
