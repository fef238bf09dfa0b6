/*
 * data/bpe.c - byte-level byte-pair encoding: training and encoding.
 *
 * Tokens 0..255 are bytes; merge r joins two earlier tokens into token
 * 256 + r. Encoding applies the merges in rank order, each to every
 * occurrence, left to right (so "aaa" with the merge a+a gives "aa","a").
 * Training chooses the merges: at each step the most frequent adjacent pair
 * of the current sequence (overlapping occurrences counted, as minbpe does;
 * ties go to the smallest (left, right)), applied the same way encoding
 * applies it. So encoding the training text reproduces training's result.
 *
 * Training, incrementally. Recounting every pair after each merge costs
 * O(text) per merge: minutes for a 50k vocabulary on a megabyte. Instead the
 * text is a doubly linked list of tokens, and every pair keeps a count and
 * the list of positions where it occurs. Merging (a, b) into x at position i
 * (prev token p, next token q) changes only four counts: (p,a) and (b,q) lose
 * one, (p,x) and (x,q) gain one, and the positions of the two new pairs are
 * appended to their lists. Lists are never cleaned: a stale position is
 * recognised when used, because the tokens there are no longer (a, b).
 * Every pair that gains a count involves x, the newest token, so it is born
 * in this merge's pass; an older pair's count only ever falls. That makes a
 * lazy max-heap exact: an entry whose stored count is above the pair's real
 * count is re-pushed with the real count when it reaches the top, and a pair
 * counted fewer than twice once its pass is over is never worth a merge.
 * Total work: O(n log n) for a text of n bytes, whatever the vocabulary.
 *
 * Encoding uses the same linked list and, in place of counts, a list per
 * merge rank of the positions where that merge may apply. Ranks are visited
 * in order, each list left to right. A merge only creates pairs with a later
 * rank (they contain the token just made), so every occurrence of rank r is
 * queued before rank r is visited: O(n + vocabulary), with no heap.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"

/* ---- the pair map ------------------------------------------------------------ */

#define PAIR_MAP_EMPTY UINT64_MAX

static uint64_t pair_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static size_t pair_slot(const awl_pair_map *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t mask = m->capacity - 1, i = (size_t)(h ^ (h >> 32)) & mask;
    while (m->keys[i] != PAIR_MAP_EMPTY && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

static int pair_map_alloc(awl_pair_map *m, size_t capacity, const char *op)
{
    m->keys = malloc(capacity * sizeof *m->keys);
    m->values = malloc(capacity * sizeof *m->values);
    if (!m->keys || !m->values) {
        free(m->keys);
        free(m->values);
        m->keys = NULL;
        m->values = NULL;
        return awl_error(AWL_ERR_OOM, "%s: out of memory for a pair table of %zu entries", op,
                         capacity);
    }
    memset(m->keys, 0xff, capacity * sizeof *m->keys); /* every key PAIR_MAP_EMPTY */
    m->capacity = capacity;
    m->count = 0;
    return 0;
}

int awl_pair_map_init(awl_pair_map *m, size_t capacity_hint, const char *op)
{
    size_t capacity = 16;
    while (capacity < 2 * capacity_hint) capacity *= 2;
    return pair_map_alloc(m, capacity, op);
}

void awl_pair_map_free(awl_pair_map *m)
{
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

int32_t awl_pair_map_get(const awl_pair_map *m, int32_t left, int32_t right)
{
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(m, key);
    return m->keys[i] == key ? m->values[i] : -1;
}

/* Doubles the table, keeping it at most half full so probes stay short. */
static int pair_map_grow(awl_pair_map *m, const char *op)
{
    awl_pair_map old = *m;
    if (pair_map_alloc(m, 2 * old.capacity, op) != 0) {
        *m = old;
        return AWL_ERR_OOM;
    }
    for (size_t i = 0; i < old.capacity; i++) {
        if (old.keys[i] == PAIR_MAP_EMPTY) continue;
        size_t j = pair_slot(m, old.keys[i]);
        m->keys[j] = old.keys[i];
        m->values[j] = old.values[i];
    }
    m->count = old.count;
    awl_pair_map_free(&old);
    return 0;
}

int awl_pair_map_put(awl_pair_map *m, int32_t left, int32_t right, int32_t value, const char *op)
{
    if (2 * (m->count + 1) > m->capacity && pair_map_grow(m, op) != 0) return AWL_ERR_OOM;
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(m, key);
    if (m->keys[i] != key) {
        m->keys[i] = key;
        m->count++;
    }
    m->values[i] = value;
    return 0;
}

/* ---- a BPE tokenizer from its merges ----------------------------------------- */

/* The decoded bytes of all tokens together may not exceed this: a malicious
 * serialised tokenizer could otherwise ask for 2^n bytes with n merges. */
#define BPE_MAX_TOTAL_BYTES (1u << 30)

awl_tokenizer *awl_bpe_from_merges(const int32_t *merges, int n_merges, const char *op)
{
    awl_tokenizer *tok = calloc(1, sizeof *tok);
    int vocab = 256 + n_merges;
    if (!tok) goto oom;
    tok->kind = TOKENIZER_BPE;
    tok->vocab_size = vocab;
    tok->n_merges = n_merges;
    tok->merges = malloc(((size_t)n_merges * 2 + 1) * sizeof *tok->merges);
    tok->offsets = malloc(((size_t)vocab + 1) * sizeof *tok->offsets);
    if (!tok->merges || !tok->offsets) goto oom;
    memcpy(tok->merges, merges, (size_t)n_merges * 2 * sizeof *merges);
    if (awl_pair_map_init(&tok->merge_rank, (size_t)n_merges, op) != 0) goto fail;

    /* offsets[t + 1] - offsets[t] is token t's length: 1 for a byte, the sum
     * of its two parts for a merge. */
    uint64_t total = 0;
    tok->offsets[0] = 0;
    for (int t = 0; t < vocab; t++) {
        uint64_t n = 1;
        if (t >= 256) {
            const int32_t *m = merges + 2 * (t - 256);
            n = (uint64_t)(tok->offsets[m[0] + 1] - tok->offsets[m[0]]) +
                (tok->offsets[m[1] + 1] - tok->offsets[m[1]]);
        }
        total += n;
        if (total > BPE_MAX_TOTAL_BYTES) {
            awl_error(AWL_ERR_FORMAT, "%s: the merges spell tokens of more than %u bytes in all",
                      op, BPE_MAX_TOTAL_BYTES);
            goto fail;
        }
        tok->offsets[t + 1] = (uint32_t)total;
    }
    tok->bytes = malloc(total);
    if (!tok->bytes) goto oom;
    for (int t = 0; t < vocab; t++) {
        uint8_t *dst = tok->bytes + tok->offsets[t];
        if (t < 256) {
            *dst = (uint8_t)t;
            continue;
        }
        const int32_t *m = merges + 2 * (t - 256);
        uint32_t n0 = tok->offsets[m[0] + 1] - tok->offsets[m[0]];
        memcpy(dst, tok->bytes + tok->offsets[m[0]], n0);
        memcpy(dst + n0, tok->bytes + tok->offsets[m[1]],
               tok->offsets[m[1] + 1] - tok->offsets[m[1]]);
    }
    for (int r = 0; r < n_merges; r++)
        if (awl_pair_map_put(&tok->merge_rank, merges[2 * r], merges[2 * r + 1], r, op) != 0)
            goto fail;
    return tok;

oom:
    awl_error(AWL_ERR_OOM, "%s: out of memory for a tokenizer of %d tokens", op, vocab);
fail:
    awl_tokenizer_free(tok);
    return NULL;
}

/* ---- encoding ------------------------------------------------------------------ */

/* Occurrences waiting for their merge: one singly linked list per rank, in
 * ascending position order. Entry e is position pos[e], followed by
 * link[e]; -1 ends a list. */
typedef struct rank_queue {
    int32_t *head, *tail; /* per rank */
    int32_t *pos, *link;
    int32_t n; /* entries used */
} rank_queue;

/* Queues the pair starting at position i when it has a merge. */
static void queue_mergeable(const awl_tokenizer *tok, rank_queue *q, const int32_t *ids,
                            const int32_t *next, int32_t i)
{
    int32_t r = awl_pair_map_get(&tok->merge_rank, ids[i], ids[next[i]]);
    if (r < 0) return;
    int32_t e = q->n++;
    q->pos[e] = i;
    q->link[e] = -1;
    if (q->tail[r] < 0)
        q->head[r] = e;
    else
        q->link[q->tail[r]] = e;
    q->tail[r] = e;
}

int awl_bpe_encode(const awl_tokenizer *tok, const uint8_t *text, size_t len, int32_t *out,
                   size_t *n)
{
    *n = 0;
    if (len == 0) return 0;
    /* ids[i] is the token starting at byte i, -1 once merged into its left
     * neighbour. The queue takes len - 1 entries at first and at most two
     * per merge after, so never more than 3 * len. */
    size_t n_ranks = (size_t)tok->n_merges + 1;
    int32_t *ids = malloc(len * sizeof *ids);
    int32_t *prev = malloc(len * sizeof *prev);
    int32_t *next = malloc(len * sizeof *next);
    rank_queue q = {
        .head = malloc(n_ranks * sizeof *q.head),
        .tail = malloc(n_ranks * sizeof *q.tail),
        .pos = malloc(3 * len * sizeof *q.pos),
        .link = malloc(3 * len * sizeof *q.link),
    };
    int rc = 0;
    if (!ids || !prev || !next || !q.head || !q.tail || !q.pos || !q.link) {
        rc = awl_error(AWL_ERR_OOM, "awl_tokenizer_encode: out of memory for %zu bytes", len);
        goto done;
    }
    memset(q.head, 0xff, n_ranks * sizeof *q.head); /* all -1 */
    memset(q.tail, 0xff, n_ranks * sizeof *q.tail);
    int32_t last = (int32_t)len - 1;
    for (int32_t i = 0; i <= last; i++) {
        ids[i] = text[i];
        prev[i] = i - 1;
        next[i] = i < last ? i + 1 : -1;
    }
    for (int32_t i = 0; i < last; i++) queue_mergeable(tok, &q, ids, next, i);

    for (int32_t r = 0; r < tok->n_merges; r++) {
        int32_t a = tok->merges[2 * r], b = tok->merges[2 * r + 1];
        /* New entries go to later ranks, never to this list. */
        for (int32_t e = q.head[r]; e >= 0; e = q.link[e]) {
            int32_t i = q.pos[e], j = next[i];
            if (ids[i] != a || j < 0 || ids[j] != b) /* stale: changed since queued */
                continue;
            int32_t k = next[j];
            ids[i] = 256 + r;
            ids[j] = -1;
            next[i] = k;
            if (k >= 0) prev[k] = i;
            if (prev[i] >= 0) queue_mergeable(tok, &q, ids, next, prev[i]);
            if (k >= 0) queue_mergeable(tok, &q, ids, next, i);
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i]) out[(*n)++] = ids[i];
done:
    free(ids);
    free(prev);
    free(next);
    free(q.head);
    free(q.tail);
    free(q.pos);
    free(q.link);
    return rc;
}

/* ---- training --------------------------------------------------------------------- */

static const char *const TRAIN = "awl_tokenizer_bpe_train";

/* An adjacent pair of tokens: how often it occurs now, and the positions
 * where it started when it was counted (some may be stale since). */
typedef struct bpe_pair {
    int32_t left, right;
    int32_t count;
    int32_t n_where, cap_where;
    int32_t *where;
} bpe_pair;

typedef struct bpe_trainer {
    int32_t *ids, *prev, *next; /* the text as a linked list, as in encoding */
    bpe_pair *pairs;
    int32_t n_pairs, cap_pairs;
    awl_pair_map index; /* (left, right) -> index into pairs */
    /* Max-heap of pairs, each with the count it had when pushed. */
    struct heap_entry {
        int32_t pair, count;
    } * heap;
    int32_t heap_n, heap_cap;
} bpe_trainer;

/* Heap order: higher count first, then smaller (left, right). */
static int heap_before(const bpe_trainer *t, int32_t x, int32_t y)
{
    if (t->heap[x].count != t->heap[y].count) return t->heap[x].count > t->heap[y].count;
    const bpe_pair *a = &t->pairs[t->heap[x].pair], *b = &t->pairs[t->heap[y].pair];
    return a->left != b->left ? a->left < b->left : a->right < b->right;
}

static void heap_swap(bpe_trainer *t, int32_t x, int32_t y)
{
    struct heap_entry e = t->heap[x];
    t->heap[x] = t->heap[y];
    t->heap[y] = e;
}

/* array (cap elements of `size` bytes) reallocated to twice the room, or
 * NULL with a message (array unchanged). Updates cap on success. */
static void *grow(void *array, int32_t *cap, size_t size)
{
    int32_t n = *cap ? 2 * *cap : 16;
    void *bigger = n > 0 ? realloc(array, (size_t)n * size) : NULL;
    if (!bigger) {
        awl_error(AWL_ERR_OOM, "%s: out of memory", TRAIN);
        return NULL;
    }
    *cap = n;
    return bigger;
}

static int heap_push(bpe_trainer *t, int32_t pair)
{
    if (t->heap_n == t->heap_cap) {
        struct heap_entry *h = grow(t->heap, &t->heap_cap, sizeof *h);
        if (!h) return AWL_ERR_OOM;
        t->heap = h;
    }
    int32_t i = t->heap_n++;
    t->heap[i] = (struct heap_entry){pair, t->pairs[pair].count};
    while (i > 0 && heap_before(t, i, (i - 1) / 2)) {
        heap_swap(t, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}

static void heap_pop(bpe_trainer *t)
{
    heap_swap(t, 0, --t->heap_n);
    for (int32_t i = 0;;) {
        int32_t c = 2 * i + 1;
        if (c >= t->heap_n) return;
        if (c + 1 < t->heap_n && heap_before(t, c + 1, c)) c++;
        if (!heap_before(t, c, i)) return;
        heap_swap(t, i, c);
        i = c;
    }
}

/* One more occurrence of (left, right), starting at position pos. */
static int pair_add(bpe_trainer *t, int32_t left, int32_t right, int32_t pos)
{
    int32_t k = awl_pair_map_get(&t->index, left, right);
    if (k < 0) {
        if (t->n_pairs == t->cap_pairs) {
            bpe_pair *pairs = grow(t->pairs, &t->cap_pairs, sizeof *pairs);
            if (!pairs) return AWL_ERR_OOM;
            t->pairs = pairs;
        }
        k = t->n_pairs;
        if (awl_pair_map_put(&t->index, left, right, k, TRAIN) != 0) return AWL_ERR_OOM;
        t->pairs[k] = (bpe_pair){.left = left, .right = right};
        t->n_pairs++;
    }
    bpe_pair *p = &t->pairs[k];
    if (p->n_where == p->cap_where) {
        int32_t *where = grow(p->where, &p->cap_where, sizeof *where);
        if (!where) return AWL_ERR_OOM;
        p->where = where;
    }
    p->where[p->n_where++] = pos;
    p->count++;
    return 0;
}

static void pair_drop(bpe_trainer *t, int32_t left, int32_t right)
{
    t->pairs[awl_pair_map_get(&t->index, left, right)].count--;
}

/* Pairs from `first` on are new; those occurring at least twice go on the
 * heap, the others can never grow, so their positions are dropped. */
static int push_new_pairs(bpe_trainer *t, int32_t first)
{
    for (int32_t k = first; k < t->n_pairs; k++) {
        if (t->pairs[k].count >= 2) {
            if (heap_push(t, k) != 0) return AWL_ERR_OOM;
        } else {
            free(t->pairs[k].where);
            t->pairs[k].where = NULL;
            t->pairs[k].n_where = t->pairs[k].cap_where = 0;
        }
    }
    return 0;
}

/* Replaces every occurrence of pair k, left to right, by token x. */
static int merge_pair(bpe_trainer *t, int32_t k, int32_t x)
{
    int32_t a = t->pairs[k].left, b = t->pairs[k].right, first_new = t->n_pairs;
    /* Pair k's list does not grow during its own merge (new pairs contain
     * x), so it is safe to walk while t->pairs moves. */
    int32_t *where = t->pairs[k].where, n_where = t->pairs[k].n_where;
    for (int32_t w = 0; w < n_where; w++) {
        int32_t i = where[w], j = t->next[i];
        if (t->ids[i] != a || j < 0 || t->ids[j] != b) continue;
        int32_t p = t->prev[i], q = t->next[j];
        if (p >= 0) {
            pair_drop(t, t->ids[p], a);
            if (pair_add(t, t->ids[p], x, p) != 0) return AWL_ERR_OOM;
        }
        if (q >= 0) {
            pair_drop(t, b, t->ids[q]);
            if (pair_add(t, x, t->ids[q], i) != 0) return AWL_ERR_OOM;
        }
        t->pairs[k].count--;
        t->ids[i] = x;
        t->ids[j] = -1;
        t->next[i] = q;
        if (q >= 0) t->prev[q] = i;
    }
    free(t->pairs[k].where);
    t->pairs[k].where = NULL;
    t->pairs[k].n_where = t->pairs[k].cap_where = 0;
    return push_new_pairs(t, first_new);
}

static void trainer_free(bpe_trainer *t)
{
    free(t->ids);
    free(t->prev);
    free(t->next);
    for (int32_t k = 0; k < t->n_pairs; k++) free(t->pairs[k].where);
    free(t->pairs);
    awl_pair_map_free(&t->index);
    free(t->heap);
}

/* Runs up to max_merges merges, appending them to merges; sets *n_merges. */
static int train(bpe_trainer *t, const uint8_t *text, int32_t len, int32_t *merges, int max_merges,
                 int *n_merges)
{
    *n_merges = 0;
    t->ids = malloc((size_t)len * sizeof *t->ids);
    t->prev = malloc((size_t)len * sizeof *t->prev);
    t->next = malloc((size_t)len * sizeof *t->next);
    if (!t->ids || !t->prev || !t->next)
        return awl_error(AWL_ERR_OOM, "%s: out of memory for %d bytes", TRAIN, len);
    /* sized for the text (at most 64k distinct pairs to start with): a
     * short text does not pay for clearing a large table */
    size_t pairs_hint = len < (1 << 16) ? (size_t)len : (size_t)1 << 16;
    if (awl_pair_map_init(&t->index, pairs_hint, TRAIN) != 0) return AWL_ERR_OOM;
    for (int32_t i = 0; i < len; i++) {
        t->ids[i] = text[i];
        t->prev[i] = i - 1;
        t->next[i] = i + 1 < len ? i + 1 : -1;
    }
    for (int32_t i = 0; i + 1 < len; i++)
        if (pair_add(t, t->ids[i], t->ids[i + 1], i) != 0) return AWL_ERR_OOM;
    if (push_new_pairs(t, 0) != 0) return AWL_ERR_OOM;

    while (*n_merges < max_merges && t->heap_n > 0) {
        int32_t k = t->heap[0].pair, counted = t->heap[0].count;
        heap_pop(t);
        if (t->pairs[k].count != counted) { /* stale: fell since it was pushed */
            if (t->pairs[k].count >= 2 && heap_push(t, k) != 0) return AWL_ERR_OOM;
            continue;
        }
        merges[2 * *n_merges] = t->pairs[k].left;
        merges[2 * *n_merges + 1] = t->pairs[k].right;
        if (merge_pair(t, k, 256 + *n_merges) != 0) return AWL_ERR_OOM;
        (*n_merges)++;
    }
    return 0;
}

awl_tokenizer *awl_tokenizer_bpe_train(const char *text, size_t len, int vocab_size)
{
    if (!text && len > 0) {
        awl_error(AWL_ERR_INVALID, "%s: text is NULL", TRAIN);
        return NULL;
    }
    if (vocab_size < 256) {
        awl_error(AWL_ERR_INVALID, "%s: vocab_size %d is below 256 (the byte tokens)", TRAIN,
                  vocab_size);
        return NULL;
    }
    if (len >= INT32_MAX) {
        awl_error(AWL_ERR_INVALID, "%s: text of %zu bytes is too long (at most 2 GiB)", TRAIN, len);
        return NULL;
    }
    /* Each merge shortens the text by at least one token. */
    int max_merges = vocab_size - 256;
    if ((size_t)max_merges > len) max_merges = (int)len;
    int32_t *merges = malloc(((size_t)max_merges * 2 + 1) * sizeof *merges);
    if (!merges) {
        awl_error(AWL_ERR_OOM, "%s: out of memory for %d merges", TRAIN, max_merges);
        return NULL;
    }
    bpe_trainer t = {0};
    int n_merges = 0;
    awl_tokenizer *tok = NULL;
    if (len == 0 ||
        train(&t, (const uint8_t *)text, (int32_t)len, merges, max_merges, &n_merges) == 0)
        tok = awl_bpe_from_merges(merges, n_merges, TRAIN);
    trainer_free(&t);
    free(merges);
    return tok;
}
