/*
 * tests/test_data.c - tokenizers and text datasets (data/).
 *
 * BPE is checked against a naive reference written here in the plainest
 * way (recount every pair before each merge, apply merges one rank at a
 * time), on random corpora: the incremental trainer and the heap encoder in
 * data/bpe.c must agree with it merge for merge and id for id. Datasets are
 * built from files the tests write into a fresh temporary directory.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/philox.h"
#include "data/data.h"

/* ---- helpers ---------------------------------------------------------------------- */

/* Deterministic pseudo-random bytes for test corpora. */
static uint8_t test_byte(uint64_t seed, uint64_t i)
{
    return (uint8_t)awl_philox4x32(seed, i / 4).w[i % 4];
}

/* A corpus over the first `alphabet` letters of "abcdefgh..." (or all 256
 * bytes when alphabet is 256), len bytes. */
static char *random_corpus(uint64_t seed, size_t len, int alphabet)
{
    char *s = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        uint8_t b = test_byte(seed, i);
        s[i] = alphabet == 256 ? (char)b : (char)('a' + b % alphabet);
    }
    s[len] = '\0';
    return s;
}

static void roundtrip(const awl_tokenizer *tok, const char *text, size_t len)
{
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(awl_tokenizer_encode(tok, text, len, &ids, &n), 0);
    for (size_t i = 0; i < n; i++) ck_assert(ids[i] >= 0 && ids[i] < awl_tokenizer_vocab_size(tok));
    char *back;
    size_t back_len;
    ck_assert_int_eq(awl_tokenizer_decode(tok, ids, n, &back, &back_len), 0);
    ck_assert_uint_eq(back_len, len);
    ck_assert(memcmp(back, text, len) == 0);
    ck_assert_int_eq(back[back_len], '\0');
    free(ids);
    free(back);
}

static char *serialize(const awl_tokenizer *tok)
{
    char *s;
    size_t len;
    ck_assert_int_eq(awl_tokenizer_serialize(tok, &s, &len), 0);
    ck_assert_uint_eq(len, strlen(s));
    return s;
}

/* ---- the naive BPE reference ----------------------------------------------------- */

/* Applies merge (a, b) -> x to ids[0..n) left to right; returns the new n. */
static size_t naive_apply(int32_t *ids, size_t n, int32_t a, int32_t b, int32_t x)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
            ids[out++] = x;
            i++;
        } else {
            ids[out++] = ids[i];
        }
    }
    return out;
}

/* Trains up to max_merges merges the slow way into merges[]; returns how many. */
static int naive_train(const uint8_t *text, size_t len, int max_merges, int32_t *merges)
{
    int32_t *ids = malloc(len * sizeof *ids);
    for (size_t i = 0; i < len; i++) ids[i] = text[i];
    size_t n = len;
    int vocab = 256 + max_merges, done = 0;
    int *count = malloc((size_t)vocab * vocab * sizeof *count);
    while (done < max_merges) {
        memset(count, 0, (size_t)vocab * vocab * sizeof *count);
        for (size_t i = 0; i + 1 < n; i++) count[ids[i] * vocab + ids[i + 1]]++;
        int best = 0; /* scanning (left, right) in order keeps the smallest on ties */
        for (int p = 1; p < vocab * vocab; p++)
            if (count[p] > count[best]) best = p;
        if (count[best] < 2) break;
        merges[2 * done] = best / vocab;
        merges[2 * done + 1] = best % vocab;
        n = naive_apply(ids, n, best / vocab, best % vocab, 256 + done);
        done++;
    }
    free(count);
    free(ids);
    return done;
}

static char *merges_string(const int32_t *merges, int n)
{
    char *s = malloc(8 + 20 * (size_t)n), *p = s;
    p += sprintf(p, "bpe:");
    for (int r = 0; r < n; r++)
        p += sprintf(p, "%s%x.%x", r ? "," : "", (unsigned)merges[2 * r],
                     (unsigned)merges[2 * r + 1]);
    return s;
}

/* Checks the trainer and encoder against the reference on one corpus. */
static void check_against_naive(const char *text, size_t len, int max_merges)
{
    int32_t *merges = malloc(2 * (size_t)max_merges * sizeof *merges);
    int n_merges = naive_train((const uint8_t *)text, len, max_merges, merges);
    awl_tokenizer *tok = awl_tokenizer_bpe_train(text, len, 256 + max_merges);
    ck_assert_ptr_nonnull(tok);
    char *want = merges_string(merges, n_merges), *got = serialize(tok);
    ck_assert_str_eq(got, want);
    ck_assert_int_eq(awl_tokenizer_vocab_size(tok), 256 + n_merges);

    int32_t *ref = malloc(len * sizeof *ref);
    for (size_t i = 0; i < len; i++) ref[i] = (uint8_t)text[i];
    size_t ref_n = len;
    for (int r = 0; r < n_merges; r++)
        ref_n = naive_apply(ref, ref_n, merges[2 * r], merges[2 * r + 1], 256 + r);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(awl_tokenizer_encode(tok, text, len, &ids, &n), 0);
    ck_assert_uint_eq(n, ref_n);
    ck_assert(memcmp(ids, ref, n * sizeof *ids) == 0);
    roundtrip(tok, text, len);

    free(ids);
    free(ref);
    free(want);
    free(got);
    free(merges);
    awl_tokenizer_free(tok);
}

/* ---- character tokenizer --------------------------------------------------------- */

START_TEST(test_char_vocabulary)
{
    const char *text = "hello world\n";
    awl_tokenizer *tok = awl_tokenizer_char_from_text(text, strlen(text));
    ck_assert_ptr_nonnull(tok);
    ck_assert_str_eq(awl_tokenizer_kind(tok), "char");
    ck_assert_int_eq(awl_tokenizer_vocab_size(tok), 9); /* "\n dehlorw" */
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(awl_tokenizer_encode(tok, "lower", 5, &ids, &n), 0);
    ck_assert_uint_eq(n, 5);
    /* Sorted: '\n'=0 ' '=1 d=2 e=3 h=4 l=5 o=6 r=7 w=8 */
    int32_t want[] = {5, 6, 8, 3, 7};
    ck_assert(memcmp(ids, want, sizeof want) == 0);
    free(ids);
    roundtrip(tok, text, strlen(text));
    char *s = serialize(tok);
    ck_assert_str_eq(s, "char:0a206465686c6f7277");
    free(s);
    awl_tokenizer_free(tok);
}
END_TEST

START_TEST(test_char_errors)
{
    awl_tokenizer *tok = awl_tokenizer_char_from_text("abc", 3);
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    awl_clear_error();
    ck_assert_int_eq(awl_tokenizer_encode(tok, "abz", 3, &ids, &n), AWL_ERR_INVALID);
    ck_assert_ptr_null(ids);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "0x7a 'z' at offset 2"));

    char *text = (char *)1;
    size_t len = 3;
    ck_assert_int_eq(awl_tokenizer_decode(tok, (int32_t[]){0, 3}, 2, &text, &len), AWL_ERR_INVALID);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "id 3 at index 1"));

    ck_assert_ptr_null(awl_tokenizer_char_from_text("", 0));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);

    /* A NULL tokenizer fails without a new message. */
    awl_clear_error();
    ck_assert_int_eq(awl_tokenizer_encode(NULL, "a", 1, &ids, &n), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_tokenizer_vocab_size(NULL), -1);
    ck_assert_str_eq(awl_last_error(), "");
    awl_tokenizer_free(tok);
}
END_TEST

/* ---- BPE --------------------------------------------------------------------------- */

START_TEST(test_bpe_first_merges)
{
    /* Wikipedia's example. Counts: aa 4 (overlapping), ab 2 -> merge a+a.
     * Then "aa a b d aa a b a c": ab 2 and (aa)a 2 tie -> the smaller pair,
     * a+b. Then (aa)(ab) 2 -> merge. Then every pair occurs once: stop. */
    const char *text = "aaabdaaabac";
    awl_tokenizer *tok = awl_tokenizer_bpe_train(text, strlen(text), 1000);
    ck_assert_ptr_nonnull(tok);
    ck_assert_str_eq(awl_tokenizer_kind(tok), "bpe");
    ck_assert_int_eq(awl_tokenizer_vocab_size(tok), 259);
    char *s = serialize(tok);
    ck_assert_str_eq(s, "bpe:61.61,61.62,100.101");
    free(s);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(awl_tokenizer_encode(tok, text, strlen(text), &ids, &n), 0);
    int32_t want[] = {258, 'd', 258, 'a', 'c'};
    ck_assert_uint_eq(n, 5);
    ck_assert(memcmp(ids, want, sizeof want) == 0);
    free(ids);
    awl_tokenizer_free(tok);

    /* vocab_size caps the merges. */
    tok = awl_tokenizer_bpe_train(text, strlen(text), 257);
    ck_assert_int_eq(awl_tokenizer_vocab_size(tok), 257);
    s = serialize(tok);
    ck_assert_str_eq(s, "bpe:61.61");
    free(s);
    awl_tokenizer_free(tok);

    ck_assert_ptr_null(awl_tokenizer_bpe_train(text, strlen(text), 255));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);
}
END_TEST

START_TEST(test_bpe_runs_of_one_byte)
{
    /* Overlapping pairs: "aaaaa" has a+a four times but merges into
     * "aa","aa","a"; then aa+aa. Every length must decode back. */
    char text[40];
    memset(text, 'a', sizeof text);
    for (size_t len = 1; len <= sizeof text; len++) check_against_naive(text, len, 8);
}
END_TEST

START_TEST(test_bpe_matches_reference)
{
    for (uint64_t seed = 1; seed <= 6; seed++) {
        for (int alphabet = 2; alphabet <= 5; alphabet++) {
            char *text = random_corpus(seed * 10 + (uint64_t)alphabet, 1500, alphabet);
            check_against_naive(text, 1500, 60);
            free(text);
        }
    }
    char *bytes = random_corpus(99, 4000, 256);
    check_against_naive(bytes, 4000, 30);
    free(bytes);
}
END_TEST

START_TEST(test_bpe_arbitrary_bytes)
{
    /* Train on English-like text with a few bytes that are not UTF-8, then
     * encode every byte value and random binary data. */
    const char *words[] = {"the ", "and ", "to ", "\xff\xfe", "of ", "\x00\x01", "thee ", "\xc3("};
    size_t len = 0, cap = 20000;
    char *text = malloc(cap);
    for (uint64_t i = 0; len + 8 < cap; i++) {
        const char *w = words[test_byte(7, i) % 8];
        size_t wl = w[0] ? strlen(w) : 2;
        memcpy(text + len, w, wl);
        len += wl;
    }
    awl_tokenizer *tok = awl_tokenizer_bpe_train(text, len, 300);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_gt(awl_tokenizer_vocab_size(tok), 256);
    ck_assert_int_le(awl_tokenizer_vocab_size(tok), 300);
    roundtrip(tok, text, len);

    char all[512];
    for (int i = 0; i < 512; i++) all[i] = (char)(i % 256);
    roundtrip(tok, all, sizeof all);
    char *random = random_corpus(3, 10000, 256);
    roundtrip(tok, random, 10000);
    roundtrip(tok, "", 0);
    roundtrip(tok, "\0", 1);
    free(random);
    free(text);
    awl_tokenizer_free(tok);
}
END_TEST

/* ---- serialisation ---------------------------------------------------------------- */

static void check_reserialize(const awl_tokenizer *tok, const char *probe, size_t probe_len)
{
    char *s = serialize(tok);
    /* A copy without the terminating NUL: the reader goes by length. */
    size_t len = strlen(s);
    char *exact = malloc(len ? len : 1);
    memcpy(exact, s, len);
    awl_tokenizer *back = awl_tokenizer_deserialize(exact, len);
    ck_assert_ptr_nonnull(back);
    ck_assert_str_eq(awl_tokenizer_kind(back), awl_tokenizer_kind(tok));
    ck_assert_int_eq(awl_tokenizer_vocab_size(back), awl_tokenizer_vocab_size(tok));
    char *s2 = serialize(back);
    ck_assert_str_eq(s2, s);
    int32_t *a, *b;
    size_t na, nb;
    ck_assert_int_eq(awl_tokenizer_encode(tok, probe, probe_len, &a, &na), 0);
    ck_assert_int_eq(awl_tokenizer_encode(back, probe, probe_len, &b, &nb), 0);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na * sizeof *a) == 0);
    free(a);
    free(b);
    free(s);
    free(s2);
    free(exact);
    awl_tokenizer_free(back);
}

START_TEST(test_serialize_roundtrip)
{
    char *text = random_corpus(5, 3000, 4);
    awl_tokenizer *c = awl_tokenizer_char_from_text(text, 3000);
    check_reserialize(c, text, 3000);
    awl_tokenizer_free(c);
    awl_tokenizer *b = awl_tokenizer_bpe_train(text, 3000, 400);
    check_reserialize(b, text, 3000);
    awl_tokenizer_free(b);
    awl_tokenizer *bytes = awl_tokenizer_deserialize("bpe:", 4);
    ck_assert_int_eq(awl_tokenizer_vocab_size(bytes), 256);
    check_reserialize(bytes, text, 3000);
    awl_tokenizer_free(bytes);
    free(text);
}
END_TEST

START_TEST(test_deserialize_rejects)
{
    const char *bad[] = {
        "",                 /* no kind */
        "word:61",          /* unknown kind */
        "char:",            /* empty vocabulary */
        "char:6",           /* odd digit count */
        "char:6g",          /* not hex */
        "char:6A",          /* upper case */
        "char:6161",        /* repeated byte */
        "char:6261",        /* not ascending */
        "bpe:61",           /* no '.' */
        "bpe:61.",          /* no right id */
        "bpe:.61",          /* no left id */
        "bpe:61.61,",       /* trailing ',' */
        "bpe:61.61;62.62",  /* wrong separator */
        "bpe:061.61",       /* leading zero */
        "bpe:100.61",       /* token 256 used before it exists */
        "bpe:61.61,61.61",  /* repeated merge */
        "bpe:61.61,101.61", /* token 257 used by merge 1 */
        "bpe:-1.61",        /* sign */
        "bpe:123456789.0",  /* too many digits */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        awl_clear_error();
        awl_tokenizer *tok = awl_tokenizer_deserialize(bad[i], strlen(bad[i]));
        ck_assert_msg(tok == NULL, "accepted \"%s\"", bad[i]);
        ck_assert_int_eq(awl_last_error_code(), AWL_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_tokenizer_deserialize"));
    }
    /* A NUL inside the string is not a hex digit. */
    ck_assert_ptr_null(awl_tokenizer_deserialize("char:61\0\062", 9));
    /* Length counts: "char:6162" cut to 7 bytes is odd. */
    ck_assert_ptr_null(awl_tokenizer_deserialize("char:6162", 8));
    ck_assert_ptr_null(awl_tokenizer_deserialize(NULL, 0));

    /* 40 merges each doubling the last token would spell 2^41 bytes. */
    char bomb[600] = "bpe:61.61";
    for (int r = 1; r < 40; r++) sprintf(bomb + strlen(bomb), ",%x.%x", 255 + r, 255 + r);
    awl_clear_error();
    ck_assert_ptr_null(awl_tokenizer_deserialize(bomb, strlen(bomb)));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_FORMAT);

    /* Valid strings a hand could write. */
    awl_tokenizer *ok = awl_tokenizer_deserialize("bpe:61.61,100.61,0.ff", 21);
    ck_assert_ptr_nonnull(ok);
    ck_assert_int_eq(awl_tokenizer_vocab_size(ok), 259);
    roundtrip(ok, "aaaaaaa\xff", 8);
    awl_tokenizer_free(ok);
}
END_TEST

/* ---- datasets ------------------------------------------------------------------------ */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/awl_test_data_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static char *tmp_path(const char *name)
{
    static char path[2][128];
    static int which;
    which ^= 1;
    snprintf(path[which], sizeof path[which], "%s/%s", tmpdir, name);
    return path[which];
}

static void write_plain(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_gzip(const char *path, const char *data, size_t len)
{
    gzFile gz = gzopen(path, "wb9");
    ck_assert_ptr_nonnull(gz);
    ck_assert_int_eq(gzwrite(gz, data, (unsigned)len), (int)len);
    ck_assert_int_eq(gzclose(gz), Z_OK);
}

/* Some English-like text: words from a small list, with newlines. */
static char *sample_text(size_t len)
{
    const char *words[] = {"to ", "be ", "or ", "not ", "that ", "is ", "the ", "question\n"};
    char *s = malloc(len + 16);
    size_t n = 0;
    for (uint64_t i = 0; n < len; i++) {
        const char *w = words[test_byte(11, i) % 8];
        memcpy(s + n, w, strlen(w));
        n += strlen(w);
    }
    s[len] = '\0';
    return s;
}

START_TEST(test_dataset_plain_and_gzip)
{
    make_tmpdir();
    char *text = sample_text(5000);
    write_plain(tmp_path("input.txt"), text, 5000);
    write_gzip(tmp_path("input.txt.gz"), text, 5000);
    awl_text_dataset *plain = awl_text_dataset_open(tmp_path("input.txt"), NULL, 16, 0.9);
    awl_text_dataset *gz = awl_text_dataset_open(tmp_path("input.txt.gz"), NULL, 16, 0.9);
    ck_assert_ptr_nonnull(plain);
    ck_assert_ptr_nonnull(gz);
    for (int split = 0; split < 2; split++) {
        size_t n1, n2;
        const int32_t *t1 = awl_text_dataset_tokens(plain, (awl_data_split)split, &n1);
        const int32_t *t2 = awl_text_dataset_tokens(gz, (awl_data_split)split, &n2);
        ck_assert_uint_eq(n1, n2);
        ck_assert(memcmp(t1, t2, n1 * sizeof *t1) == 0);
    }
    /* The char vocabulary of the text: "\n abeihnoqrstu" */
    ck_assert_int_eq(awl_tokenizer_vocab_size(awl_text_dataset_tokenizer(plain)), 14);

    /* A gzip file cut short is an error, not a shorter corpus. */
    FILE *f = fopen(tmp_path("input.txt.gz"), "rb");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_plain(tmp_path("cut.gz"), buf, n - 10);
    awl_clear_error();
    ck_assert_ptr_null(awl_text_dataset_open(tmp_path("cut.gz"), NULL, 16, 0.9));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cut.gz"));

    awl_text_dataset_free(plain);
    awl_text_dataset_free(gz);
    free(text);
    remove_tmpdir();
}
END_TEST

START_TEST(test_dataset_split)
{
    char *text = sample_text(1000);
    awl_text_dataset *ds = awl_text_dataset_from_text(text, 1000, NULL, 8, 0.9);
    ck_assert_ptr_nonnull(ds);
    ck_assert_int_eq(awl_text_dataset_num_tokens(ds, AWL_SPLIT_TRAIN), 900);
    ck_assert_int_eq(awl_text_dataset_num_tokens(ds, AWL_SPLIT_VAL), 100);
    ck_assert_int_eq(awl_text_dataset_block(ds), 8);
    /* The tokens are the text's encoding, train first. */
    int32_t *ids;
    size_t n, n_train, n_val;
    ck_assert_int_eq(awl_tokenizer_encode(awl_text_dataset_tokenizer(ds), text, 1000, &ids, &n), 0);
    const int32_t *train = awl_text_dataset_tokens(ds, AWL_SPLIT_TRAIN, &n_train);
    const int32_t *val = awl_text_dataset_tokens(ds, AWL_SPLIT_VAL, &n_val);
    ck_assert(memcmp(train, ids, 900 * sizeof *ids) == 0);
    ck_assert(memcmp(val, ids + 900, 100 * sizeof *ids) == 0);
    free(ids);
    awl_text_dataset_free(ds);

    /* A borrowed BPE tokenizer: the dataset uses it and does not free it. */
    awl_tokenizer *bpe = awl_tokenizer_bpe_train(text, 1000, 300);
    ds = awl_text_dataset_from_text(text, 1000, bpe, 8, 1.0);
    ck_assert_ptr_nonnull(ds);
    ck_assert_ptr_eq(awl_text_dataset_tokenizer(ds), bpe);
    ck_assert_int_lt(awl_text_dataset_num_tokens(ds, AWL_SPLIT_TRAIN), 1000);
    ck_assert_int_eq(awl_text_dataset_num_tokens(ds, AWL_SPLIT_VAL), 0);
    awl_text_dataset_free(ds);
    ck_assert_int_gt(awl_tokenizer_vocab_size(bpe), 256);
    awl_tokenizer_free(bpe);
    free(text);
}
END_TEST

/* Draws one batch and copies x and y to the host ((batch, block) each). */
static void draw(awl_text_dataset *ds, awl_data_split split, int batch, int32_t *x, int32_t *y)
{
    int block = awl_text_dataset_block(ds);
    awl_scope_begin();
    awl_tensor *tx, *ty;
    ck_assert_int_eq(awl_text_dataset_batch(ds, split, batch, "cpu", &tx, &ty), 0);
    ck_assert_int_eq(tx->ndim, 2);
    ck_assert_int_eq(tx->shape[0], batch);
    ck_assert_int_eq(tx->shape[1], block);
    ck_assert_int_eq(tx->dtype, AWL_I32);
    ck_assert(awl_same_shape(tx, ty));
    size_t bytes = (size_t)batch * block * sizeof *x;
    ck_assert_int_eq(awl_to_host(tx, x, bytes), 0);
    ck_assert_int_eq(awl_to_host(ty, y, bytes), 0);
    awl_scope_end();
}

START_TEST(test_dataset_batches_are_windows)
{
    enum { B = 6, T = 10 };
    char *text = random_corpus(21, 2000, 26);
    awl_text_dataset *ds = awl_text_dataset_from_text(text, 2000, NULL, T, 0.9);
    awl_text_dataset_seed(ds, 1234);
    int32_t x[B * T], y[B * T];
    for (int split = 0; split < 2; split++) {
        size_t n;
        const int32_t *tok = awl_text_dataset_tokens(ds, (awl_data_split)split, &n);
        for (int k = 0; k < 5; k++) {
            draw(ds, (awl_data_split)split, B, x, y);
            for (int b = 0; b < B; b++) {
                /* With 26 random letters a 10-token window is unique. */
                size_t s = 0;
                while (s + T < n && memcmp(tok + s, x + b * T, T * sizeof *x) != 0) s++;
                ck_assert_msg(s + T < n, "row %d is not a window of the split", b);
                ck_assert(memcmp(tok + s + 1, y + b * T, T * sizeof *y) == 0);
            }
        }
        ck_assert_uint_eq(awl_text_dataset_get_position(ds, (awl_data_split)split), 5);
    }
    awl_text_dataset_free(ds);
    free(text);
}
END_TEST

START_TEST(test_dataset_reproducible)
{
    enum { B = 4, T = 8 };
    char *text = sample_text(3000);
    awl_text_dataset *a = awl_text_dataset_from_text(text, 3000, NULL, T, 0.9);
    awl_text_dataset *b = awl_text_dataset_from_text(text, 3000, NULL, T, 0.9);
    awl_text_dataset_seed(a, 42);
    awl_text_dataset_seed(b, 42);
    int32_t xa[B * T], ya[B * T], xb[B * T], yb[B * T];
    for (int k = 0; k < 3; k++) {
        draw(a, AWL_SPLIT_TRAIN, B, xa, ya);
        /* Validation draws must not move the training stream. */
        draw(b, AWL_SPLIT_VAL, B, xb, yb);
        draw(b, AWL_SPLIT_TRAIN, B, xb, yb);
        ck_assert(memcmp(xa, xb, sizeof xa) == 0);
        ck_assert(memcmp(ya, yb, sizeof ya) == 0);
    }
    /* Another seed, other windows. */
    awl_text_dataset_seed(b, 43);
    ck_assert_uint_eq(awl_text_dataset_get_seed(b), 43);
    ck_assert_uint_eq(awl_text_dataset_get_position(b, AWL_SPLIT_TRAIN), 0);
    awl_text_dataset_seed(a, 42);
    draw(a, AWL_SPLIT_TRAIN, B, xa, ya);
    draw(b, AWL_SPLIT_TRAIN, B, xb, yb);
    ck_assert(memcmp(xa, xb, sizeof xa) != 0);
    awl_text_dataset_free(a);
    awl_text_dataset_free(b);
    free(text);
}
END_TEST

START_TEST(test_dataset_resume_position)
{
    enum { B = 4, T = 8 };
    char *text = sample_text(3000);
    awl_text_dataset *ds = awl_text_dataset_from_text(text, 3000, NULL, T, 0.9);
    awl_text_dataset_seed(ds, 7);
    int32_t x[B * T], y[B * T], x3[B * T], y3[B * T];
    draw(ds, AWL_SPLIT_TRAIN, B, x, y);
    draw(ds, AWL_SPLIT_TRAIN, B, x, y);
    uint64_t seed = awl_text_dataset_get_seed(ds);
    uint64_t pos = awl_text_dataset_get_position(ds, AWL_SPLIT_TRAIN);
    ck_assert_uint_eq(pos, 2);
    draw(ds, AWL_SPLIT_TRAIN, B, x3, y3);

    /* Rewinding in place replays the batch... */
    ck_assert_int_eq(awl_text_dataset_set_position(ds, AWL_SPLIT_TRAIN, pos), 0);
    draw(ds, AWL_SPLIT_TRAIN, B, x, y);
    ck_assert(memcmp(x, x3, sizeof x) == 0 && memcmp(y, y3, sizeof y) == 0);

    /* ...and so does a fresh dataset restored from (seed, position). */
    awl_text_dataset *resumed = awl_text_dataset_from_text(text, 3000, NULL, T, 0.9);
    awl_text_dataset_seed(resumed, seed);
    ck_assert_int_eq(awl_text_dataset_set_position(resumed, AWL_SPLIT_TRAIN, pos), 0);
    draw(resumed, AWL_SPLIT_TRAIN, B, x, y);
    ck_assert(memcmp(x, x3, sizeof x) == 0 && memcmp(y, y3, sizeof y) == 0);
    awl_text_dataset_free(resumed);
    awl_text_dataset_free(ds);
    free(text);
}
END_TEST

/* Evaluation's batches: batch_at is the k-th batch of a seed's stream and
 * moves no position. */
START_TEST(test_dataset_batch_at_is_pure)
{
    static const char text[] = "abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz 0123456789";
    awl_text_dataset *ds = awl_text_dataset_from_text(text, sizeof text - 1, NULL, 4, 0.5);
    ck_assert_ptr_nonnull(ds);
    awl_text_dataset_seed(ds, 5);
    awl_scope_begin();
    int32_t want[2][12], got[12];
    for (int k = 0; k < 2; k++) {
        awl_tensor *x, *y;
        ck_assert_int_eq(awl_text_dataset_batch(ds, AWL_SPLIT_TRAIN, 3, "cpu", &x, &y), 0);
        ck_assert_int_eq(awl_to_host(x, want[k], sizeof want[k]), 0);
    }
    ck_assert_uint_eq(awl_text_dataset_get_position(ds, AWL_SPLIT_TRAIN), 2);
    for (int k = 1; k >= 0; k--) {
        awl_tensor *x, *y;
        ck_assert_int_eq(
            awl_text_dataset_batch_at(ds, AWL_SPLIT_TRAIN, 5, (uint64_t)k, 3, "cpu", &x, &y), 0);
        ck_assert_int_eq(awl_to_host(x, got, sizeof got), 0);
        ck_assert_mem_eq(got, want[k], sizeof got);
    }
    ck_assert_uint_eq(awl_text_dataset_get_position(ds, AWL_SPLIT_TRAIN), 2);
    ck_assert_uint_eq(awl_text_dataset_get_position(ds, AWL_SPLIT_VAL), 0);
    awl_scope_end();
    awl_text_dataset_free(ds);
}
END_TEST

/* The corpus reader: text in, anything else out with the offset. */
START_TEST(test_corpus_bytes)
{
    char *text;
    size_t len;
    ck_assert_int_eq(awl_corpus_from_bytes("caf\xc3\xa9\n", 6, "a", &text, &len), 0);
    ck_assert_uint_eq(len, 6);
    ck_assert_str_eq(text, "caf\xc3\xa9\n");
    free(text);
    ck_assert_int_eq(awl_corpus_from_bytes("ab\0cd", 5, "nul", &text, &len), AWL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "nul holds a NUL byte at offset 2"));
    ck_assert_ptr_null(text);
    ck_assert_int_eq(awl_corpus_from_bytes("ab\xe9x", 4, "latin1", &text, &len), AWL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "byte 0xe9 at offset 2 is not valid UTF-8"));
    ck_assert_int_eq(awl_corpus_from_bytes("", 0, "empty", &text, &len), AWL_ERR_INVALID);

    /* two gzip members are one text; a cut one or trailing junk is refused */
    unsigned char gz[256];
    size_t n = 0;
    const char *parts[2] = {"hello ", "world\n"};
    for (int i = 0; i < 2; i++) {
        z_stream z = {0};
        ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
        z.next_in = (Bytef *)parts[i];
        z.avail_in = (uInt)strlen(parts[i]);
        z.next_out = gz + n;
        z.avail_out = (uInt)(sizeof gz - n);
        ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
        n = sizeof gz - z.avail_out;
        deflateEnd(&z);
    }
    ck_assert_int_eq(awl_corpus_from_bytes(gz, n, "two.gz", &text, &len), 0);
    ck_assert_str_eq(text, "hello world\n");
    free(text);
    ck_assert_int_eq(awl_corpus_from_bytes(gz, n - 3, "cut.gz", &text, &len), AWL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cut.gz is a truncated gzip file"));
    gz[n] = 'x';
    ck_assert_int_eq(awl_corpus_from_bytes(gz, n + 1, "junk.gz", &text, &len), AWL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "1 bytes after the end of the gzip stream"));
}
END_TEST

START_TEST(test_dataset_errors)
{
    make_tmpdir();
    awl_clear_error();
    ck_assert_ptr_null(awl_text_dataset_open(tmp_path("missing.txt"), NULL, 8, 0.9));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "missing.txt"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "No such file"));

    ck_assert_ptr_null(awl_text_dataset_open(tmpdir, NULL, 8, 0.9)); /* a directory */
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_IO);

    write_plain(tmp_path("empty.txt"), "", 0);
    ck_assert_ptr_null(awl_text_dataset_open(tmp_path("empty.txt"), NULL, 8, 0.9));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "empty"));

    /* 100 tokens: 90 train, 10 val; a val window of 10 needs 11. */
    char *text = sample_text(100);
    write_plain(tmp_path("short.txt"), text, 100);
    ck_assert_ptr_null(awl_text_dataset_open(tmp_path("short.txt"), NULL, 10, 0.9));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "too short"));
    awl_text_dataset *ok = awl_text_dataset_open(tmp_path("short.txt"), NULL, 9, 0.9);
    ck_assert_ptr_nonnull(ok);
    awl_text_dataset_free(ok);

    /* A char tokenizer that lacks a byte of the file names the file. */
    awl_tokenizer *abc = awl_tokenizer_char_from_text("abc", 3);
    ck_assert_ptr_null(awl_text_dataset_open(tmp_path("short.txt"), abc, 8, 0.9));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "short.txt"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "not in the character vocabulary"));
    awl_tokenizer_free(abc);

    ck_assert_ptr_null(awl_text_dataset_from_text(text, 100, NULL, 0, 0.9));
    ck_assert_ptr_null(awl_text_dataset_from_text(text, 100, NULL, 8, 0.0));
    ck_assert_ptr_null(awl_text_dataset_from_text(text, 100, NULL, 8, 1.5));

    /* Batches: an empty validation split, a bad batch size, a bad device. */
    awl_text_dataset *all = awl_text_dataset_from_text(text, 100, NULL, 8, 1.0);
    awl_tensor *x = (awl_tensor *)1, *y = (awl_tensor *)1;
    awl_scope_begin();
    ck_assert_int_eq(awl_text_dataset_batch(all, AWL_SPLIT_VAL, 2, "cpu", &x, &y), AWL_ERR_INVALID);
    ck_assert_ptr_null(x);
    ck_assert_ptr_null(y);
    ck_assert_int_eq(awl_text_dataset_batch(all, AWL_SPLIT_TRAIN, 0, "cpu", &x, &y),
                     AWL_ERR_INVALID);
    ck_assert_int_lt(awl_text_dataset_batch(all, AWL_SPLIT_TRAIN, 2, "nosuchdevice", &x, &y), 0);
    ck_assert_uint_eq(awl_text_dataset_get_position(all, AWL_SPLIT_TRAIN), 0);
    awl_scope_end();
    awl_text_dataset_free(all);
    free(text);
    remove_tmpdir();
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tok = tcase_create("tokenizer");
    tcase_add_test(tok, test_char_vocabulary);
    tcase_add_test(tok, test_char_errors);
    tcase_add_test(tok, test_bpe_first_merges);
    tcase_add_test(tok, test_bpe_runs_of_one_byte);
    tcase_add_test(tok, test_bpe_matches_reference);
    tcase_add_test(tok, test_bpe_arbitrary_bytes);
    tcase_add_test(tok, test_serialize_roundtrip);
    tcase_add_test(tok, test_deserialize_rejects);
    tcase_add_test(tok, test_corpus_bytes);
    tcase_set_timeout(tok, 60); /* BPE on 20 kB under the sanitizers, on a busy machine */
    suite_add_tcase(s, tok);
    TCase *ds = tcase_create("dataset");
    tcase_add_test(ds, test_dataset_plain_and_gzip);
    tcase_add_test(ds, test_dataset_split);
    tcase_add_test(ds, test_dataset_batches_are_windows);
    tcase_add_test(ds, test_dataset_reproducible);
    tcase_add_test(ds, test_dataset_resume_position);
    tcase_add_test(ds, test_dataset_errors);
    tcase_add_test(ds, test_dataset_batch_at_is_pure);
    suite_add_tcase(s, ds);
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(data_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
