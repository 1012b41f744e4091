/*
 * schema: JSON Schema, JSON mode and Qwen3 tool calls to engine grammars
 * (api/schema.h says what is supported and the output form).
 *
 * One pass over the schema builds grammar expressions; every property
 * value, array item and $ref target becomes a rule of its own, so no part
 * of the schema is copied into the automaton more than once per use and
 * recursive references are plain rule calls. $ref targets are compiled once
 * each, after the schema that names them.
 *
 * Called by the request parser (api/parse.c) on the loop thread; pure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema.h"

static const char *const schema_msgs[] = {
#define API_SCHEMA_MSG(name, value, msg) [-(value)] = msg,
    API_SCHEMA_ERRORS(API_SCHEMA_MSG)
#undef API_SCHEMA_MSG
};

const char *api_schema_strerror(int err)
{
    if (err > 0 || (size_t)-err >= sizeof schema_msgs / sizeof schema_msgs[0])
        return "unknown schema error";
    return schema_msgs[-err];
}

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };

/* What each keyword is; K_NONE: unsupported. */
enum { K_NONE, K_ANNOT, K_DEFS, K_TYPE, K_OBJ, K_ARR, K_STR, K_ENUM, K_CONST, K_ANYOF, K_REF };

static const struct {
    const char *name;
    int kind;
} keywords[] = {
    {"title", K_ANNOT}, {"description", K_ANNOT}, {"examples", K_ANNOT}, {"default", K_ANNOT},
    {"$schema", K_ANNOT}, {"$id", K_ANNOT}, {"$comment", K_ANNOT}, {"deprecated", K_ANNOT},
    {"readOnly", K_ANNOT}, {"writeOnly", K_ANNOT}, {"$defs", K_DEFS}, {"definitions", K_DEFS},
    {"type", K_TYPE}, {"properties", K_OBJ}, {"required", K_OBJ}, {"additionalProperties", K_OBJ},
    {"minProperties", K_OBJ}, {"maxProperties", K_OBJ},
    {"items", K_ARR}, {"prefixItems", K_ARR}, {"minItems", K_ARR}, {"maxItems", K_ARR},
    {"minLength", K_STR}, {"maxLength", K_STR}, {"format", K_STR}, {"enum", K_ENUM}, {"const", K_CONST},
    {"anyOf", K_ANYOF}, {"oneOf", K_ANYOF}, {"$ref", K_REF},
};

static int keyword_kind(const char *k)
{
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (!strcmp(keywords[i].name, k))
            return keywords[i].kind;
    return K_NONE;
}

typedef struct refent {
    const json_t *root;
    char *ref;            /* the $ref string */
    char *ptr;            /* where the target is, for errors */
    const json_t *target;
    int32_t rule;
} refent;

typedef struct loopent {
    uint32_t min, max;
    int32_t rule;
} loopent;

typedef struct sc {
    eng_gbuild *b;
    const json_t *root;
    api_schema_error *err;
    int rc;
    char ptr[1024];
    size_t plen;
    int depth;
    size_t nodes, literal_bytes;
    int32_t r_value, r_number, r_integer, r_keychars;
    loopent *loops;
    size_t n_loops, cap_loops;
    refent *refs;
    size_t n_refs, cap_refs;
} sc;

/* Copies SRC into DST of CAP bytes, cut to fit. */
static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static size_t ptr_push(sc *s, const char *seg);
static void ptr_pop(sc *s, size_t old);

/* Records the first failure: KEYWORD (NULL: the schema itself) below the current pointer. */
static void fail(sc *s, int rc, const char *keyword, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(sc *s, int rc, const char *keyword, const char *fmt, ...)
{
    if (s->rc)
        return;
    s->rc = rc;
    api_schema_error *e = s->err;
    char ptr[1024 + 80];
    if (keyword) {
        /* the keyword's own pointer segment, escaped as RFC 6901 says */
        size_t old = ptr_push(s, keyword);
        snprintf(ptr, sizeof ptr, "%s", s->ptr);
        ptr_pop(s, old);
    }
    else
        snprintf(ptr, sizeof ptr, "%s", s->ptr);
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!e)
        return;
    copy_str(e->keyword, sizeof e->keyword, keyword ? keyword : "");
    copy_str(e->pointer, sizeof e->pointer, ptr);
    snprintf(e->message, sizeof e->message, "%.160s at '%.140s'", text, ptr[0] ? ptr : "/");
}

/* Appends "/" and SEG (escaped as RFC 6901 says) to the pointer; returns the old length. */
static size_t ptr_push(sc *s, const char *seg)
{
    size_t old = s->plen;
    char buf[1024];
    size_t n = 0;
    buf[n++] = '/';
    for (const char *p = seg; *p && n + 3 < sizeof buf; p++) {
        if (*p == '~') {
            buf[n++] = '~';
            buf[n++] = '0';
        } else if (*p == '/') {
            buf[n++] = '~';
            buf[n++] = '1';
        } else {
            buf[n++] = *p;
        }
    }
    if (s->plen + n + 1 > sizeof s->ptr)
        n = sizeof s->ptr - s->plen - 1;
    memcpy(s->ptr + s->plen, buf, n);
    s->plen += n;
    s->ptr[s->plen] = '\0';
    return old;
}

static size_t ptr_push_index(sc *s, size_t i)
{
    char seg[32];
    snprintf(seg, sizeof seg, "%zu", i);
    return ptr_push(s, seg);
}

static void ptr_pop(sc *s, size_t old)
{
    s->plen = old;
    s->ptr[old] = '\0';
}

/* ---- expression helpers ---- */

static eng_gexpr E2(sc *s, bool alt, eng_gexpr a, eng_gexpr b)
{
    eng_gexpr v[2] = {a, b};
    return alt ? eng_gb_alt(s->b, v, 2) : eng_gb_seq(s->b, v, 2);
}
#define SEQ(s, ...) eng_gb_seq((s)->b, (eng_gexpr[]){__VA_ARGS__}, sizeof((eng_gexpr[]){__VA_ARGS__}) / sizeof(eng_gexpr))
#define ALT(s, ...) eng_gb_alt((s)->b, (eng_gexpr[]){__VA_ARGS__}, sizeof((eng_gexpr[]){__VA_ARGS__}) / sizeof(eng_gexpr))

static eng_gexpr lit(sc *s, const char *t)
{
    return eng_gb_str(s->b, t);
}

static eng_gexpr rng(sc *s, char lo, char hi)
{
    return eng_gb_range(s->b, (uint8_t)lo, (uint8_t)hi);
}

static eng_gexpr opt(sc *s, eng_gexpr e)
{
    return eng_gb_repeat(s->b, e, 0, 1);
}

static eng_gexpr digit(sc *s)
{
    return rng(s, '0', '9');
}

/* The separator between members and items: ',' and an optional space. */
static eng_gexpr sep(sc *s)
{
    return E2(s, false, lit(s, ","), opt(s, lit(s, " ")));
}

static eng_gexpr colon(sc *s)
{
    return E2(s, false, lit(s, ":"), opt(s, lit(s, " ")));
}

/*
 * UTF-8 as a byte automaton: state 0 starts a character (here: one a JSON
 * string may hold unescaped: no control character, '"' or '\'), the others
 * wait for continuation bytes; -1 is the end of a character.
 */
typedef struct u8edge {
    int8_t from;
    uint8_t lo, hi;
    int8_t to;
} u8edge;

static const u8edge u8[] = {
    {0, 0x20, 0x21, -1}, {0, 0x23, 0x5B, -1}, {0, 0x5D, 0x7F, -1}, {0, 0xC2, 0xDF, 1}, {0, 0xE0, 0xE0, 3},
    {0, 0xE1, 0xEC, 2},  {0, 0xED, 0xED, 4},  {0, 0xEE, 0xEF, 2},  {0, 0xF0, 0xF0, 6}, {0, 0xF1, 0xF3, 5},
    {0, 0xF4, 0xF4, 7},  {1, 0x80, 0xBF, -1}, {2, 0x80, 0xBF, 1},  {3, 0xA0, 0xBF, 1}, {4, 0x80, 0x9F, 1},
    {5, 0x80, 0xBF, 2},  {6, 0x90, 0xBF, 2},  {7, 0x80, 0x8F, 2},
};

/* The rest of a character from UTF-8 state U. */
static eng_gexpr u8_rest(sc *s, int u)
{
    if (u < 0)
        return eng_gb_empty(s->b);
    eng_gexpr alts[16];
    size_t n = 0;
    for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++)
        if (u8[i].from == u)
            alts[n++] = E2(s, false, eng_gb_range(s->b, u8[i].lo, u8[i].hi), u8_rest(s, u8[i].to));
    return eng_gb_alt(s->b, alts, n);
}

static eng_gexpr hex(sc *s)
{
    return ALT(s, digit(s), rng(s, 'a', 'f'), rng(s, 'A', 'F'));
}

/* One character of a JSON string: unescaped, or an escape; \u escapes name no surrogate. */
static eng_gexpr json_char(sc *s)
{
    eng_gexpr not_d = ALT(s, digit(s), rng(s, 'a', 'c'), rng(s, 'A', 'C'), rng(s, 'e', 'f'), rng(s, 'E', 'F'));
    eng_gexpr u = ALT(s, SEQ(s, not_d, hex(s), hex(s), hex(s)), SEQ(s, ALT(s, lit(s, "d"), lit(s, "D")), rng(s, '0', '7'), hex(s), hex(s)));
    eng_gexpr esc = SEQ(s, lit(s, "\\"),
                        ALT(s, lit(s, "\""), lit(s, "\\"), lit(s, "/"), lit(s, "b"), lit(s, "f"), lit(s, "n"),
                            lit(s, "r"), lit(s, "t"), E2(s, false, lit(s, "u"), u)));
    return E2(s, true, u8_rest(s, 0), esc);
}

/* The characters of a string of MIN to MAX characters, one loop rule per pair of bounds. */
static int32_t chars_rule(sc *s, uint32_t min, uint32_t max)
{
    for (size_t i = 0; i < s->n_loops; i++)
        if (s->loops[i].min == min && s->loops[i].max == max)
            return s->loops[i].rule;
    if (s->n_loops == s->cap_loops) {
        size_t cap = s->cap_loops ? s->cap_loops * 2 : 8;
        loopent *l = realloc(s->loops, cap * sizeof *l);
        if (!l) {
            fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
            return -1;
        }
        s->loops = l;
        s->cap_loops = cap;
    }
    int32_t r = eng_gb_rule(s->b);
    eng_gb_define_loop(s->b, r, json_char(s), min, max);
    s->loops[s->n_loops++] = (loopent){min, max, r};
    return r;
}

static eng_gexpr string_expr(sc *s, uint32_t min, uint32_t max)
{
    return SEQ(s, lit(s, "\""), eng_gb_ref(s->b, chars_rule(s, min, max)), lit(s, "\""));
}

static int32_t number_rule(sc *s, bool integer)
{
    int32_t *r = integer ? &s->r_integer : &s->r_number;
    if (*r >= 0)
        return *r;
    *r = eng_gb_rule(s->b);
    eng_gexpr intpart = SEQ(s, opt(s, lit(s, "-")),
                            E2(s, true, lit(s, "0"), E2(s, false, rng(s, '1', '9'), eng_gb_repeat(s->b, digit(s), 0, 15))));
    eng_gexpr body = intpart;
    if (!integer) {
        eng_gexpr frac = opt(s, E2(s, false, lit(s, "."), eng_gb_repeat(s->b, digit(s), 1, 16)));
        eng_gexpr ex = opt(s, SEQ(s, ALT(s, lit(s, "e"), lit(s, "E")), opt(s, ALT(s, lit(s, "-"), lit(s, "+"))),
                                  eng_gb_repeat(s->b, digit(s), 1, 2)));
        body = SEQ(s, intpart, frac, ex);
    }
    eng_gb_define(s->b, *r, body);
    return *r;
}

/* Any JSON value (with the output form's whitespace); the object and array rules call it. */
static int32_t value_rule(sc *s)
{
    if (s->r_value >= 0)
        return s->r_value;
    s->r_value = eng_gb_rule(s->b);
    int32_t obj = eng_gb_rule(s->b), arr = eng_gb_rule(s->b);
    eng_gexpr v = eng_gb_ref(s->b, s->r_value);
    eng_gexpr member = SEQ(s, string_expr(s, 0, ENG_GRAMMAR_INF), colon(s), v);
    eng_gb_define(s->b, obj,
                  SEQ(s, lit(s, "{"), opt(s, E2(s, false, member, eng_gb_repeat(s->b, E2(s, false, sep(s), member), 0, ENG_GRAMMAR_INF))),
                      lit(s, "}")));
    eng_gb_define(s->b, arr,
                  SEQ(s, lit(s, "["), opt(s, E2(s, false, v, eng_gb_repeat(s->b, E2(s, false, sep(s), v), 0, ENG_GRAMMAR_INF))),
                      lit(s, "]")));
    eng_gb_define(s->b, s->r_value,
                  ALT(s, eng_gb_ref(s->b, obj), eng_gb_ref(s->b, arr), string_expr(s, 0, ENG_GRAMMAR_INF),
                      eng_gb_ref(s->b, number_rule(s, false)), lit(s, "true"), lit(s, "false"), lit(s, "null")));
    return s->r_value;
}

/* ---- formats ---- */

static eng_gexpr date_expr(sc *s)
{
    eng_gexpr year = eng_gb_repeat(s->b, digit(s), 4, 4);
    eng_gexpr day28 = ALT(s, E2(s, false, lit(s, "0"), rng(s, '1', '9')), E2(s, false, lit(s, "1"), digit(s)),
                          E2(s, false, lit(s, "2"), rng(s, '0', '8')));
    eng_gexpr month = ALT(s, E2(s, false, lit(s, "0"), rng(s, '1', '9')), E2(s, false, lit(s, "1"), rng(s, '0', '2')));
    eng_gexpr not_feb = ALT(s, E2(s, false, lit(s, "0"), ALT(s, lit(s, "1"), rng(s, '3', '9'))),
                            E2(s, false, lit(s, "1"), rng(s, '0', '2')));
    eng_gexpr long_month = ALT(s, lit(s, "01"), lit(s, "03"), lit(s, "05"), lit(s, "07"), lit(s, "08"), lit(s, "10"), lit(s, "12"));
    eng_gexpr md = ALT(s, SEQ(s, month, lit(s, "-"), day28), SEQ(s, not_feb, lit(s, "-"), ALT(s, lit(s, "29"), lit(s, "30"))),
                       E2(s, false, long_month, lit(s, "-31")));
    /* leap years: the last two digits a non-zero multiple of 4, or 00 after a multiple of 4 */
    eng_gexpr even = ALT(s, lit(s, "0"), lit(s, "2"), lit(s, "4"), lit(s, "6"), lit(s, "8"));
    eng_gexpr odd = ALT(s, lit(s, "1"), lit(s, "3"), lit(s, "5"), lit(s, "7"), lit(s, "9"));
    eng_gexpr m4 = ALT(s, E2(s, false, even, ALT(s, lit(s, "0"), lit(s, "4"), lit(s, "8"))),
                       E2(s, false, odd, ALT(s, lit(s, "2"), lit(s, "6"))));
    eng_gexpr even2 = ALT(s, lit(s, "2"), lit(s, "4"), lit(s, "6"), lit(s, "8"));
    eng_gexpr odd2 = ALT(s, lit(s, "1"), lit(s, "3"), lit(s, "5"), lit(s, "7"), lit(s, "9"));
    eng_gexpr m4nz = ALT(s, E2(s, false, lit(s, "0"), ALT(s, lit(s, "4"), lit(s, "8"))),
                         E2(s, false, even2, ALT(s, lit(s, "0"), lit(s, "4"), lit(s, "8"))),
                         E2(s, false, odd2, ALT(s, lit(s, "2"), lit(s, "6"))));
    eng_gexpr leap = ALT(s, SEQ(s, digit(s), digit(s), m4nz), E2(s, false, m4, lit(s, "00")));
    return ALT(s, SEQ(s, year, lit(s, "-"), md), E2(s, false, leap, lit(s, "-02-29")));
}

static eng_gexpr time_expr(sc *s)
{
    eng_gexpr hh = E2(s, true, E2(s, false, rng(s, '0', '1'), digit(s)), E2(s, false, lit(s, "2"), rng(s, '0', '3')));
    eng_gexpr hh2 = E2(s, true, E2(s, false, rng(s, '0', '1'), digit(s)), E2(s, false, lit(s, "2"), rng(s, '0', '3')));
    eng_gexpr mm = E2(s, false, rng(s, '0', '5'), digit(s));
    eng_gexpr mm2 = E2(s, false, rng(s, '0', '5'), digit(s));
    eng_gexpr ss = E2(s, false, rng(s, '0', '5'), digit(s));
    eng_gexpr frac = opt(s, E2(s, false, lit(s, "."), eng_gb_repeat(s->b, digit(s), 1, 9)));
    eng_gexpr tz = E2(s, true, lit(s, "Z"), SEQ(s, ALT(s, lit(s, "+"), lit(s, "-")), hh2, lit(s, ":"), mm2));
    return SEQ(s, hh, lit(s, ":"), mm, lit(s, ":"), ss, frac, tz);
}

static eng_gexpr uuid_expr(sc *s)
{
    eng_gexpr h[5];
    static const uint32_t len[5] = {8, 4, 4, 4, 12};
    for (int i = 0; i < 5; i++)
        h[i] = eng_gb_repeat(s->b, E2(s, true, digit(s), rng(s, 'a', 'f')), len[i], len[i]);
    return SEQ(s, h[0], lit(s, "-"), h[1], lit(s, "-"), h[2], lit(s, "-"), h[3], lit(s, "-"), h[4]);
}

/* ---- keys that differ from the declared property names ---- */

/* Any rest of a character from UTF-8 state U whose bytes are not one of the N suffixes X (with lengths XL). */
static eng_gexpr u8_except(sc *s, int u, const char **x, const size_t *xl, size_t n, bool *none)
{
    eng_gexpr alts[64];
    size_t na = 0;
    for (size_t i = 0; i < sizeof u8 / sizeof u8[0] && !s->rc; i++) {
        if (u8[i].from != u)
            continue;
        unsigned lo = u8[i].lo, hi = u8[i].hi;
        /* bytes of this range that start an excluded suffix, ascending */
        unsigned at = lo;
        for (unsigned byte = lo; byte <= hi + 1u; byte++) {
            bool starts = false;
            for (size_t k = 0; k < n && byte <= hi && !starts; k++)
                starts = xl[k] > 0 && (uint8_t)x[k][0] == byte;
            if (!starts && byte <= hi)
                continue;
            if (at < byte && na < 62)
                alts[na++] = E2(s, false, eng_gb_range(s->b, (uint8_t)at, (uint8_t)(byte - 1)), u8_rest(s, u8[i].to));
            at = byte + 1;
            if (byte > hi)
                break;
            /* the suffixes after this byte */
            const char *sx[64];
            size_t sl[64], sn = 0;
            bool whole = false;
            for (size_t k = 0; k < n; k++)
                if (xl[k] > 0 && (uint8_t)x[k][0] == byte) {
                    if (xl[k] == 1)
                        whole = true;
                    else if (sn < 64) {
                        sx[sn] = x[k] + 1;
                        sl[sn++] = xl[k] - 1;
                    }
                }
            if (whole || u8[i].to < 0)
                continue; /* the character is excluded whole */
            bool sub_none = false;
            eng_gexpr rest = u8_except(s, u8[i].to, sx, sl, sn, &sub_none);
            if (!sub_none && na < 62)
                alts[na++] = E2(s, false, eng_gb_range(s->b, (uint8_t)byte, (uint8_t)byte), rest);
        }
    }
    *none = na == 0;
    return na ? eng_gb_alt(s->b, alts, na) : -1;
}

static size_t u8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Key characters after PREFIX of the sorted NAMES[0..n) that share it (D bytes, on a character boundary). */
static eng_gexpr key_notin(sc *s, const char **names, size_t n, size_t d)
{
    size_t cap = 2 * n + 2, na = 0;
    eng_gexpr *alts = malloc(cap * sizeof *alts);
    const char **cx = malloc((n + 1) * sizeof *cx);
    size_t *cl = malloc((n + 1) * sizeof *cl);
    eng_gexpr out = -1;
    if (!alts || !cx || !cl) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        goto out;
    }
    bool is_name = false;
    for (size_t i = 0; i < n; i++)
        is_name |= strlen(names[i]) == d;
    if (!is_name)
        alts[na++] = eng_gb_empty(s->b);
    size_t nc = 0;
    for (size_t i = 0; i < n && !s->rc;) {
        if (strlen(names[i]) == d) {
            i++;
            continue;
        }
        size_t len = u8_len((unsigned char)names[i][d]);
        size_t j = i;
        while (j < n && strlen(names[j]) >= d + len && !memcmp(names[j] + d, names[i] + d, len))
            j++;
        cx[nc] = names[i] + d;
        cl[nc++] = len;
        alts[na++] = E2(s, false, eng_gb_bytes(s->b, names[i] + d, len), key_notin(s, names + i, j - i, d + len));
        i = j;
    }
    bool none = false;
    eng_gexpr other = u8_except(s, 0, cx, cl, nc, &none);
    if (!none)
        alts[na++] = E2(s, false, other, eng_gb_ref(s->b, s->r_keychars));
    out = eng_gb_alt(s->b, alts, na);
out:
    free(alts);
    free(cx);
    free(cl);
    return out;
}

/* A key that is none of NAMES: any string, or, when some name could collide, one without escapes. */
static eng_gexpr extra_key(sc *s, const char **names, size_t n)
{
    /* a name that needs escapes never equals such a key */
    const char **keep = malloc((n + 1) * sizeof *keep);
    if (!keep) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        return -1;
    }
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        bool plain = true;
        for (const unsigned char *p = (const unsigned char *)names[i]; *p && plain; p++)
            plain = *p >= 0x20 && *p != '"' && *p != '\\';
        if (plain)
            keep[nk++] = names[i];
    }
    if (nk == 0) {
        /* nothing to exclude: any string, sharing the value strings' cached states */
        free(keep);
        return string_expr(s, 0, ENG_GRAMMAR_INF);
    }
    if (s->r_keychars < 0) {
        s->r_keychars = eng_gb_rule(s->b);
        eng_gb_define_loop(s->b, s->r_keychars, u8_rest(s, 0), 0, ENG_GRAMMAR_INF);
    }
    qsort(keep, nk, sizeof *keep, cmp_str);
    eng_gexpr k = SEQ(s, lit(s, "\""), key_notin(s, keep, nk, 0), lit(s, "\""));
    free(keep);
    return k;
}

/* ---- schemas ---- */

static eng_gexpr compile(sc *s, const json_t *schema);

/* A rule whose body is SUBSCHEMA (at pointer segment SEG below the current one); a call of it. */
static eng_gexpr sub_rule(sc *s, const json_t *sub, const char *seg, size_t index)
{
    size_t old = seg ? ptr_push(s, seg) : ptr_push_index(s, index);
    int32_t r = eng_gb_rule(s->b);
    s->depth++;
    eng_gb_define(s->b, r, compile(s, sub));
    s->depth--;
    ptr_pop(s, old);
    return eng_gb_ref(s->b, r);
}

static bool get_count(sc *s, const json_t *schema, const char *key, uint32_t limit, uint32_t *out)
{
    const json_t *v = json_object_get(schema, key);
    if (!v)
        return false;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(s, API_SCHEMA_EINVALID, key, "\"%s\" must be a non-negative integer", key);
        return false;
    }
    if (json_integer_value(v) > (json_int_t)limit) {
        fail(s, API_SCHEMA_ETOOBIG, key, "\"%s\" is above the limit of %u", key, limit);
        return false;
    }
    *out = (uint32_t)json_integer_value(v);
    return true;
}

static eng_gexpr string_schema(sc *s, const json_t *schema)
{
    uint32_t min = 0, max = ENG_GRAMMAR_INF;
    bool has_min = get_count(s, schema, "minLength", API_SCHEMA_MAX_LENGTH, &min);
    bool has_max = get_count(s, schema, "maxLength", API_SCHEMA_MAX_LENGTH, &max);
    if (s->rc)
        return -1;
    const json_t *fmt = json_object_get(schema, "format");
    if (fmt) {
        if (!json_is_string(fmt)) {
            fail(s, API_SCHEMA_EINVALID, "format", "\"format\" must be a string");
            return -1;
        }
        if (has_min || has_max) {
            fail(s, API_SCHEMA_EUNSUPPORTED, has_min ? "minLength" : "maxLength",
                 "length bounds beside \"format\" are not supported");
            return -1;
        }
        const char *f = json_string_value(fmt);
        eng_gexpr body;
        if (!strcmp(f, "date-time"))
            body = SEQ(s, date_expr(s), lit(s, "T"), time_expr(s));
        else if (!strcmp(f, "date"))
            body = date_expr(s);
        else if (!strcmp(f, "uuid"))
            body = uuid_expr(s);
        else {
            fail(s, API_SCHEMA_EUNSUPPORTED, "format", "format \"%.64s\" is not supported (date-time, date, uuid are)", f);
            return -1;
        }
        return SEQ(s, lit(s, "\""), body, lit(s, "\""));
    }
    if (min > max) {
        fail(s, API_SCHEMA_EEMPTY, "minLength", "minLength %u is above maxLength %u", min, max);
        return -1;
    }
    return string_expr(s, min, max);
}

static eng_gexpr array_schema(sc *s, const json_t *schema)
{
    uint32_t min = 0, max = ENG_GRAMMAR_INF;
    get_count(s, schema, "minItems", API_SCHEMA_MAX_ITEMS, &min);
    get_count(s, schema, "maxItems", API_SCHEMA_MAX_ITEMS, &max);
    const json_t *items = json_object_get(schema, "items");
    const json_t *prefix = json_object_get(schema, "prefixItems");
    if (s->rc)
        return -1;
    if (prefix && !json_is_array(prefix)) {
        fail(s, API_SCHEMA_EINVALID, "prefixItems", "\"prefixItems\" must be an array of schemas");
        return -1;
    }
    if (items && !json_is_object(items) && !json_is_boolean(items)) {
        fail(s, API_SCHEMA_EINVALID, "items", "\"items\" must be a schema");
        return -1;
    }
    size_t m = prefix ? json_array_size(prefix) : 0;
    if (m > API_SCHEMA_MAX_ITEMS) {
        fail(s, API_SCHEMA_ETOOBIG, "prefixItems", "more than %d prefixItems", API_SCHEMA_MAX_ITEMS);
        return -1;
    }
    bool more = !items || !json_is_false(items);
    if (!more && max > m)
        max = (uint32_t)m;
    if (m > max)
        m = max;
    if (min > max) {
        fail(s, API_SCHEMA_EEMPTY, "minItems", "minItems %u is above the %u items allowed", min, max);
        return -1;
    }
    eng_gexpr *pre = calloc(m + 1, sizeof *pre);
    if (!pre) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        return -1;
    }
    size_t old = ptr_push(s, "prefixItems");
    for (size_t j = 0; j < m; j++)
        pre[j] = sub_rule(s, json_array_get(prefix, j), NULL, j);
    ptr_pop(s, old);
    /* the items after the prefix */
    eng_gexpr tail = eng_gb_empty(s->b);
    if (more && max > m) {
        eng_gexpr item = items ? sub_rule(s, items, "items", 0) : eng_gb_ref(s->b, value_rule(s));
        uint32_t lo = min > m ? min - (uint32_t)m : 0;
        uint32_t hi = max == ENG_GRAMMAR_INF ? ENG_GRAMMAR_INF : max - (uint32_t)m;
        if (m == 0) {
            eng_gexpr rest = eng_gb_repeat(s->b, E2(s, false, sep(s), item), lo > 0 ? lo - 1 : 0,
                                           hi == ENG_GRAMMAR_INF ? hi : hi - 1);
            tail = E2(s, false, item, rest);
            if (lo == 0)
                tail = opt(s, tail);
        } else {
            tail = eng_gb_repeat(s->b, E2(s, false, sep(s), item), lo, hi);
        }
    }
    /* the prefix, nested from the end: item j may be the last when j >= min */
    for (size_t j = m; j-- > 0;) {
        eng_gexpr e = E2(s, false, j == 0 ? pre[j] : E2(s, false, sep(s), pre[j]), tail);
        tail = j >= min ? opt(s, e) : e;
    }
    free(pre);
    return SEQ(s, lit(s, "["), tail, lit(s, "]"));
}

static bool in_required(const json_t *req, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(req, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), name))
            return true;
    return false;
}

/* The member "NAME": VALUE, the key as JSON writes it. */
static eng_gexpr member(sc *s, const char *name, eng_gexpr value)
{
    json_t *js = json_string(name);
    char *k = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!k) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        return -1;
    }
    eng_gexpr e = SEQ(s, lit(s, k), colon(s), value);
    free(k);
    return e;
}

static eng_gexpr object_schema(sc *s, const json_t *schema)
{
    const json_t *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required");
    const json_t *addl = json_object_get(schema, "additionalProperties");
    if (props && !json_is_object(props)) {
        fail(s, API_SCHEMA_EINVALID, "properties", "\"properties\" must be an object");
        return -1;
    }
    if (req && !json_is_array(req)) {
        fail(s, API_SCHEMA_EINVALID, "required", "\"required\" must be an array of strings");
        return -1;
    }
    size_t i;
    const json_t *v;
    if (req)
        json_array_foreach(req, i, v) {
            if (!json_is_string(v)) {
                fail(s, API_SCHEMA_EINVALID, "required", "\"required\" must be an array of strings");
                return -1;
            }
        }
    if (addl && !json_is_object(addl) && !json_is_boolean(addl)) {
        fail(s, API_SCHEMA_EINVALID, "additionalProperties", "\"additionalProperties\" must be a schema");
        return -1;
    }
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    if (np + nr > API_SCHEMA_MAX_PROPERTIES) {
        fail(s, API_SCHEMA_ETOOBIG, props ? "properties" : "required", "more than %d properties", API_SCHEMA_MAX_PROPERTIES);
        return -1;
    }
    eng_gexpr *items = calloc(np + nr + 1, sizeof *items);
    bool *optional = calloc(np + nr + 1, sizeof *optional);
    const char **names = calloc(np + nr + 1, sizeof *names);
    eng_gexpr out = -1;
    if (!items || !optional || !names) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        goto out;
    }
    size_t n = 0;
    if (props) {
        size_t old = ptr_push(s, "properties");
        const char *key;
        json_t *sub;
        json_object_foreach((json_t *)props, key, sub) {
            items[n] = member(s, key, sub_rule(s, sub, key, 0));
            optional[n] = !req || !in_required(req, key);
            names[n++] = key;
        }
        ptr_pop(s, old);
    }
    /* required names "properties" does not list: values as additionalProperties says */
    bool closed = addl && json_is_false(addl);
    if (req)
        json_array_foreach(req, i, v) {
            const char *name = json_string_value(v);
            bool listed = false;
            for (size_t k = 0; k < n && !listed; k++)
                listed = !strcmp(names[k], name);
            if (listed)
                continue;
            if (closed) {
                fail(s, API_SCHEMA_EEMPTY, "required", "required property \"%.64s\" is not allowed by additionalProperties false", name);
                goto out;
            }
            eng_gexpr value = json_is_object(addl) ? sub_rule(s, addl, "additionalProperties", 0) : eng_gb_ref(s->b, value_rule(s));
            items[n] = member(s, name, value);
            optional[n] = false;
            names[n++] = name;
        }
    /* other members: with a schema, or anything when the object lists no properties */
    bool extra = json_is_object(addl) || (!props && (!addl || json_is_true(addl)));
    /* member counts: only for maps (no properties, no required), where they bound the other members */
    uint32_t pmin = 0, pmax = ENG_GRAMMAR_INF;
    bool has_pmin = get_count(s, schema, "minProperties", API_SCHEMA_MAX_ITEMS, &pmin);
    bool has_pmax = get_count(s, schema, "maxProperties", API_SCHEMA_MAX_ITEMS, &pmax);
    if (s->rc)
        goto out;
    if ((has_pmin || has_pmax) && (n > 0 || !extra)) {
        fail(s, API_SCHEMA_EUNSUPPORTED, has_pmin ? "minProperties" : "maxProperties",
             "\"%s\" is supported only for objects without properties or required",
             has_pmin ? "minProperties" : "maxProperties");
        goto out;
    }
    if (pmin > pmax) {
        fail(s, API_SCHEMA_EEMPTY, "minProperties", "minProperties %u is above maxProperties %u", pmin, pmax);
        goto out;
    }
    size_t n_items = n;
    if (extra && pmax > 0) {
        eng_gexpr value = json_is_object(addl) ? sub_rule(s, addl, "additionalProperties", 0) : eng_gb_ref(s->b, value_rule(s));
        eng_gexpr m = SEQ(s, extra_key(s, names, n), colon(s), value);
        items[n_items] = E2(s, false, m, eng_gb_repeat(s->b, E2(s, false, sep(s), m), pmin > 0 ? pmin - 1 : 0,
                                                       pmax == ENG_GRAMMAR_INF ? pmax : pmax - 1));
        optional[n_items++] = pmin == 0;
    }
    out = SEQ(s, lit(s, "{"), eng_gb_list(s->b, items, optional, n_items, sep(s)), lit(s, "}"));
out:
    free(items);
    free(optional);
    free(names);
    return out;
}

static int value_types(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return T_OBJ;
    case JSON_ARRAY:
        return T_ARR;
    case JSON_STRING:
        return T_STR;
    case JSON_INTEGER:
        return T_INT | T_NUM;
    case JSON_REAL: {
        /* A number with no fraction is an integer (JSON Schema). Every double
         * of magnitude 2^53 or more is one, and only below that is the cast
         * to long long defined for all of them. */
        double d = json_real_value(v);
        if (!isfinite(d))
            return T_NUM;
        if (fabs(d) >= 0x1p53)
            return T_INT | T_NUM;
        return d == (double)(long long)d ? T_INT | T_NUM : T_NUM;
    }
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOL;
    case JSON_NULL:
        return T_NULL;
    }
    return 0;
}

/* enum and const: each value as compact JSON, those of the allowed types. */
static eng_gexpr literal_schema(sc *s, const json_t *schema, int types)
{
    const json_t *c = json_object_get(schema, "const");
    const json_t *e = json_object_get(schema, "enum");
    const char *kw = c ? "const" : "enum";
    if (c && e) {
        fail(s, API_SCHEMA_EUNSUPPORTED, "const", "\"const\" beside \"enum\" is not supported");
        return -1;
    }
    if (e && !json_is_array(e)) {
        fail(s, API_SCHEMA_EINVALID, "enum", "\"enum\" must be an array");
        return -1;
    }
    size_t n = c ? 1 : json_array_size(e);
    if (n > API_SCHEMA_MAX_ENUM) {
        fail(s, API_SCHEMA_ETOOBIG, "enum", "more than %d enum values", API_SCHEMA_MAX_ENUM);
        return -1;
    }
    eng_gexpr *alts = calloc(n + 1, sizeof *alts);
    if (!alts) {
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        return -1;
    }
    size_t na = 0;
    for (size_t i = 0; i < n && !s->rc; i++) {
        const json_t *v = c ? c : json_array_get(e, i);
        if (!(value_types(v) & types))
            continue;
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) {
            fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
            break;
        }
        s->literal_bytes += strlen(t);
        if (s->literal_bytes > API_SCHEMA_MAX_LITERAL)
            fail(s, API_SCHEMA_ETOOBIG, kw, "enum and const values longer than %d bytes in all", API_SCHEMA_MAX_LITERAL);
        alts[na++] = lit(s, t);
        free(t);
    }
    eng_gexpr out = -1;
    if (!s->rc && na == 0)
        fail(s, API_SCHEMA_EEMPTY, kw, "no \"%s\" value has an allowed type", kw);
    else if (!s->rc)
        out = eng_gb_alt(s->b, alts, na);
    free(alts);
    return out;
}

static const json_t *resolve(sc *s, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *at = s->root;
    const char *p = ref + 1;
    char seg[512];
    while (*p) {
        if (*p != '/')
            return NULL;
        p++;
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '0') {
                seg[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                seg[n++] = '/';
                p += 2;
            } else {
                seg[n++] = *p++;
            }
        }
        seg[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            unsigned long idx = strtoul(seg, &end, 10);
            at = (*seg && !*end) ? json_array_get(at, idx) : NULL;
        } else {
            return NULL;
        }
        if (!at)
            return NULL;
    }
    return at;
}

static eng_gexpr ref_schema(sc *s, const json_t *refv)
{
    if (!json_is_string(refv)) {
        fail(s, API_SCHEMA_EINVALID, "$ref", "\"$ref\" must be a string");
        return -1;
    }
    const char *ref = json_string_value(refv);
    for (size_t i = 0; i < s->n_refs; i++)
        if (s->refs[i].root == s->root && !strcmp(s->refs[i].ref, ref))
            return eng_gb_ref(s->b, s->refs[i].rule);
    const json_t *target = resolve(s, ref);
    if (!target) {
        fail(s, API_SCHEMA_EINVALID, "$ref", "\"$ref\" \"%.128s\" names nothing in this schema", ref);
        return -1;
    }
    if (s->n_refs == s->cap_refs) {
        size_t cap = s->cap_refs ? 2 * s->cap_refs : 8;
        refent *r = realloc(s->refs, cap * sizeof *r);
        if (!r) {
            fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
            return -1;
        }
        s->refs = r;
        s->cap_refs = cap;
    }
    refent *e = &s->refs[s->n_refs];
    /* where the target is, relative to the document's root (compile_refs adds a tool's prefix) */
    const char *hash = ref + 1;
    e->root = s->root;
    e->ref = strdup(ref);
    e->ptr = strdup(hash);
    e->target = target;
    e->rule = eng_gb_rule(s->b);
    if (!e->ref || !e->ptr) {
        free(e->ref);
        free(e->ptr);
        fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
        return -1;
    }
    s->n_refs++;
    return eng_gb_ref(s->b, e->rule);
}

static eng_gexpr compile(sc *s, const json_t *schema)
{
    if (s->rc)
        return -1;
    if (s->depth > API_SCHEMA_MAX_DEPTH) {
        fail(s, API_SCHEMA_ETOOBIG, NULL, "schema nested deeper than %d levels", API_SCHEMA_MAX_DEPTH);
        return -1;
    }
    if (++s->nodes > API_SCHEMA_MAX_NODES) {
        fail(s, API_SCHEMA_ETOOBIG, NULL, "more than %d subschemas", API_SCHEMA_MAX_NODES);
        return -1;
    }
    if (json_is_true(schema))
        return eng_gb_ref(s->b, value_rule(s));
    if (json_is_false(schema)) {
        fail(s, API_SCHEMA_EEMPTY, NULL, "the schema false admits no value");
        return -1;
    }
    if (!json_is_object(schema)) {
        fail(s, API_SCHEMA_EINVALID, NULL, "a schema must be an object or a boolean");
        return -1;
    }
    unsigned seen = 0;
    const char *key, *first_kw[16] = {0};
    json_t *val;
    json_object_foreach((json_t *)schema, key, val) {
        int k = keyword_kind(key);
        if (k == K_NONE) {
            fail(s, API_SCHEMA_EUNSUPPORTED, key, "unsupported keyword \"%.48s\"", key);
            return -1;
        }
        seen |= 1u << k;
        if (!first_kw[k])
            first_kw[k] = key;
    }
    /* $ref, anyOf/oneOf, enum/const stand with annotations only ("type" may narrow enum and const) */
    unsigned annot = 1u << K_ANNOT | 1u << K_DEFS;
    static const int alone[] = {K_REF, K_ANYOF, K_ENUM, K_CONST};
    for (size_t a = 0; a < sizeof alone / sizeof alone[0]; a++) {
        int k = alone[a];
        if (!(seen & (1u << k)))
            continue;
        unsigned allowed = annot | 1u << k;
        if (k == K_ENUM || k == K_CONST)
            allowed |= 1u << K_TYPE | 1u << K_ENUM | 1u << K_CONST;
        for (int o = 0; o < 16; o++)
            if ((seen & (1u << o)) && !(allowed & (1u << o))) {
                fail(s, API_SCHEMA_EUNSUPPORTED, first_kw[o], "\"%s\" beside \"%s\" is not supported", first_kw[o],
                     first_kw[k]);
                return -1;
            }
    }
    if (seen & (1u << K_REF))
        return ref_schema(s, json_object_get(schema, "$ref"));
    if (seen & (1u << K_ANYOF)) {
        const json_t *any = json_object_get(schema, "anyOf");
        const char *kw = "anyOf";
        if (!any) {
            any = json_object_get(schema, "oneOf");
            kw = "oneOf";
        } else if (json_object_get(schema, "oneOf")) {
            fail(s, API_SCHEMA_EUNSUPPORTED, "oneOf", "\"oneOf\" beside \"anyOf\" is not supported");
            return -1;
        }
        if (!json_is_array(any) || json_array_size(any) == 0) {
            fail(s, API_SCHEMA_EINVALID, kw, "\"%s\" must be a non-empty array of schemas", kw);
            return -1;
        }
        size_t n = json_array_size(any);
        eng_gexpr *alts = calloc(n, sizeof *alts);
        if (!alts) {
            fail(s, API_SCHEMA_ENOMEM, NULL, "out of memory");
            return -1;
        }
        size_t old = ptr_push(s, kw);
        for (size_t i = 0; i < n; i++)
            alts[i] = sub_rule(s, json_array_get(any, i), NULL, i);
        ptr_pop(s, old);
        eng_gexpr e = eng_gb_alt(s->b, alts, n);
        free(alts);
        return e;
    }
    int types = 0;
    const json_t *type = json_object_get(schema, "type");
    if (type) {
        const json_t *list = type;
        size_t n = json_is_array(type) ? json_array_size(type) : 1;
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_is_array(list) ? json_array_get(list, i) : list;
            const char *name = json_is_string(t) ? json_string_value(t) : "";
            static const struct {
                const char *name;
                int bits;
            } names[] = {{"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
                         {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
            int bits = 0;
            for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
                if (!strcmp(names[k].name, name))
                    bits = names[k].bits;
            if (!bits) {
                fail(s, API_SCHEMA_EINVALID, "type", "\"type\" names no JSON type (object, array, string, number, integer, boolean, null)");
                return -1;
            }
            types |= bits;
        }
        if (!types) {
            fail(s, API_SCHEMA_EINVALID, "type", "\"type\" is an empty list");
            return -1;
        }
    }
    if (seen & (1u << K_ENUM | 1u << K_CONST))
        return literal_schema(s, schema, types ? types : T_ALL);
    if (!types) {
        /* without "type", the keywords present say what to generate; none: any value */
        if (seen & (1u << K_OBJ))
            types |= T_OBJ;
        if (seen & (1u << K_ARR))
            types |= T_ARR;
        if (seen & (1u << K_STR))
            types |= T_STR;
        if (!types)
            return eng_gb_ref(s->b, value_rule(s));
    }
    eng_gexpr alts[8];
    size_t na = 0;
    if (types & T_OBJ)
        alts[na++] = object_schema(s, schema);
    if (types & T_ARR)
        alts[na++] = array_schema(s, schema);
    if (types & T_STR)
        alts[na++] = string_schema(s, schema);
    if (types & T_NUM)
        alts[na++] = eng_gb_ref(s->b, number_rule(s, false));
    else if (types & T_INT)
        alts[na++] = eng_gb_ref(s->b, number_rule(s, true));
    if (types & T_BOOL)
        alts[na++] = ALT(s, lit(s, "true"), lit(s, "false"));
    if (types & T_NULL)
        alts[na++] = lit(s, "null");
    return s->rc ? -1 : eng_gb_alt(s->b, alts, na);
}

/* Compiles every $ref target named so far (and those they name). */
static void compile_refs(sc *s, size_t from, const char *prefix)
{
    for (size_t i = from; i < s->n_refs && !s->rc; i++) {
        s->root = s->refs[i].root;
        snprintf(s->ptr, sizeof s->ptr, "%s%s", prefix, s->refs[i].ptr);
        s->plen = strlen(s->ptr);
        s->depth = 0;
        int32_t r = s->refs[i].rule;
        eng_gb_define(s->b, r, compile(s, s->refs[i].target));
    }
}

static void sc_init(sc *s, api_schema_error *err)
{
    memset(s, 0, sizeof *s);
    s->err = err;
    s->r_value = s->r_number = s->r_integer = s->r_keychars = -1;
    if (err)
        memset(err, 0, sizeof *err);
}

/* Finishes the grammar with root ROOT and frees the compiler's state. */
static int sc_finish(sc *s, int32_t root, eng_grammar **out)
{
    char msg[160] = "";
    int rc = s->rc;
    if (!rc && s->b) {
        int grc = eng_gbuild_finish(s->b, root, out, msg, sizeof msg);
        if (grc) {
            s->ptr[0] = '\0';
            s->plen = 0;
            rc = grc == ENG_GRAMMAR_ETOOBIG ? API_SCHEMA_ETOOBIG
                 : grc == ENG_GRAMMAR_EEMPTY ? API_SCHEMA_EEMPTY
                 : grc == ENG_GRAMMAR_ENOMEM ? API_SCHEMA_ENOMEM
                                             : API_SCHEMA_EINVALID;
            fail(s, rc, NULL, "%s", msg);
        }
    } else if (!rc) {
        rc = API_SCHEMA_ENOMEM;
        fail(s, rc, NULL, "out of memory");
    }
    for (size_t i = 0; i < s->n_refs; i++) {
        free(s->refs[i].ref);
        free(s->refs[i].ptr);
    }
    free(s->refs);
    free(s->loops);
    eng_gbuild_free(s->b);
    return rc;
}

int api_schema_compile(const json_t *schema, eng_grammar **out, api_schema_error *err)
{
    sc s;
    sc_init(&s, err);
    *out = NULL;
    s.b = eng_gbuild_new();
    int32_t root = -1;
    if (s.b) {
        s.root = schema;
        root = eng_gb_rule(s.b);
        eng_gb_define(s.b, root, compile(&s, schema));
        compile_refs(&s, 0, "");
    }
    return sc_finish(&s, root, out);
}

int api_schema_json_object(eng_grammar **out, api_schema_error *err)
{
    json_t *obj = json_pack("{s:s}", "type", "object");
    if (!obj)
        return API_SCHEMA_ENOMEM;
    int rc = api_schema_compile(obj, out, err);
    json_decref(obj);
    return rc;
}

int api_schema_tools(const api_tool_spec *tools, size_t n, api_tools_mode mode, bool parallel, int32_t open_id,
                     int32_t close_id, eng_grammar **out, api_schema_error *err)
{
    sc s;
    sc_init(&s, err);
    *out = NULL;
    int32_t root = -1;
    if (n == 0) {
        fail(&s, API_SCHEMA_EINVALID, NULL, "no tools to call");
        return s.rc;
    }
    s.b = eng_gbuild_new();
    eng_gexpr *alts = calloc(n, sizeof *alts);
    if (s.b && alts) {
        for (size_t i = 0; i < n && !s.rc; i++) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "/tools/%zu/function/parameters", i);
            snprintf(s.ptr, sizeof s.ptr, "%s", prefix);
            s.plen = strlen(s.ptr);
            s.depth = 0;
            size_t first_ref = s.n_refs;
            json_t *any = NULL;
            const json_t *params = tools[i].parameters;
            if (!params)
                params = any = json_pack("{s:s}", "type", "object");
            s.root = params;
            int32_t r = eng_gb_rule(s.b);
            eng_gb_define(s.b, r, params ? compile(&s, params) : -1);
            compile_refs(&s, first_ref, prefix);
            json_decref(any);
            if (!tools[i].name || !*tools[i].name) {
                fail(&s, API_SCHEMA_EINVALID, NULL, "tool %zu has no name", i);
                break;
            }
            json_t *js = json_string(tools[i].name);
            char *name = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
            json_decref(js);
            if (!name) {
                fail(&s, API_SCHEMA_EINVALID, NULL, "tool %zu: the name is not UTF-8 or memory ran out", i);
                break;
            }
            alts[i] = SEQ(&s, lit(&s, name), lit(&s, ", \"arguments\": "), eng_gb_ref(s.b, r));
            free(name);
        }
        eng_gexpr call = SEQ(&s, eng_gb_token(s.b, open_id), lit(&s, "\n{\"name\": "), eng_gb_alt(s.b, alts, n),
                             lit(&s, "}\n"), eng_gb_token(s.b, close_id));
        eng_gexpr calls = parallel ? E2(&s, false, call, eng_gb_repeat(s.b, E2(&s, false, lit(&s, "\n"), call), 0, ENG_GRAMMAR_INF))
                                   : call;
        if (mode == API_TOOLS_AUTO)
            calls = E2(&s, false, eng_gb_avoid(s.b, "<tool_call>", 11), opt(&s, calls));
        root = eng_gb_rule(s.b);
        eng_gb_define(s.b, root, calls);
    }
    free(alts);
    return sc_finish(&s, root, out);
}
