/*
 * data/tokenizer_internal.h - what tokenizer.c and bpe.c share (private).
 *
 * Both kinds of tokenizer decode the same way, by looking each id up in a
 * table of byte strings, so the struct keeps that table for both; only
 * encoding differs (a byte -> id table for "char", the ranked merges for
 * "bpe").
 */
#ifndef AWL_DATA_TOKENIZER_INTERNAL_H
#define AWL_DATA_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

typedef enum tokenizer_kind { TOKENIZER_CHAR, TOKENIZER_BPE } tokenizer_kind;

/* A hash map from a pair of token ids to an int32 value (open addressing,
 * linear probing). BPE training maps a pair to its record, encoding maps a
 * pair to its merge rank. */
typedef struct awl_pair_map {
    uint64_t *keys; /* (left << 32) | right; PAIR_MAP_EMPTY marks a free slot */
    int32_t *values;
    size_t capacity; /* a power of two */
    size_t count;
} awl_pair_map;

struct awl_tokenizer {
    tokenizer_kind kind;
    int vocab_size;

    /* Decoding: token t is bytes[offsets[t] .. offsets[t + 1]). */
    uint32_t *offsets; /* vocab_size + 1 entries */
    uint8_t *bytes;

    /* "char": the id of each byte, or -1 when it is not in the vocabulary. */
    int16_t char_id[256];

    /* "bpe": merge r joins merges[2r] and merges[2r + 1] into token 256 + r;
     * merge_rank maps the pair back to r. */
    int n_merges;
    int32_t *merges;
    awl_pair_map merge_rank;
};

/* Returns 0, or AWL_ERR_OOM (message recorded, naming `op`). */
int awl_pair_map_init(awl_pair_map *m, size_t capacity_hint, const char *op);
void awl_pair_map_free(awl_pair_map *m);
/* The value stored for (left, right), or -1. */
int32_t awl_pair_map_get(const awl_pair_map *m, int32_t left, int32_t right);
/* Stores value for (left, right), replacing any old one. 0 or AWL_ERR_OOM. */
int awl_pair_map_put(awl_pair_map *m, int32_t left, int32_t right, int32_t value, const char *op);

/* A BPE tokenizer with the given merges (n_merges pairs, copied; each id must
 * be below 256 + its merge's index, the caller has checked). NULL with
 * AWL_ERR_OOM on allocation failure. */
awl_tokenizer *awl_bpe_from_merges(const int32_t *merges, int n_merges, const char *op);

/* Encodes len bytes (len < 2^31) with a BPE tokenizer into out, which has
 * room for len ids; sets *n. 0 or a negative status. */
int awl_bpe_encode(const awl_tokenizer *tok, const uint8_t *text, size_t len, int32_t *out,
                   size_t *n);

#endif
