/*
 * tests/fuzz/fuzz_checkpoint_meta.c - libFuzzer target: a checkpoint's
 * metadata and the GPT configuration parser.
 *
 * The first byte picks what the rest is: even, a safetensors file whose
 * awl metadata awl_checkpoint_read_state parses (format, version, every
 * integer, the metadata CRC), followed by the architecture it names
 * (awl_gpt_config_from_json) and awl_gpt_config_from_weights; odd, the
 * JSON of a configuration alone. Whatever is accepted must be in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"

static void check_config(const awl_gpt_config *c)
{
    if (c->vocab < 1 || c->block < 1 || c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 ||
        c->batch < 1 || c->n_embd % c->n_head != 0 || !(c->dropout >= 0 && c->dropout < 1))
        abort();
}

static void parse_config(const char *json)
{
    awl_gpt_config c;
    if (awl_gpt_config_from_json(json, &c) == 0) {
        check_config(&c);
        char back[512];
        awl_gpt_config again;
        if (awl_gpt_config_to_json(&c, back, sizeof back) < 0 ||
            awl_gpt_config_from_json(back, &again) < 0 || memcmp(&c, &again, sizeof c) != 0)
            abort(); /* what is accepted writes back the same */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1) {
        char *json = malloc(size);
        memcpy(json, data + 1, size - 1);
        json[size - 1] = '\0';
        parse_config(json);
        free(json);
        return 0;
    }
    awl_safetensors *f = awl_safetensors_open_memory(data + 1, size - 1, "fuzz");
    if (!f) return 0;
    awl_train_state st = {0};
    if (awl_checkpoint_read_state(f, &st) == 0) {
        if (st.config_json) parse_config(st.config_json);
        for (int i = 0; i < st.n_extra; i++)
            if (awl_train_state_get_extra(&st, st.extra_keys[i]) == NULL) abort();
        awl_train_state_clear(&st);
    } else if (!awl_last_error()[0]) {
        abort();
    }
    awl_gpt_config c = {.n_head = 1, .batch = 1};
    if (awl_gpt_config_from_weights(f, &c) == 0) check_config(&c);
    awl_safetensors_close(f);
    return 0;
}
