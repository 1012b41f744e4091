/*
 * tokenizer: the byte-level BPE tokenizer of a Hugging Face tokenizer.json
 * (the kind Qwen3 ships): added tokens, Unicode normalizer, Split/ByteLevel
 * pre-tokenizers, BPE merges and the ByteLevel decoder, with the results of
 * the `tokenizers` library.
 *
 * Encoding a text runs, in order: invalid UTF-8 replaced by U+FFFD (one per
 * maximal invalid subsequence, as a lossy UTF-8 conversion does); added tokens
 * whose "normalized" flag is false matched on the raw text (leftmost-longest);
 * the normalizer on each remaining piece; added tokens with "normalized" true
 * matched on the normalized text; the pre-tokenizer steps; BPE on each
 * pre-token. Decoding maps ids back to bytes and converts them to UTF-8 the
 * same lossy way.
 *
 * Threads: an eng_tok is built once by eng_tok_load(). Decoding, the lookups,
 * eng_tok_stream objects and eng_tok_encode_with() only read it and may run on
 * any thread; what an encoding writes (match data, BPE work arrays, a word
 * cache) lives in an eng_tok_enc, one per encoding thread. eng_tok_encode()
 * uses the eng_tok's own encoder, so one thread at a time may call it.
 */
#ifndef QWEN3D_ENGINE_TOKENIZER_H
#define QWEN3D_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"

/* Error codes of the encode/decode functions; eng_tok_strerror() names them. */
#define ENG_TOK_ERRORS(X)                                                   \
    X(ENG_TOK_OK, 0, "success")                                             \
    X(ENG_TOK_ENOMEM, -1, "out of memory")                                  \
    X(ENG_TOK_EBADID, -2, "token id not in the vocabulary")                 \
    X(ENG_TOK_EREGEX, -3, "pre-tokenizer pattern failed on the input")      \
    X(ENG_TOK_ENORM, -4, "normalizer failed on the input")                  \
    X(ENG_TOK_ETOOBIG, -5, "input too large")

enum {
#define ENG_TOK_ENUM(name, value, msg) name = value,
    ENG_TOK_ERRORS(ENG_TOK_ENUM)
#undef ENG_TOK_ENUM
};

const char *eng_tok_strerror(int err);

typedef struct eng_tok eng_tok;
typedef struct eng_tok_stream eng_tok_stream;

/* A growable list of token ids; callers zero-initialize it and free it with eng_tok_ids_free(). */
typedef struct eng_tok_ids {
    int32_t *ids;
    size_t n;
    size_t cap;
} eng_tok_ids;

/* A growable byte string, always NUL-terminated when s != NULL. */
typedef struct eng_tok_text {
    char *s;
    size_t len;
    size_t cap;
} eng_tok_text;

void eng_tok_ids_free(eng_tok_ids *ids);
void eng_tok_text_free(eng_tok_text *t);

/*
 * Loads PATH: a tokenizer.json file, or a folder that contains one. Returns 0
 * and sets *out, or returns -1 with one line in diag naming the file and the
 * JSON field at fault (unknown types and unsupported options are rejected).
 */
int eng_tok_load(const char *path, eng_tok **out, eng_diag *diag);
void eng_tok_free(eng_tok *t);

/* One more than the largest id of the vocabulary and the added tokens. */
size_t eng_tok_n_ids(const eng_tok *t);
/* True for added tokens marked "special" (skipped by decoding when asked). */
bool eng_tok_is_special(const eng_tok *t, int32_t id);
/* Id of the added token whose content is CONTENT, or -1. */
int32_t eng_tok_added_id(const eng_tok *t, const char *content);
/* True for the ids of added tokens, special or not (constrained decoding never spells them). */
bool eng_tok_is_added(const eng_tok *t, int32_t id);
/* The bytes id ID decodes to (not NUL-terminated), or NULL for an unknown id. */
const char *eng_tok_token_bytes(const eng_tok *t, int32_t id, size_t *len);

/* Encode flags. */
enum {
    /* Treat added tokens marked "special" as plain text (for untrusted text). */
    ENG_TOK_SPECIAL_AS_TEXT = 1u << 0,
};

/*
 * Appends the ids of TEXT (LEN bytes, any bytes) to OUT. Returns 0 or a
 * negative ENG_TOK_E* code; on error OUT keeps the ids it had before.
 */
int eng_tok_encode(eng_tok *t, const char *text, size_t len, unsigned flags, eng_tok_ids *out);

/* Encoding state for eng_tok_encode_with(): about 1.4 MB, mostly the word cache. */
typedef struct eng_tok_enc eng_tok_enc;

/* A new encoder (NULL when out of memory); it serves any eng_tok. */
eng_tok_enc *eng_tok_enc_new(void);

void eng_tok_enc_free(eng_tok_enc *enc);

/* eng_tok_encode() with the caller's encoder: threads with their own encoders may share T. */
int eng_tok_encode_with(const eng_tok *t, eng_tok_enc *enc, const char *text, size_t len, unsigned flags,
                        eng_tok_ids *out);

/*
 * Appends the UTF-8 text of IDS to OUT (invalid byte sequences become
 * U+FFFD). With skip_special, special added tokens are left out. Returns 0, or
 * ENG_TOK_EBADID if an id is not in the vocabulary (OUT is then unchanged).
 */
int eng_tok_decode(const eng_tok *t, const int32_t *ids, size_t n, bool skip_special, eng_tok_text *out);

/*
 * Appends IN converted to valid UTF-8 to OUT: each maximal invalid
 * subsequence becomes one U+FFFD, as Rust's String::from_utf8_lossy does.
 * Returns 0 or ENG_TOK_ENOMEM.
 */
int eng_tok_utf8_lossy(const char *in, size_t len, eng_tok_text *out);

/*
 * Streaming detokenizer: fed one id at a time, it returns the text completed
 * by that id and holds back a trailing incomplete UTF-8 sequence until the
 * next ids complete it. The concatenation of all returned pieces equals
 * eng_tok_decode() of the same ids. The stream reads T, which must outlive it.
 */
eng_tok_stream *eng_tok_stream_new(const eng_tok *t, bool skip_special);
void eng_tok_stream_free(eng_tok_stream *s);
/*
 * Feeds ID. On success *text points to the newly completed text (valid UTF-8,
 * NUL-terminated, *len bytes, possibly empty), owned by the stream and valid
 * until the next call. Returns 0, ENG_TOK_EBADID (the stream is unchanged) or
 * ENG_TOK_ENOMEM.
 */
int eng_tok_stream_put(eng_tok_stream *s, int32_t id, const char **text, size_t *len);
/*
 * Ends the sequence: returns the held-back bytes, an incomplete sequence as
 * U+FFFD, and resets the stream for a new sequence.
 */
int eng_tok_stream_finish(eng_tok_stream *s, const char **text, size_t *len);

#endif
