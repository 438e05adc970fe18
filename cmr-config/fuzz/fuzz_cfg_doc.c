/*
 * fuzz_cfg_doc.c - libFuzzer target: any bytes given to the environment-file parser
 * (cmr_cfg_doc_parse) give a document or a clean "file:line: reason" error; never a crash,
 * an out-of-bounds access, a leak or unbounded work. A document that parses prints (as
 * `cmr-config show` does) to YAML that parses to equal environments.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmr/cfg_doc.h"
#include "cmr/cfg_state.h"
#include "cmr/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cmr_log_set_level(CMR_LOG_OFF);
    cmr_cfg_doc_t d;
    char err[512];
    if (cmr_cfg_doc_parse((const char *)data, size, "fuzz.yaml", &d, err, sizeof err) != 0)
        return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        abort();
    fputs("version: 1\nenvironments:\n", f);
    for (size_t i = 0; i < d.n_envs; i++)
        cmr_cfg_write_env(&d.envs[i], f);
    fclose(f);
    cmr_cfg_doc_t again;
    if (d.n_envs && cmr_cfg_doc_parse(text, len, "printed", &again, err, sizeof err) == 0) {
        if (again.n_envs != d.n_envs)
            abort();
        for (size_t i = 0; i < d.n_envs; i++)
            if (!cmr_cfg_env_equal(&d.envs[i], &again.envs[i]))
                abort();
        cmr_cfg_doc_free(&again);
    }
    free(text);
    cmr_cfg_doc_free(&d);
    return 0;
}
