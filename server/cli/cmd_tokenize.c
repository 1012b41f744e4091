/*
 * cmd_tokenize: `qwen3d tokenize --model DIR [--decode] [--json] [--lines]
 * [--null] [--skip-special] [--stats]`. Encodes the text on stdin to ids, or
 * (--decode) ids to text, with the model folder's tokenizer.json
 * (engine/tokenizer). Runs on the main thread only.
 *
 * Without --lines, all of stdin is one text. With --lines, each input line
 * (up to '\n', which is not part of it) is processed on its own and gives one
 * output line; --null does the same with NUL-terminated records, so texts may
 * hold line feeds. Both let tests and benchmarks run a whole corpus through
 * one process.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tokenizer.h"
#include "server/cli/cli.h"

#define CMD "tokenize"

/* Prints the one-line error like cli_fail() and returns exit code 1 (a failure, not a usage error). */
#define FAIL(...) (cli_fail(CMD, __VA_ARGS__), 1)

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qwen3d tokenize --model DIR [--decode] [--json] [--lines] [--null] [--skip-special] [--stats]\n"
            "  Reads UTF-8 text on stdin and prints its token ids, space-separated\n"
            "  (--json: {\"ids\":[...]}). Special tokens in the text are recognized.\n"
            "  --model DIR     model folder with tokenizer.json, or the tokenizer.json file\n"
            "  --decode        read ids (a JSON array or whitespace-separated) and print the text\n"
            "                  (--json: {\"text\":...})\n"
            "  --lines         treat each input line as its own text; one output line per input line\n"
            "  --null          like --lines, with NUL-terminated input records (texts may span lines)\n"
            "  --skip-special  with --decode, leave special tokens out\n"
            "  --stats         print bytes, tokens, encode time and MB/s to stderr (load time excluded)\n");
}

static int read_all(FILE *f, char **buf, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b)
        return -1;
    for (;;) {
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return -1;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (ferror(f)) {
        free(b);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static void print_ids(const eng_tok_ids *ids, bool json, FILE *out)
{
    /* Formatted by hand: printf per id dominates the time of a large --lines run. */
    char buf[4096];
    size_t k = 0;
    if (json) {
        memcpy(buf, "{\"ids\":[", 8);
        k = 8;
    }
    for (size_t i = 0; i < ids->n; i++) {
        if (k > sizeof buf - 16) {
            fwrite(buf, 1, k, out);
            k = 0;
        }
        if (i)
            buf[k++] = json ? ',' : ' ';
        char digits[12];
        size_t d = 0;
        uint32_t v = (uint32_t)ids->ids[i];
        do {
            digits[d++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        while (d)
            buf[k++] = digits[--d];
    }
    if (json) {
        buf[k++] = ']';
        buf[k++] = '}';
    }
    buf[k++] = '\n';
    fwrite(buf, 1, k, out);
}

/* Parses ids: a JSON array of integers, or whitespace-separated integers. Returns 0 or -1 (message printed). */
static int parse_ids(const char *s, size_t n, eng_tok_ids *ids, const char *where)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    if (i < n && s[i] == '[') {
        json_error_t err;
        json_t *a = json_loadb(s, n, 0, &err);
        if (!a || !json_is_array(a)) {
            cli_fail(CMD, "%s: not a JSON array of ids: %s", where, a ? "not an array" : err.text);
            json_decref(a);
            return -1;
        }
        ids->n = 0;
        for (size_t k = 0; k < json_array_size(a); k++) {
            json_t *v = json_array_get(a, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                cli_fail(CMD, "%s: element %zu is not a token id", where, k);
                json_decref(a);
                return -1;
            }
            if (ids->n == ids->cap) {
                size_t cap = ids->cap ? 2 * ids->cap : 64;
                int32_t *p = realloc(ids->ids, cap * sizeof *p);
                if (!p) {
                    json_decref(a);
                    cli_fail(CMD, "out of memory");
                    return -1;
                }
                ids->ids = p;
                ids->cap = cap;
            }
            ids->ids[ids->n++] = (int32_t)json_integer_value(v);
        }
        json_decref(a);
        return 0;
    }
    ids->n = 0;
    while (i < n) {
        char word[32];
        size_t w = 0;
        while (i < n && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) {
            if (w < sizeof word - 1)
                word[w] = s[i];
            w++;
            i++;
        }
        if (w) {
            int64_t v = 0;
            word[w < sizeof word ? w : sizeof word - 1] = '\0';
            if (w >= sizeof word || !cli_parse_i64(word, 0, INT32_MAX, &v)) {
                cli_fail(CMD, "%s: '%s' is not a token id", where, word);
                return -1;
            }
            if (ids->n == ids->cap) {
                size_t cap = ids->cap ? 2 * ids->cap : 64;
                int32_t *p = realloc(ids->ids, cap * sizeof *p);
                if (!p) {
                    cli_fail(CMD, "out of memory");
                    return -1;
                }
                ids->ids = p;
                ids->cap = cap;
            }
            ids->ids[ids->n++] = (int32_t)v;
        }
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
            i++;
    }
    return 0;
}

/* Decoded text: raw bytes (with a record terminator in --lines/--null mode), or {"text":...}. */
static void print_text(const eng_tok_text *text, bool json, int record_end, FILE *out)
{
    if (json) {
        json_t *o = json_pack("{s:s%}", "text", text->s ? text->s : "", text->len);
        char *dump = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        fprintf(out, "%s\n", dump ? dump : "{\"text\":null}");
        free(dump);
        json_decref(o);
    } else {
        fwrite(text->s ? text->s : "", 1, text->len, out);
        if (record_end >= 0)
            fputc(record_end, out);
    }
}

typedef struct tok_opts {
    bool decode, json, skip_special, stats;
    int record_sep;            /* '\n' (--lines), '\0' (--null), or -1: all of stdin is one text */
} tok_opts;

typedef struct tok_stats {
    size_t bytes, tokens;
    double encode_s;
} tok_stats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One text (or one record). Returns 0 or an exit code. */
static int run_one(eng_tok *tok, const tok_opts *o, const char *s, size_t n, size_t record_no, eng_tok_ids *ids,
                   eng_tok_text *text, tok_stats *st)
{
    char where[64];
    if (o->record_sep >= 0)
        snprintf(where, sizeof where, "stdin %s %zu", o->record_sep ? "line" : "record", record_no);
    else
        snprintf(where, sizeof where, "stdin");
    if (!o->decode) {
        ids->n = 0;
        double t0 = now_s();
        int rc = eng_tok_encode(tok, s, n, 0, ids);
        st->encode_s += now_s() - t0;
        if (rc)
            return FAIL("%s: %s", where, eng_tok_strerror(rc));
        st->bytes += n;
        st->tokens += ids->n;
        print_ids(ids, o->json, stdout);
        return 0;
    }
    if (parse_ids(s, n, ids, where))
        return 1;
    text->len = 0;
    int rc = eng_tok_decode(tok, ids->ids, ids->n, o->skip_special, text);
    if (rc == ENG_TOK_EBADID) {
        for (size_t k = 0; k < ids->n; k++) {
            size_t blen;
            if (!eng_tok_token_bytes(tok, ids->ids[k], &blen))
                return FAIL("%s: id %d (position %zu) is not in the vocabulary (%zu ids)", where, ids->ids[k], k,
                            eng_tok_n_ids(tok));
        }
    }
    if (rc)
        return FAIL("%s: %s", where, eng_tok_strerror(rc));
    print_text(text, o->json, o->record_sep, stdout);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    tok_opts o = {.record_sep = -1};
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_opt(CMD, argc, argv, &i, "model", &v)) != 0) {
            if (r < 0)
                return 2;
            model = v;
        } else if (cli_flag(argv, i, "decode")) {
            o.decode = true;
        } else if (cli_flag(argv, i, "json")) {
            o.json = true;
        } else if (cli_flag(argv, i, "lines")) {
            o.record_sep = o.record_sep < 0 ? '\n' : o.record_sep;
        } else if (cli_flag(argv, i, "null")) {
            o.record_sep = '\0';
        } else if (cli_flag(argv, i, "skip-special")) {
            o.skip_special = true;
        } else if (cli_flag(argv, i, "stats")) {
            o.stats = true;
        } else if (cli_flag(argv, i, "help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            return cli_fail(CMD, "unknown argument '%s' (try qwen3d tokenize --help)", argv[i]);
        }
    }
    if (!model)
        return cli_fail(CMD, "--model DIR is required");

    eng_diag diag;
    eng_diag_init(&diag);
    eng_tok *tok = NULL;
    if (eng_tok_load(model, &tok, &diag)) {
        eng_diag_print(&diag, stderr, "qwen3d: " CMD);
        eng_diag_clear(&diag);
        return 1;
    }
    char *in = NULL;
    size_t n = 0;
    if (read_all(stdin, &in, &n)) {
        eng_tok_free(tok);
        return FAIL("stdin: read error");
    }
    eng_tok_ids ids = {0};
    eng_tok_text text = {0};
    tok_stats st = {0};
    int rc = 0;
    if (o.record_sep < 0) {
        rc = run_one(tok, &o, in, n, 0, &ids, &text, &st);
    } else {
        size_t start = 0, record_no = 1;
        while (start < n && rc == 0) {
            const char *end_p = memchr(in + start, o.record_sep, n - start);
            size_t end = end_p ? (size_t)(end_p - in) : n;
            rc = run_one(tok, &o, in + start, end - start, record_no++, &ids, &text, &st);
            start = end + 1;
        }
    }
    if (fflush(stdout) != 0 && rc == 0)
        rc = FAIL("stdout: write error");
    if (rc == 0 && o.stats && !o.decode)
        fprintf(stderr, "qwen3d: tokenize: %zu bytes, %zu tokens, encode %.3f s, %.2f MB/s\n", st.bytes, st.tokens,
                st.encode_s, st.encode_s > 0 ? (double)st.bytes / st.encode_s / 1e6 : 0.0);
    eng_tok_ids_free(&ids);
    eng_tok_text_free(&text);
    free(in);
    eng_tok_free(tok);
    return rc;
}
