/*
 * data/data.h - tokenizers and text datasets for training language models.
 *
 * A tokenizer turns bytes into integer token ids and back. Two kinds exist:
 *   - "char": the vocabulary is the sorted set of distinct bytes of a corpus
 *     (nanoGPT's shakespeare_char; tinyshakespeare gives 65 tokens). Small and
 *     readable, but it cannot encode a byte it has not seen.
 *   - "bpe": byte-level byte-pair encoding. Ids 0..255 are the bytes
 *     themselves, so any input (binary, invalid UTF-8) encodes; each further
 *     id is a learned merge of two earlier tokens, trained greedily on a
 *     corpus (the most frequent adjacent pair first).
 * A tokenizer serialises to a short printable ASCII string, which checkpoints
 * store in their JSON metadata so that a saved model decodes its own output.
 *
 * A text dataset reads a plain or gzip file, encodes it, splits it into a
 * training and a validation part (the first train_fraction of the tokens, and
 * the rest) and samples batches of random windows, like nanoGPT's get_batch.
 * Sampling is a pure function of (seed, split, batch number, row), drawn from
 * Philox (common/philox.h), so a checkpoint that saves the seed and the
 * per-split positions resumes the exact same batches.
 *
 *     awl_text_dataset *ds = awl_text_dataset_open("input.txt", NULL, 64, 0.9);
 *     if (!ds) { fprintf(stderr, "%s\n", awl_last_error()); return 1; }
 *     awl_text_dataset_seed(ds, 1337);
 *     const awl_tokenizer *tok = awl_text_dataset_tokenizer(ds);
 *     printf("vocab %d\n", awl_tokenizer_vocab_size(tok));
 *     awl_scope_begin();
 *     awl_tensor *x, *y;             // (16, 64) int32; y is x shifted by one
 *     if (awl_text_dataset_batch(ds, AWL_SPLIT_TRAIN, 16, "cpu", &x, &y) == 0)
 *         ... use x and y ...
 *     awl_scope_end();               // x and y are freed with the scope
 *     awl_text_dataset_free(ds);
 *
 * Failure follows common/error.h: NULL or a negative status, with a message
 * naming the function. A NULL tokenizer or dataset argument fails silently
 * (NULL or AWL_ERR_INVALID, no new message), so errors propagate.
 */
#ifndef AWL_DATA_DATA_H
#define AWL_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers ---------------------------------------------------------- */

typedef struct awl_tokenizer awl_tokenizer;

/* A character tokenizer whose vocabulary is the sorted distinct bytes of
 * text[0..len). Fails on empty text. Free with awl_tokenizer_free. */
awl_tokenizer *awl_tokenizer_char_from_text(const char *text, size_t len);

/* Trains a byte-level BPE tokenizer on text[0..len): starting from the 256
 * byte tokens, repeatedly merges the most frequent adjacent pair (ties go to
 * the smallest (left id, right id)) until the vocabulary has vocab_size
 * tokens or no pair occurs twice. So the result may be smaller than asked
 * for; awl_tokenizer_vocab_size says how large it is. vocab_size must be at
 * least 256. The text is one sequence: merges may cross spaces and lines.
 * Free with awl_tokenizer_free. */
awl_tokenizer *awl_tokenizer_bpe_train(const char *text, size_t len, int vocab_size);

/* Frees a tokenizer; NULL is a no-op. */
void awl_tokenizer_free(awl_tokenizer *tok);

/* Number of distinct token ids (ids are 0 .. vocab_size - 1); -1 for NULL. */
int awl_tokenizer_vocab_size(const awl_tokenizer *tok);

/* "char" or "bpe" ("" for NULL). */
const char *awl_tokenizer_kind(const awl_tokenizer *tok);

/* Encodes text[0..len) into *ids (malloc'd, *n of them; the caller frees
 * with free) and returns 0. A char tokenizer fails with AWL_ERR_INVALID on a
 * byte outside its vocabulary, naming the byte and its offset; BPE takes at
 * most 2 GiB per call and about 36 bytes of working memory per input byte.
 * On failure *ids is NULL and *n is 0. A tokenizer is never changed after it
 * is made, so threads may share one. */
int awl_tokenizer_encode(const awl_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                         size_t *n);

/* Decodes ids[0..n) into *text (malloc'd, *len bytes plus a terminating NUL
 * that *len does not count; the caller frees with free) and returns 0. Fails
 * with AWL_ERR_INVALID on an id outside the vocabulary. On failure *text is
 * NULL and *len is 0. */
int awl_tokenizer_decode(const awl_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                         size_t *len);

/* Writes the tokenizer as a printable ASCII string into *buf (malloc'd, NUL
 * terminated, *len bytes without the NUL; the caller frees with free):
 *   "char:" + two lowercase hex digits per vocabulary byte, ascending;
 *   "bpe:"  + the merges in order, "left.right" in lowercase hex without
 *             leading zeros, separated by ','   (e.g. "bpe:65.20,100.74").
 * Returns 0, or a negative status. */
int awl_tokenizer_serialize(const awl_tokenizer *tok, char **buf, size_t *len);

/* Rebuilds a tokenizer from awl_tokenizer_serialize's string buf[0..len).
 * Checks everything: the kind, the hex digits, ascending distinct bytes, that
 * each merge names earlier tokens and no merge repeats. Returns NULL with
 * AWL_ERR_FORMAT and a message saying what and where otherwise. Free with
 * awl_tokenizer_free. */
awl_tokenizer *awl_tokenizer_deserialize(const char *buf, size_t len);

/* ---- corpora ---------------------------------------------------------------- */

/* Reads a training corpus at `path` into *text (malloc'd, NUL-terminated,
 * *len bytes without the NUL; the caller frees): a file, plain or gzip
 * (concatenated members allowed), or a directory, whose regular files are
 * read in name order and concatenated (dot files, "*.dat" files and links
 * are skipped, which leaves the text of Debian's fortunes package). Every
 * file must be UTF-8 text: well-formed UTF-8 without NUL bytes.
 * Fails with AWL_ERR_IO (the path and the system's reason), AWL_ERR_FORMAT
 * (naming the file and the offset of the first byte that is not text, or
 * what is wrong with its gzip stream) or AWL_ERR_INVALID (nothing to read);
 * then *text is NULL and *len 0. */
int awl_corpus_read(const char *path, char **text, size_t *len);

/* The same for one file's bytes in memory (inflated when they start with
 * gzip's magic); `name` names them in messages (NULL: "the text"). */
int awl_corpus_from_bytes(const void *data, size_t n, const char *name, char **text, size_t *len);

/* ---- text datasets ------------------------------------------------------- */

typedef enum awl_data_split { AWL_SPLIT_TRAIN = 0, AWL_SPLIT_VAL = 1 } awl_data_split;

typedef struct awl_text_dataset awl_text_dataset;

/* Reads the file at `path` (plain text or gzip, detected by zlib), encodes
 * it with `tok`, or with a new character tokenizer built from the file when
 * tok is NULL, and splits the tokens: the first floor(n * train_fraction) for
 * training, the rest for validation. train_fraction is in (0, 1]; block >= 1
 * is the window length batches will use. Each non-empty split must hold at
 * least block + 1 tokens. A passed-in tokenizer is borrowed and must outlive
 * the dataset; a built one is owned by it. The random sampler starts at seed
 * 0, position 0 in both splits.
 * Fails with AWL_ERR_IO (path and the system's reason) when the file cannot
 * be read, AWL_ERR_FORMAT on corrupt gzip data, AWL_ERR_INVALID on an empty
 * file, a corpus too short for the block, or bad arguments.
 * Free with awl_text_dataset_free. */
awl_text_dataset *awl_text_dataset_open(const char *path, const awl_tokenizer *tok, int block,
                                        double train_fraction);

/* The same from text in memory (the text is encoded, not kept). */
awl_text_dataset *awl_text_dataset_from_text(const char *text, size_t len, const awl_tokenizer *tok,
                                             int block, double train_fraction);

/* Frees the dataset and the tokenizer it owns; NULL is a no-op. */
void awl_text_dataset_free(awl_text_dataset *ds);

/* The tokenizer in use (borrowed: owned by the dataset or by whoever passed
 * it to _open). NULL for NULL. */
const awl_tokenizer *awl_text_dataset_tokenizer(const awl_text_dataset *ds);

/* Number of tokens in a split; -1 for NULL or a bad split. */
int64_t awl_text_dataset_num_tokens(const awl_text_dataset *ds, awl_data_split split);

/* The tokens of a split (borrowed, valid until the dataset is freed), for
 * evaluating over a whole split in order. NULL, *n = 0 for NULL or a bad
 * split. */
const int32_t *awl_text_dataset_tokens(const awl_text_dataset *ds, awl_data_split split, size_t *n);

/* The window length given at open. */
int awl_text_dataset_block(const awl_text_dataset *ds);

/* Samples `batch` windows of the split, each starting at a uniformly random
 * offset in [0, tokens - block): *x is (batch, block) int32 holding
 * tokens[s .. s + block) for each start s, *y is (batch, block) int32 holding
 * tokens[s + 1 .. s + block + 1) (the next token of each position). Both are
 * made with awl_from_data on `device` (NULL: "cpu") and owned by the current
 * scope (tensor/tensor.h). Row b of the split's k-th batch depends only on
 * (seed, split, k, b); the split's position (k) advances by one on success.
 * On failure *x and *y are NULL and the position is unchanged. */
int awl_text_dataset_batch(awl_text_dataset *ds, awl_data_split split, int batch,
                           const char *device, awl_tensor **x, awl_tensor **y);

/* The split's k-th batch as the sampler would draw it under `seed`, with
 * no state read or changed: evaluation draws its batches from a seed of its
 * own this way, so it never moves the training stream. Otherwise as
 * awl_text_dataset_batch. */
int awl_text_dataset_batch_at(const awl_text_dataset *ds, awl_data_split split, uint64_t seed,
                              uint64_t k, int batch, const char *device, awl_tensor **x,
                              awl_tensor **y);

/* Reseeds the sampler and rewinds both splits to position 0. */
void awl_text_dataset_seed(awl_text_dataset *ds, uint64_t seed);
uint64_t awl_text_dataset_get_seed(const awl_text_dataset *ds);

/* Number of batches drawn from a split since seeding (0 for NULL or a bad
 * split); setting it makes the next batch the one that would have been drawn
 * after `position` batches. A checkpoint saves the seed and both positions
 * and restores them with _seed then _set_position. */
uint64_t awl_text_dataset_get_position(const awl_text_dataset *ds, awl_data_split split);
int awl_text_dataset_set_position(awl_text_dataset *ds, awl_data_split split, uint64_t position);

#ifdef __cplusplus
}
#endif

#endif
