/*
 * tests/fuzz/fuzz_corpus.c - libFuzzer target: the corpus reader.
 *
 * Any bytes are a corpus file to awl_corpus_from_bytes (plain or gzip):
 * what it accepts must be non-empty UTF-8 without NUL, and must tokenise
 * into a dataset (or be refused as too short) without a sanitizer firing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "common/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text;
    size_t len;
    if (awl_corpus_from_bytes(data, size, "fuzz", &text, &len) != 0) {
        if (!awl_last_error()[0]) abort();
        return 0;
    }
    if (len == 0 || memchr(text, '\0', len) || awl_utf8_first_invalid(text, len) != len ||
        text[len] != '\0')
        abort();
    awl_tokenizer *tok = awl_tokenizer_char_from_text(text, len);
    if (!tok) abort();
    awl_text_dataset *ds = awl_text_dataset_from_text(text, len, tok, 4, 0.9);
    awl_text_dataset_free(ds);
    awl_tokenizer_free(tok);
    free(text);
    return 0;
}
