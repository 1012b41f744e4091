/*
 * fuzz_tokenizer: the byte-level BPE tokenizer with a real tokenizer.json
 * (the Qwen3 one `make check` installs), named by the environment variable
 * QD_FUZZ_TOKENIZER (a file or a folder holding tokenizer.json).
 *
 * Input: byte 0 picks the mode.
 *   even: encode the rest (bit 1: special tokens as plain text). Checked:
 *     every id is in the vocabulary and decodes; encoding again gives the
 *     same ids (the word cache changes nothing); ASCII text decodes back to
 *     itself (the normalizer leaves ASCII alone; byte-level BPE is lossless).
 *   odd: the rest is a list of ids, three bytes each: when the low two bits
 *     of the first are 0 the second names a byte and the id is that byte's
 *     single-byte token (so UTF-8 sequences get cut between tokens),
 *     otherwise the 22 high bits give an id, a few past the vocabulary.
 *     They are streamed through eng_tok_stream (bit 1: skip special
 *     tokens). Checked: unknown ids are refused and change nothing; each
 *     piece is valid UTF-8; the pieces joined equal eng_tok_decode() of the
 *     accepted ids.
 */
#include <string.h>

#include "engine/tokenizer.h"
#include "tests/fuzz/fuzz.h"

static eng_tok *tok;
static size_t n_ids;
static int32_t byte_token[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("QD_FUZZ_TOKENIZER");
    if (!path || !*path) {
        fprintf(stderr, "fuzz_tokenizer: set QD_FUZZ_TOKENIZER to a tokenizer.json\n");
        exit(1);
    }
    eng_diag diag;
    eng_diag_init(&diag);
    if (eng_tok_load(path, &tok, &diag) != 0) {
        eng_diag_print(&diag, stderr, "fuzz_tokenizer");
        exit(1);
    }
    eng_diag_clear(&diag);
    n_ids = eng_tok_n_ids(tok);
    for (int b = 0; b < 256; b++)
        byte_token[b] = -1;
    for (size_t id = 0; id < n_ids; id++) {
        size_t len = 0;
        const char *bytes = eng_tok_token_bytes(tok, (int32_t)id, &len);
        if (bytes && len == 1 && !eng_tok_is_special(tok, (int32_t)id) && byte_token[(unsigned char)bytes[0]] < 0)
            byte_token[(unsigned char)bytes[0]] = (int32_t)id;
    }
    return 0;
}

static void fuzz_encode(const uint8_t *text, size_t len, unsigned flags)
{
    eng_tok_ids ids = {0}, again = {0};
    int rc = eng_tok_encode(tok, (const char *)text, len, flags, &ids);
    if (rc == ENG_TOK_ENOMEM || rc == ENG_TOK_ETOOBIG)
        goto out;
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(len == 0 || ids.n > 0);
    for (size_t i = 0; i < ids.n; i++)
        FUZZ_CHECK(ids.ids[i] >= 0 && (size_t)ids.ids[i] < n_ids);
    FUZZ_CHECK(eng_tok_encode(tok, (const char *)text, len, flags, &again) == 0);
    FUZZ_CHECK(again.n == ids.n && (ids.n == 0 || !memcmp(again.ids, ids.ids, ids.n * sizeof *ids.ids)));
    eng_tok_text dec = {0};
    rc = eng_tok_decode(tok, ids.ids, ids.n, false, &dec);
    FUZZ_CHECK(rc == 0 || rc == ENG_TOK_ENOMEM);
    if (rc == 0) {
        FUZZ_CHECK(fuzz_utf8_valid(dec.s, dec.len));
        bool ascii = true;
        for (size_t i = 0; i < len && ascii; i++)
            ascii = text[i] < 0x80;
        if (ascii)
            FUZZ_CHECK(dec.len == len && !memcmp(dec.s, text, len));
    }
    eng_tok_text_free(&dec);
out:
    eng_tok_ids_free(&ids);
    eng_tok_ids_free(&again);
}

static void fuzz_stream(const uint8_t *data, size_t size, bool skip_special)
{
    size_t n = size / 3;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    eng_tok_stream *st = eng_tok_stream_new(tok, skip_special);
    eng_tok_text joined = {0}, dec = {0};
    if (!ids || !st)
        goto out;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + 3 * i;
        int32_t id;
        if ((p[0] & 3) == 0 && byte_token[p[1]] >= 0) {
            id = byte_token[p[1]];
        } else {
            uint32_t x = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
            id = (int32_t)((x >> 2) % (n_ids + 4));
        }
        const char *piece = NULL;
        size_t len = 0;
        int rc = eng_tok_stream_put(st, id, &piece, &len);
        if (rc == ENG_TOK_EBADID) {
            FUZZ_CHECK((size_t)id >= n_ids || !eng_tok_token_bytes(tok, id, &len));
            continue;
        }
        if (rc == ENG_TOK_ENOMEM)
            goto out;
        FUZZ_CHECK(rc == 0 && piece && strlen(piece) <= len);
        FUZZ_CHECK(fuzz_utf8_valid(piece, len));
        if (len) {
            char *s = realloc(joined.s, joined.len + len + 1);
            if (!s)
                goto out;
            joined.s = s;
            memcpy(joined.s + joined.len, piece, len);
            joined.len += len;
        }
        ids[kept++] = id;
    }
    const char *piece = NULL;
    size_t len = 0;
    if (eng_tok_stream_finish(st, &piece, &len) != 0)
        goto out;
    FUZZ_CHECK(fuzz_utf8_valid(piece, len));
    if (len) {
        char *s = realloc(joined.s, joined.len + len + 1);
        if (!s)
            goto out;
        joined.s = s;
        memcpy(joined.s + joined.len, piece, len);
        joined.len += len;
    }
    int rc = eng_tok_decode(tok, ids, kept, skip_special, &dec);
    if (rc == ENG_TOK_ENOMEM)
        goto out;
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(dec.len == joined.len && (dec.len == 0 || !memcmp(dec.s, joined.s, dec.len)));
out:
    free(joined.s);
    eng_tok_text_free(&dec);
    eng_tok_stream_free(st);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_stream(data + 1, size - 1, (data[0] >> 1) & 1);
    else
        fuzz_encode(data + 1, size - 1, (data[0] >> 1) & 1 ? ENG_TOK_SPECIAL_AS_TEXT : 0);
    return 0;
}
