/*
 * tests/fuzz/fuzz_tokenizer.c - libFuzzer target: the tokenizer loaders.
 *
 * The first byte picks the loader, the rest is its input:
 *   0: awl_tokenizer_deserialize (a checkpoint's "tokenizer" string);
 *   1: a character tokenizer built from the bytes;
 *   2: a BPE tokenizer trained on the bytes (at most 256 bytes, 8 merges).
 * A tokenizer that loads must serialise back to what rebuilds it, and
 * decode(encode(text)) must give the text back for any text it encodes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"

static void round_trip(const awl_tokenizer *tok, const char *text, size_t len)
{
    int32_t *ids;
    size_t n;
    if (awl_tokenizer_encode(tok, text, len, &ids, &n) != 0) return;
    char *back;
    size_t back_len;
    if (awl_tokenizer_decode(tok, ids, n, &back, &back_len) != 0) abort();
    if (back_len != len || memcmp(back, text, len) != 0) abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    awl_tokenizer *tok = NULL;
    switch (data[0] % 3) {
    case 0: tok = awl_tokenizer_deserialize(text, len); break;
    case 1: tok = awl_tokenizer_char_from_text(text, len); break;
    default:
        if (len <= 256) tok = awl_tokenizer_bpe_train(text, len, 256 + 8);
        break;
    }
    if (!tok) return 0;
    char *saved;
    size_t saved_len;
    if (awl_tokenizer_serialize(tok, &saved, &saved_len) != 0) abort();
    awl_tokenizer *again = awl_tokenizer_deserialize(saved, saved_len);
    if (!again || awl_tokenizer_vocab_size(again) != awl_tokenizer_vocab_size(tok)) abort();
    round_trip(tok, text, len);
    round_trip(tok, "the quick brown fox", 19);
    awl_tokenizer_free(again);
    free(saved);
    awl_tokenizer_free(tok);
    return 0;
}
