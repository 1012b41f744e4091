/*
 * render: OpenAI response bodies and stream chunks (see render.h).
 *
 * Called on the event-loop thread; an api_stream belongs to one request.
 */
#include "api/render.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/toolcall.h"
#include "engine/tokenizer.h"

/* A JSON string of LEN bytes; text that is not valid UTF-8 (it never should
 * be: the detokenizer and the stop matcher cut on character boundaries) is
 * converted the lossy way rather than dropped. */
static json_t *jstr(const char *s, size_t len)
{
    json_t *v = json_stringn(s ? s : "", s ? len : 0);
    if (v)
        return v;
    eng_tok_text t = {0};
    if (eng_tok_utf8_lossy(s, len, &t) != 0) {
        eng_tok_text_free(&t);
        return NULL;
    }
    v = json_stringn(t.s ? t.s : "", t.len);
    eng_tok_text_free(&t);
    return v;
}

/*
 * PRECISION significant digits for reals: jansson's default of 17 prints
 * 0.052 as 0.051999999999999998. Values rounded to three decimals print
 * exactly with 15 (DBL_DIG); sampling values, floats, with 6 (FLT_DIG).
 */
static char *dump_prec(json_t *root, int precision)
{
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(precision));
    json_decref(root);
    return s;
}

static char *dump(json_t *root)
{
    return dump_prec(root, 15);
}

static json_t *usage_json(const api_usage *u)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens);
}

/* Milliseconds and rates to three decimals: finer digits are noise. */
static double round3(double x)
{
    return round(x * 1000.0) / 1000.0;
}

static json_t *timings_json(const api_timings *t)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f}", "queue_ms", round3(t->queue_ms), "prompt_ms",
                     round3(t->prompt_ms), "ttft_ms", round3(t->ttft_ms), "decode_tokens_per_s",
                     round3(t->decode_tokens_per_s), "tpot_ms", round3(t->tpot_ms));
}

/* ---- logprobs ------------------------------------------------------------ */

/* JSON has no infinity: -inf is OpenAI's -9999; NAN (no value) is null. */
static json_t *lp_value(float lp)
{
    if (lp != lp)
        return json_null();
    return json_real(lp > -9999.0f ? (double)lp : -9999.0);
}

static const char *token_bytes(const api_logprobs *lp, int32_t id, size_t *len)
{
    const char *b = lp->tok && id >= 0 ? eng_tok_token_bytes(lp->tok, id, len) : NULL;
    if (!b)
        *len = 0;
    return b ? b : "";
}

static json_t *token_str(const api_logprobs *lp, int32_t id)
{
    size_t n;
    const char *b = token_bytes(lp, id, &n);
    return jstr(b, n);
}

/* Chat's {token, logprob, bytes}. */
static json_t *chat_token(const api_logprobs *lp, int32_t id, float logprob)
{
    size_t n;
    const unsigned char *b = (const unsigned char *)token_bytes(lp, id, &n);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < n; i++)
        json_array_append_new(bytes, json_integer(b[i]));
    return json_pack("{s:o, s:o, s:o}", "token", token_str(lp, id), "logprob", lp_value(logprob), "bytes", bytes);
}

/* Completions' top_logprobs entry: TOP tokens and the chosen one, the first of equal strings kept. */
static json_t *cmpl_top(const api_logprobs *lp, const eng_token_lp *e)
{
    json_t *o = json_object();
    int n = e->n_top < lp->top ? e->n_top : lp->top;
    for (int k = 0; o && k <= n; k++) {
        int32_t id = k < n ? e->top_ids[k] : e->id;
        json_t *key = token_str(lp, id);
        if (key && !json_object_get(o, json_string_value(key)))
            json_object_set_new(o, json_string_value(key), lp_value(k < n ? e->top_lps[k] : e->logprob));
        json_decref(key);
    }
    return o;
}

static json_t *lp_object(api_kind kind)
{
    if (kind == API_KIND_CHAT)
        return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/*
 * Appends one token to O (of lp_object). *CHARS: characters of the text
 * before it, advanced past its own (a generated special token is not in the
 * text; an echoed prompt's is).
 */
static int lp_append(api_kind kind, json_t *o, const api_logprobs *lp, const eng_token_lp *e, bool prompt,
                     int64_t *chars)
{
    size_t n;
    const char *b = token_bytes(lp, e->id, &n);
    int64_t at = *chars;
    if (prompt || !lp->tok || !eng_tok_is_special(lp->tok, e->id))
        for (size_t i = 0; i < n; i++)
            *chars += ((unsigned char)b[i] & 0xC0) != 0x80;
    if (kind == API_KIND_CHAT) {
        json_t *t = chat_token(lp, e->id, e->logprob), *top = json_array();
        int k_max = e->n_top < lp->top ? e->n_top : lp->top;
        for (int k = 0; top && k < k_max; k++)
            json_array_append_new(top, chat_token(lp, e->top_ids[k], e->top_lps[k]));
        if (!t || !top) {
            json_decref(t);
            json_decref(top);
            return API_ENOMEM;
        }
        json_object_set_new(t, "top_logprobs", top);
        return json_array_append_new(json_object_get(o, "content"), t) ? API_ENOMEM : 0;
    }
    bool none = e->logprob != e->logprob;
    int rc = json_array_append_new(json_object_get(o, "tokens"), token_str(lp, e->id));
    rc |= json_array_append_new(json_object_get(o, "token_logprobs"), lp_value(e->logprob));
    rc |= json_array_append_new(json_object_get(o, "top_logprobs"), none ? json_null() : cmpl_top(lp, e));
    rc |= json_array_append_new(json_object_get(o, "text_offset"), json_integer(at));
    return rc ? API_ENOMEM : 0;
}

static json_t *logprobs_json(api_kind kind, const api_logprobs *lp)
{
    json_t *o = lp_object(kind);
    int64_t chars = 0;
    for (size_t i = 0; o && i < lp->n; i++)
        if (lp_append(kind, o, lp, &lp->lps[i], i < lp->n_prompt, &chars) != 0) {
            json_decref(o);
            return NULL;
        }
    return o;
}

static json_t *envelope(api_kind kind, const api_meta *m, bool chunk)
{
    const char *object = kind == API_KIND_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                               : "text_completion";
    json_t *e = json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created", (json_int_t)m->created,
                          "model", m->model);
    if (e && m->fingerprint)
        json_object_set_new(e, "system_fingerprint", json_string(m->fingerprint));
    return e;
}

/* The tool_calls entry of a stream delta for a BEGIN or ARGS event. */
static json_t *tc_delta(const api_tc_event *e)
{
    json_t *fn = e->kind == API_TC_BEGIN ? json_pack("{s:o, s:s}", "name", jstr(e->text, e->len), "arguments", "")
                                         : json_pack("{s:o}", "arguments", jstr(e->text, e->len));
    if (e->kind == API_TC_BEGIN)
        return json_pack("{s:i, s:s, s:s, s:o}", "index", e->index, "id", e->id, "type", "function", "function", fn);
    return json_pack("{s:i, s:o}", "index", e->index, "function", fn);
}

/* A whole answer's content (null when empty) and tool_calls: the events of one feed, joined. */
static int tool_message(const char *text, size_t len, uint64_t seed, json_t **content, json_t **calls)
{
    *content = *calls = NULL;
    api_toolcalls *t = api_toolcalls_new(seed);
    const api_tc_event *ev;
    size_t n = 0, cn = 0;
    if (!t || api_toolcalls_feed(t, text, len, true, &ev, &n) || !(*calls = json_array()))
        goto oom;
    for (size_t i = 0; i < n; i++)
        cn += ev[i].kind == API_TC_CONTENT ? ev[i].len : 0;
    char *c = malloc(cn + 1), *w = c;
    if (!c)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == API_TC_CONTENT) {
            memcpy(w, ev[i].text, ev[i].len);
            w += ev[i].len;
        } else if (ev[i].kind == API_TC_BEGIN) {
            json_array_append_new(*calls, json_pack("{s:s, s:s, s:{s:o, s:s}}", "id", ev[i].id, "type", "function",
                                                    "function", "name", jstr(ev[i].text, ev[i].len), "arguments", ""));
        } else {
            /* text fed at once: each call's arguments come as one event */
            json_t *fn = json_object_get(json_array_get(*calls, (size_t)ev[i].index), "function");
            json_object_set_new(fn, "arguments", jstr(ev[i].text, ev[i].len));
        }
    }
    *content = cn ? jstr(c, cn) : json_null();
    free(c);
    if (!*content)
        goto oom;
    api_toolcalls_free(t);
    return 0;
oom:
    json_decref(*calls);
    *calls = NULL;
    api_toolcalls_free(t);
    return -1;
}

uint64_t api_choice_tool_seed(uint64_t seed, size_t index)
{
    /* choice 0 keeps the request's seed, so n = 1 is unchanged; the odd
     * multiplier makes every index a different seed */
    return seed ^ (uint64_t)index * 0x9e3779b97f4a7c15u;
}

/* The message of a chat choice: content, reasoning_content and, with tools, tool_calls (CHOICE's finish_reason
 * becoming "tool_calls" when there is one). -1 on out-of-memory. */
static int chat_message(json_t *choice, const api_meta *meta, size_t index, const api_choice *c)
{
    api_chat_split sp;
    api_chat_split_reasoning(c->text, c->len, &sp);
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (!msg || json_object_set_new(choice, "message", msg))
        return -1;
    json_t *content = NULL, *calls = NULL;
    if (meta->tool_calls) {
        if (tool_message(c->text + sp.content_off, sp.content_len, api_choice_tool_seed(meta->tool_seed, index),
                         &content, &calls))
            return -1;
    } else if (!(content = jstr(c->text + sp.content_off, sp.content_len))) {
        return -1;
    }
    json_object_set_new(msg, "content", content);
    if (sp.has_reasoning)
        json_object_set_new(msg, "reasoning_content", jstr(c->text + sp.reasoning_off, sp.reasoning_len));
    if (calls && json_array_size(calls)) {
        json_object_set_new(msg, "tool_calls", calls);
        if (!strcmp(c->finish_reason, "stop"))
            json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
    } else {
        json_decref(calls);
    }
    return 0;
}

/* The choice object of a non-streaming body; NULL on out-of-memory. */
static json_t *choice_json(api_kind kind, const api_meta *meta, size_t index, const api_choice *c)
{
    json_t *lps = c->lp ? logprobs_json(kind, c->lp) : json_null();
    json_t *choice = lps ? json_pack("{s:I, s:o, s:s}", "index", (json_int_t)index, "logprobs", lps, "finish_reason",
                                     c->finish_reason)
                         : NULL;
    if (!choice)
        return NULL;
    int rc = kind == API_KIND_CHAT ? chat_message(choice, meta, index, c)
                                   : json_object_set_new(choice, "text", jstr(c->text, c->len));
    if (rc == 0)
        return choice;
    json_decref(choice);
    return NULL;
}

char *api_render_choices(api_kind kind, const api_meta *meta, const api_choice *choices, size_t n,
                         const api_usage *usage, const api_timings *timings)
{
    json_t *root = envelope(kind, meta, false);
    json_t *arr = json_array();
    if (!root || !arr)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        json_t *choice = choice_json(kind, meta, i, &choices[i]);
        if (!choice || json_array_append_new(arr, choice) != 0)
            goto oom;
    }
    json_object_set_new(root, "choices", arr);
    arr = NULL;
    json_object_set_new(root, "usage", usage_json(usage));
    json_object_set_new(root, "timings", timings_json(timings));
    return dump(root);
oom:
    json_decref(root);
    json_decref(arr);
    return NULL;
}

char *api_render_result(api_kind kind, const api_meta *meta, const char *text, size_t len, const char *finish_reason,
                        const api_usage *usage, const api_timings *timings, const api_logprobs *lp)
{
    api_choice c = {text, len, finish_reason, lp};
    return api_render_choices(kind, meta, &c, 1, usage, timings);
}

char *api_render_models(const char *model, int64_t created, int64_t max_len, const eng_sampling *defaults,
                        const char *source)
{
    json_t *root = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id", model, "object",
                             "model", "created", (json_int_t)created, "owned_by", "qwen3d", "max_model_len",
                             (json_int_t)max_len);
    if (!root || !defaults)
        return dump(root);
    const eng_sampling *d = defaults;
    json_t *sampling = json_pack("{s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:f}", "source", source, "temperature",
                                 (double)d->temperature, "top_p", (double)d->top_p, "top_k", (int)d->top_k, "min_p",
                                 (double)d->min_p, "presence_penalty", (double)d->presence_penalty,
                                 "frequency_penalty", (double)d->frequency_penalty, "repetition_penalty",
                                 (double)d->repetition_penalty);
    if (!sampling) {
        json_decref(root);
        return NULL;
    }
    json_object_set_new(json_array_get(json_object_get(root, "data"), 0), "sampling_defaults", sampling);
    return dump_prec(root, 6);
}

char *api_render_tokens(const int32_t *ids, size_t n, int64_t max_model_len, const eng_tok *tok)
{
    json_t *list = json_array(), *strs = tok ? json_array() : NULL;
    api_logprobs names = {.tok = tok};
    for (size_t i = 0; list && i < n; i++) {
        json_array_append_new(list, json_integer(ids[i]));
        if (strs)
            json_array_append_new(strs, token_str(&names, ids[i]));
    }
    json_t *root = json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len", (json_int_t)max_model_len,
                             "tokens", list);
    if (root && strs)
        json_object_set_new(root, "token_strs", strs);
    else
        json_decref(strs);
    return dump(root);
}

char *api_render_detokenized(const char *text, size_t len)
{
    return dump(json_pack("{s:o}", "prompt", jstr(text, len)));
}

/* ---- streams ------------------------------------------------------------- */

enum split_mode {
    MODE_UNDECIDED,   /* chat: too little text to tell whether it opens with "<think>" */
    MODE_REASONING,   /* inside the reasoning, before "</think>" */
    MODE_AFTER_THINK, /* after "</think>": leading newlines are dropped */
    MODE_CONTENT,     /* everything is content */
};

struct api_stream {
    api_kind kind;
    char *id, *model, *fingerprint;
    int64_t created;
    int index;            /* the choice's */
    bool include_usage;
    enum split_mode mode;
    bool lead;            /* reasoning: still dropping its leading newlines */
    char *pend;           /* text received but not yet decided (chat) */
    size_t pend_len, pend_cap;
    char **out;           /* queued chunk texts */
    size_t out_head, out_n, out_cap;
    json_t *lp_pend;      /* logprobs for the next chunk (lp_object), or NULL */
    api_toolcalls *tc;    /* the content's tool calls (api_meta.tool_calls), or NULL */
    uint64_t tool_seed;   /* the request's: the choice's is drawn from it and the index */
    int64_t lp_chars;     /* characters of the text the logprobs so far cover */
};

static const char OPEN_TAG[] = "<think>", CLOSE_TAG[] = "</think>";

api_stream *api_stream_new(api_kind kind, const api_meta *meta, bool include_usage)
{
    api_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->kind = kind;
    s->id = strdup(meta->id);
    s->model = strdup(meta->model);
    s->fingerprint = meta->fingerprint ? strdup(meta->fingerprint) : NULL;
    s->created = meta->created;
    s->include_usage = include_usage;
    s->mode = kind == API_KIND_CHAT ? MODE_UNDECIDED : MODE_CONTENT;
    s->tool_seed = meta->tool_seed;
    if (kind == API_KIND_CHAT && meta->tool_calls && !(s->tc = api_toolcalls_new(meta->tool_seed))) {
        api_stream_free(s);
        return NULL;
    }
    if (!s->id || !s->model || (meta->fingerprint && !s->fingerprint)) {
        api_stream_free(s);
        return NULL;
    }
    return s;
}

int api_stream_set_index(api_stream *s, int index)
{
    s->index = index;
    if (!s->tc)
        return 0;
    /* nothing was fed yet: the parser starts over with the choice's seed */
    api_toolcalls_free(s->tc);
    s->tc = api_toolcalls_new(api_choice_tool_seed(s->tool_seed, (size_t)index));
    return s->tc ? 0 : API_ENOMEM;
}

void api_stream_free(api_stream *s)
{
    if (!s)
        return;
    for (size_t i = s->out_head; i < s->out_n; i++)
        free(s->out[i]);
    free(s->out);
    json_decref(s->lp_pend);
    api_toolcalls_free(s->tc);
    free(s->pend);
    free(s->id);
    free(s->model);
    free(s->fingerprint);
    free(s);
}

static int queue(api_stream *s, json_t *chunk)
{
    char *text = dump(chunk);
    if (!text)
        return API_ENOMEM;
    if (s->out_head == s->out_n)
        s->out_head = s->out_n = 0;
    if (s->out_n == s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap * 2 : 4;
        char **n = realloc(s->out, cap * sizeof *n);
        if (!n) {
            free(text);
            return API_ENOMEM;
        }
        s->out = n;
        s->out_cap = cap;
    }
    s->out[s->out_n++] = text;
    return 0;
}

char *api_stream_next(api_stream *s)
{
    if (s->out_head == s->out_n)
        return NULL;
    return s->out[s->out_head++];
}

/* A chunk with one choice holding DELTA (chat) or TEXT (completions). */
static json_t *chunk_new(api_stream *s, json_t *delta_or_text, const char *finish_reason)
{
    api_meta m = {.id = s->id, .created = s->created, .model = s->model, .fingerprint = s->fingerprint};
    json_t *root = envelope(s->kind, &m, true);
    json_t *choice = json_pack("{s:i, s:o}", "index", s->index, "logprobs", s->lp_pend ? s->lp_pend : json_null());
    s->lp_pend = NULL;
    if (!root || !choice || !delta_or_text) {
        json_decref(root);
        json_decref(choice);
        json_decref(delta_or_text);
        return NULL;
    }
    json_object_set_new(choice, s->kind == API_KIND_CHAT ? "delta" : "text", delta_or_text);
    json_object_set_new(choice, "finish_reason", finish_reason ? json_string(finish_reason) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(root, "choices", choices);
    if (s->include_usage)
        json_object_set_new(root, "usage", json_null());
    return root;
}

int api_stream_begin(api_stream *s)
{
    if (s->kind != API_KIND_CHAT)
        return 0;
    return queue(s, chunk_new(s, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
}

int api_stream_logprobs(api_stream *s, const api_logprobs *lp, const eng_token_lp *lps, size_t n, bool prompt)
{
    if (!s->lp_pend && n && !(s->lp_pend = lp_object(s->kind)))
        return API_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = lp_append(s->kind, s->lp_pend, lp, &lps[i], prompt, &s->lp_chars);
        if (rc)
            return rc;
    }
    return 0;
}

/* The content's tool calls: a chunk per event (content text, a call's start, arguments). */
static int emit_calls(api_stream *s, const char *c, size_t cn, bool final)
{
    const api_tc_event *ev;
    size_t n;
    if (api_toolcalls_feed(s->tc, c, cn, final, &ev, &n))
        return API_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *d = ev[i].kind == API_TC_CONTENT ? json_pack("{s:o}", "content", jstr(ev[i].text, ev[i].len))
                                                 : json_pack("{s:[o]}", "tool_calls", tc_delta(&ev[i]));
        int rc = queue(s, chunk_new(s, d, NULL));
        if (rc)
            return rc;
    }
    return 0;
}

/* Queues one chunk with the reasoning and content deltas, if any. */
static int emit(api_stream *s, const char *r, size_t rn, const char *c, size_t cn)
{
    if (s->tc && cn) {
        int rc = emit(s, r, rn, NULL, 0);
        return rc ? rc : emit_calls(s, c, cn, false);
    }
    if (!rn && !cn)
        return 0;
    if (s->kind != API_KIND_CHAT)
        return queue(s, chunk_new(s, jstr(c, cn), NULL));
    json_t *d = json_object();
    if (!d)
        return API_ENOMEM;
    if (rn)
        json_object_set_new(d, "reasoning_content", jstr(r, rn));
    if (cn)
        json_object_set_new(d, "content", jstr(c, cn));
    return queue(s, chunk_new(s, d, NULL));
}

/*
 * Decides as much of the pending chat text as it can (all of it when FINAL)
 * and emits it: the incremental form of api_chat_split_reasoning().
 */
static int advance(api_stream *s, bool final)
{
    const char *r = NULL, *c = NULL;
    size_t rn = 0, cn = 0, used = 0;
    char *p = s->pend;
    size_t n = s->pend_len;
    for (;;) {
        const char *q = p + used;
        size_t left = n - used;
        if (s->mode == MODE_UNDECIDED) {
            size_t ol = strlen(OPEN_TAG);
            if (left >= ol && memcmp(q, OPEN_TAG, ol) == 0) {
                s->mode = MODE_REASONING;
                s->lead = true;
                used += ol;
                continue;
            }
            if (left < ol && memcmp(q, OPEN_TAG, left) == 0 && !final)
                break;
            s->mode = MODE_CONTENT;
            continue;
        }
        if (s->mode == MODE_REASONING) {
            if (s->lead) {
                while (used < n && p[used] == '\n')
                    used++;
                q = p + used;
                left = n - used;
                if (left == 0)
                    break;
                s->lead = false;
            }
            const char *hit = memmem(q, left, CLOSE_TAG, strlen(CLOSE_TAG));
            if (hit) {
                size_t k = (size_t)(hit - q);
                while (k > 0 && q[k - 1] == '\n')
                    k--;
                r = q;
                rn = k;
                used += (size_t)(hit - q) + strlen(CLOSE_TAG);
                s->mode = MODE_AFTER_THINK;
                continue;
            }
            size_t k = left;
            if (!final) {
                k -= api_partial_tag(q, left, CLOSE_TAG);
                while (k > 0 && q[k - 1] == '\n')
                    k--;
            }
            r = q;
            rn = k;
            used += k;
            break;
        }
        if (s->mode == MODE_AFTER_THINK) {
            while (used < n && p[used] == '\n')
                used++;
            if (used == n)
                break;
            s->mode = MODE_CONTENT;
            continue;
        }
        c = q;
        cn = left;
        used = n;
        break;
    }
    int rc = emit(s, r, rn, c, cn);
    if (rc)
        return rc;
    memmove(s->pend, s->pend + used, n - used);
    s->pend_len = n - used;
    return 0;
}

int api_stream_text(api_stream *s, const char *text, size_t len)
{
    if (!len)
        return 0;
    if (s->kind != API_KIND_CHAT)
        return emit(s, NULL, 0, text, len);
    if (s->pend_len + len > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap : 256;
        while (cap < s->pend_len + len)
            cap *= 2;
        char *n = realloc(s->pend, cap);
        if (!n)
            return API_ENOMEM;
        s->pend = n;
        s->pend_cap = cap;
    }
    memcpy(s->pend + s->pend_len, text, len);
    s->pend_len += len;
    return advance(s, false);
}

int api_stream_end(api_stream *s, const char *finish_reason, const api_usage *usage, const api_timings *timings)
{
    int rc;
    if (s->kind == API_KIND_CHAT && s->pend_len && (rc = advance(s, true)))
        return rc;
    if (s->tc && (rc = emit_calls(s, "", 0, true)))
        return rc;
    if (s->tc && api_toolcalls_count(s->tc) && !strcmp(finish_reason, "stop"))
        finish_reason = "tool_calls";
    json_t *fin = chunk_new(s, s->kind == API_KIND_CHAT ? json_object() : json_string(""), finish_reason);
    if (!fin)
        return API_ENOMEM;
    if (!s->include_usage && timings)
        json_object_set_new(fin, "timings", timings_json(timings));
    if ((rc = queue(s, fin)))
        return rc;
    if (!s->include_usage || !usage)
        return 0;
    api_meta m = {.id = s->id, .created = s->created, .model = s->model, .fingerprint = s->fingerprint};
    json_t *u = envelope(s->kind, &m, true);
    if (!u)
        return API_ENOMEM;
    json_object_set_new(u, "choices", json_array());
    json_object_set_new(u, "usage", usage_json(usage));
    json_object_set_new(u, "timings", timings_json(timings));
    return queue(s, u);
}

int api_stream_tool_calls(const api_stream *s)
{
    return s->tc ? api_toolcalls_count(s->tc) : 0;
}

int api_text_tool_calls(const char *text, size_t len)
{
    api_chat_split sp;
    api_chat_split_reasoning(text, len, &sp);
    api_toolcalls *t = api_toolcalls_new(0);
    const api_tc_event *ev;
    size_t n;
    int calls = t && !api_toolcalls_feed(t, text + sp.content_off, sp.content_len, true, &ev, &n)
                    ? api_toolcalls_count(t) : -1;
    api_toolcalls_free(t);
    return calls;
}
