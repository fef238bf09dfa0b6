/*
 * tests/fuzz/fuzz_safetensors.c - libFuzzer target: the safetensors reader.
 *
 * Any bytes are a file to awl_safetensors_open_memory: it must either
 * refuse them with a message or hand back a file whose every tensor loads
 * and whose every accessor answers, without reading outside the bytes,
 * leaking, or tripping a sanitizer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    awl_safetensors *f = awl_safetensors_open_memory(data, size, "fuzz");
    if (!f) {
        if (!awl_last_error()[0]) abort(); /* a refusal always says why */
        return 0;
    }
    for (int i = 0; i < awl_safetensors_count(f); i++) {
        awl_safetensors_info info;
        if (awl_safetensors_info_at(f, i, &info) < 0) abort();
        if (awl_safetensors_find(f, info.name) != i) abort();
        awl_scope_begin();
        awl_tensor *t = awl_safetensors_load(f, i, "cpu");
        if (t) awl_tensor_first_non_finite(t, &(double){0});
        awl_scope_end();
    }
    for (int i = 0; i < awl_safetensors_metadata_count(f); i++) {
        const char *key = awl_safetensors_metadata_key(f, i);
        if (awl_safetensors_metadata_get(f, key) == NULL) abort();
        (void)strlen(awl_safetensors_metadata_value(f, i));
    }
    awl_safetensors_close(f);
    return 0;
}
