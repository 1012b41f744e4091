/*
 * toolcall: the incremental parser of Qwen3's <tool_call> blocks (see
 * toolcall.h).
 *
 * Called by render.c on the event-loop thread; a parser belongs to one
 * response.
 */
#include "api/toolcall.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
/* What follows the open tag up to the name's opening quote, and between the name and the arguments. */
static const char HEAD[] = "\n{\"name\": \"", MID[] = ", \"arguments\": ";
/* A longer name is not the tools grammar's (OpenAI allows 64 characters): the block stays content. */
#define NAME_MAX_BYTES 1024

enum tc_state { ST_TEXT, ST_HEAD, ST_ARGS };

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

struct api_toolcalls {
    uint64_t seed;
    enum tc_state st;
    buf pend;            /* received, not yet decided */
    buf ws;              /* content whitespace held until text follows it */
    bool seen_text;      /* content other than whitespace went out */
    int n_calls;
    buf out;             /* this feed's event texts */
    struct ev {
        api_tc_kind kind;
        int index;
        size_t id_off, off, len;
    } *ev;
    size_t n_ev, cap_ev;
    api_tc_event *pub;   /* the events handed out */
    size_t cap_pub;
    bool oom;
};

static bool buf_add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

api_toolcalls *api_toolcalls_new(uint64_t seed)
{
    api_toolcalls *t = calloc(1, sizeof *t);
    if (t)
        t->seed = seed;
    return t;
}

void api_toolcalls_free(api_toolcalls *t)
{
    if (!t)
        return;
    free(t->pend.p);
    free(t->ws.p);
    free(t->out.p);
    free(t->ev);
    free(t->pub);
    free(t);
}

int api_toolcalls_count(const api_toolcalls *t)
{
    return t->n_calls;
}

/* Queues an event with the N bytes of S (and ID, a NUL-terminated string, or NULL). */
static void event(api_toolcalls *t, api_tc_kind kind, const char *s, size_t n, const char *id)
{
    if (t->n_ev == t->cap_ev) {
        size_t cap = t->cap_ev ? t->cap_ev * 2 : 8;
        struct ev *e = realloc(t->ev, cap * sizeof *e);
        if (!e) {
            t->oom = true;
            return;
        }
        t->ev = e;
        t->cap_ev = cap;
    }
    struct ev *e = &t->ev[t->n_ev];
    e->kind = kind;
    e->index = t->n_calls - 1;
    e->id_off = t->out.n;
    if (id && !buf_add(&t->out, id, strlen(id) + 1)) {
        t->oom = true;
        return;
    }
    e->off = t->out.n;
    e->len = n;
    if (!buf_add(&t->out, s, n) || !buf_add(&t->out, "", 1)) {
        t->oom = true;
        return;
    }
    e->id_off = id ? e->id_off : SIZE_MAX;
    t->n_ev++;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Content text: leading whitespace dropped, whitespace held until text follows it. */
static void content(api_toolcalls *t, const char *s, size_t n)
{
    size_t end = n;
    while (end > 0 && is_ws(s[end - 1]))
        end--;
    if (end == 0) {
        if (t->seen_text && !buf_add(&t->ws, s, n))
            t->oom = true;
        return;
    }
    size_t start = 0;
    if (!t->seen_text)
        while (is_ws(s[start]))
            start++;
    if (t->ws.n && !buf_add(&t->ws, s + start, end - start))
        t->oom = true;
    if (t->ws.n)
        event(t, API_TC_CONTENT, t->ws.p, t->ws.n, NULL);
    else
        event(t, API_TC_CONTENT, s + start, end - start, NULL);
    t->ws.n = 0;
    t->seen_text = true;
    if (!buf_add(&t->ws, s + end, n - end))
        t->oom = true;
}

size_t api_partial_tag(const char *p, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (n >= k && memcmp(p + n - k, tag, k) == 0)
            return k;
    return 0;
}

/* "call_" and 24 letters and digits from the seed and call I (splitmix64). */
static void call_id(uint64_t seed, int i, char id[30])
{
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    memcpy(id, "call_", 5);
    for (int k = 0; k < 24; k++) {
        if (k % 8 == 0) {
            x += 0x9E3779B97F4A7C15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            seed = z ^ (z >> 31);
        }
        id[5 + k] = digits[seed % 62];
        seed /= 62;
    }
    id[29] = '\0';
}

/*
 * The head of a call at P (N bytes after the open tag): 1 and *USED, *NAME
 * (malloc'd) when complete, 0 when more text may complete it, -1 when it is
 * not the form (the block is then content).
 */
static int parse_head(const char *p, size_t n, bool final, size_t *used, char **name)
{
    size_t hl = strlen(HEAD), ml = strlen(MID);
    if (memcmp(p, HEAD, n < hl ? n : hl) != 0)
        return -1;
    if (n < hl)
        return final ? -1 : 0;
    size_t q = hl;
    while (q < n && p[q] != '"') {
        if (p[q] == '\\')
            q++;
        q++;
    }
    if (q - hl > NAME_MAX_BYTES)
        return -1;
    if (q >= n)
        return final ? -1 : 0;
    size_t rest = n - q - 1;
    if (memcmp(p + q + 1, MID, rest < ml ? rest : ml) != 0)
        return -1;
    if (rest < ml)
        return final ? -1 : 0;
    json_t *s = json_loadb(p + hl - 1, q - hl + 2, JSON_DECODE_ANY, NULL);
    if (!json_is_string(s) || json_string_length(s) == 0) {
        json_decref(s);
        return -1;
    }
    *name = strdup(json_string_value(s));
    json_decref(s);
    *used = q + 1 + ml;
    return *name ? 1 : -1;
}

/* The arguments of P's first K bytes: without the wrapper's end ("}" between whitespace). */
static size_t args_trim(const char *p, size_t k)
{
    while (k > 0 && is_ws(p[k - 1]))
        k--;
    if (k > 0 && p[k - 1] == '}')
        k--;
    while (k > 0 && is_ws(p[k - 1]))
        k--;
    return k;
}

/*
 * Arguments bytes of P, before any close tag, that can go out now: not a
 * possible start of the close tag, nor the wrapper's end. Once the close tag
 * is found, what precedes it is whole (args_trim): a '<' there is text.
 */
static size_t args_ready(const char *p, size_t n)
{
    return args_trim(p, n - api_partial_tag(p, n, CLOSE));
}

/* Decides what it can of the pending text; returns the bytes used. */
static size_t step(api_toolcalls *t, const char *p, size_t n, bool final)
{
    if (t->st == ST_TEXT) {
        const char *hit = memmem(p, n, OPEN, strlen(OPEN));
        if (hit) {
            content(t, p, (size_t)(hit - p));
            t->st = ST_HEAD;
            return (size_t)(hit - p) + strlen(OPEN);
        }
        size_t k = final ? n : n - api_partial_tag(p, n, OPEN);
        content(t, p, k);
        return k;
    }
    if (t->st == ST_HEAD) {
        size_t used = 0;
        char *name = NULL;
        int rc = parse_head(p, n, final, &used, &name);
        if (rc == 0)
            return 0;
        t->st = rc > 0 ? ST_ARGS : ST_TEXT;
        if (rc < 0) {
            /* not a call: the tag is text, and what follows is read as text again */
            content(t, OPEN, strlen(OPEN));
            return 0;
        }
        char id[30];
        call_id(t->seed, t->n_calls, id);
        t->n_calls++;
        event(t, API_TC_BEGIN, name, strlen(name), id);
        free(name);
        return used;
    }
    const char *hit = memmem(p, n, CLOSE, strlen(CLOSE));
    size_t k = hit ? args_trim(p, (size_t)(hit - p)) : final ? n : args_ready(p, n);
    if (k)
        event(t, API_TC_ARGS, p, k, NULL);
    if (!hit)
        return k;
    t->st = ST_TEXT;
    return (size_t)(hit - p) + strlen(CLOSE);
}

int api_toolcalls_feed(api_toolcalls *t, const char *text, size_t len, bool final, const api_tc_event **ev,
                       size_t *n)
{
    *ev = NULL;
    *n = 0;
    t->n_ev = 0;
    t->out.n = 0;
    if (!buf_add(&t->pend, text, len))
        return -1;
    size_t used = 0;
    for (;;) {
        enum tc_state before = t->st;
        size_t u = step(t, t->pend.p + used, t->pend.n - used, final);
        used += u;
        if (t->oom)
            return -1;
        /* done when nothing moved, or (final) when the text ran out outside a call's head */
        if (!u && t->st == before)
            break;
        if (used == t->pend.n && !final)
            break;
        if (used == t->pend.n && t->st != ST_HEAD)
            break;
    }
    memmove(t->pend.p, t->pend.p + used, t->pend.n - used);
    t->pend.n -= used;
    if (t->n_ev > t->cap_pub) {
        api_tc_event *p = realloc(t->pub, t->n_ev * sizeof *p);
        if (!p)
            return -1;
        t->pub = p;
        t->cap_pub = t->n_ev;
    }
    for (size_t i = 0; i < t->n_ev; i++) {
        const struct ev *e = &t->ev[i];
        t->pub[i] = (api_tc_event){.kind = e->kind, .index = e->index, .text = t->out.p + e->off, .len = e->len,
                                   .id = e->id_off == SIZE_MAX ? NULL : t->out.p + e->id_off};
    }
    *ev = t->pub;
    *n = t->n_ev;
    return 0;
}
