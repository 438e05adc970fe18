/*
 * msg_sample.h - one realistic message of each type, for the demo and external tests.
 */
#ifndef CMR_MSG_SAMPLE_H
#define CMR_MSG_SAMPLE_H

#include "cmr/msg.h"

/* Fills out with a heap-owned sample (release with cmr_msg_free()). */
void cmr_msg_sample(cmr_msg_type_t type, cmr_msg_t *out);

#endif
