/*
 * synth_std: the standard-ONNX contracts of the synthetic Qwen3 model (see
 * synth.h): int4-qdq, float and float32, at opset 23 with RMSNormalization,
 * RotaryEmbedding and Attention or in their primitive decompositions, and
 * the FP32-carrier and BF16-rounding variants of the BF16 ones.
 *
 * The weights are those of the ORT GenAI form (synth.c) from the same seed:
 * each int4-qdq projection holds exactly the codes and scales MatMulNBits
 * holds there, transposed to ONNX's [K, N] (q, k and v are the rows of the
 * fused QKV projection), with explicit zero points 8; the tied UINT4 [V, D]
 * embedding holds the LM head's codes; norm weights are the same BF16
 * values; the rotary tables the same FP32 tables, cast to the activation
 * type. The public inputs and outputs are the ORT form's.
 *
 * Called by eng_synth_build() on its thread.
 */
#include "engine/writer/synth_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"

#define NB 32 /* ENG_SYNTH_BLOCK */

/* ---- nodes, casts and constants ---- */

/* Appends node TYPE named NAME with one output NAME/output_0, written to OUT (which may be an input). */
static const char *op(synth *s, const char *type, const char *name, size_t n_in, const char *const *in, char *out)
{
    char o[NAME_MAX_LEN];
    const char *outs[1] = {synth_fmt(o, sizeof o, "%s/output_0", name)};
    eng_ow_node(s->w, type, "", name, n_in, in, 1, outs);
    return strcpy(out, o);
}

static void cast(synth *s, const char *in, int32_t to, char *out)
{
    char n[NAME_MAX_LEN];
    NAME(n, "%s/Cast%s", in, to == ENG_DT_BFLOAT16 ? "BF16" : "FP32");
    op(s, "Cast", n, ENG_OW_LIST(in), out);
    eng_ow_attr_int(s->w, "to", to);
}

/*
 * In the BF16-rounding variant every computing node's output goes through
 * Cast to BF16 and back, as the BF16 graph rounds it; V is renamed in place.
 */
static void rnd(synth *s, char *v)
{
    if (!s->round)
        return;
    char a[NAME_MAX_LEN];
    cast(s, v, ENG_DT_BFLOAT16, a);
    cast(s, a, ENG_DT_FLOAT, v);
}

/*
 * A graph-typed value V that must leave the graph as FP32 under the name
 * FINAL: a Cast in the BF16 graph, the round trip in the rounding variant,
 * nothing in the FP32 forms (where the producer was given FINAL itself).
 */
static void to_output(synth *s, const char *v, const char *final)
{
    if (s->adt != ENG_DT_BFLOAT16 && !s->round)
        return;
    char n[NAME_MAX_LEN], a[NAME_MAX_LEN];
    const char *src = v;
    if (s->round) {
        cast(s, v, ENG_DT_BFLOAT16, a);
        src = a;
    }
    NAME(n, "%s/Cast", final);
    const char *outs[1] = {final};
    eng_ow_node(s->w, "Cast", "", n, ENG_OW_LIST(src), 1, outs);
    eng_ow_attr_int(s->w, "to", ENG_DT_FLOAT);
}

/* The name a producer of graph output FINAL writes: FINAL itself in the FP32 forms, else TMP. */
static const char *out_name(const synth *s, const char *tmp, const char *final)
{
    return s->adt != ENG_DT_BFLOAT16 && !s->round ? final : tmp;
}

/* A graph FP32 input as the graph's type: Cast to BF16 in the BF16 graph (rounded in the rounding variant). */
static const char *from_input(synth *s, const char *in, char *out)
{
    if (s->adt == ENG_DT_BFLOAT16)
        cast(s, in, ENG_DT_BFLOAT16, out);
    else
        snprintf(out, NAME_MAX_LEN, "%s", in);
    rnd(s, out);
    return out;
}

/*
 * A 0-D constant of the graph's type holding V, deduplicated by TAG: the
 * BF16 value in the BF16 contracts and their FP32 variants, V in float32.
 */
static const char *const_a(synth *s, const char *tag, float v)
{
    bool bf = s->adt == ENG_DT_BFLOAT16;
    char out[NAME_MAX_LEN], node[NAME_MAX_LEN];
    NAME(out, "/model/constants/%s/%s", bf ? "BFLOAT16" : "FLOAT", tag);
    NAME(node, "/model/constant_nodes/%s/%s", bf ? "BFLOAT16" : "FLOAT", tag);
    uint16_t h = synth_bf16(v);
    /* The FP32 variants of a BF16 contract carry the BF16 graph's value; float32 has its own. */
    if (s->g->contract != ENG_SYNTH_FLOAT32)
        memcpy(&v, &(uint32_t){(uint32_t)h << 16}, sizeof v);
    return synth_const(s, out, node, s->adt, 0, NULL, bf ? (const void *)&h : (const void *)&v, bf ? 2 : 4);
}

static const char *ints(synth *s, int64_t a)
{
    return synth_const_i64(s, 1, &a, false);
}

/* ---- weights ---- */

/* Streams 4-bit values, the first of each pair in the low nibble, into the open initializer. */
typedef struct nibbles {
    synth *s;
    uint8_t buf[4096];
    size_t n;
    bool half;
} nibbles;

static void nib_put(nibbles *z, unsigned v)
{
    if (!z->half) {
        z->buf[z->n] = (uint8_t)(v & 15);
    } else {
        z->buf[z->n++] |= (uint8_t)((v & 15) << 4);
        if (z->n == sizeof z->buf) {
            eng_ow_init_write(z->s->w, z->buf, z->n);
            z->n = 0;
        }
    }
    z->half = !z->half;
}

static void nib_end(nibbles *z)
{
    if (z->half)
        z->n++; /* the padding nibble stays 0 */
    if (z->n)
        eng_ow_init_write(z->s->w, z->buf, z->n);
    z->n = 0;
    z->half = false;
}

/* A UINT4 tensor of COUNT zero points 8. */
static void zero_points(synth *s, const char *name, const int64_t *dims)
{
    eng_ow_init_begin(s->w, name, ENG_DT_UINT4, 2, dims);
    if (!s->dry) {
        nibbles z = {.s = s};
        for (int64_t i = 0; i < dims[0] * dims[1]; i++)
            nib_put(&z, 8);
        nib_end(&z);
    }
    eng_ow_init_end(s->w);
}

static void dequantize(synth *s, const char *base, const char *q, const char *sc, const char *zp, int axis, char *out)
{
    char n[NAME_MAX_LEN];
    NAME(n, "%s/DequantizeLinear", base);
    op(s, "DequantizeLinear", n, ENG_OW_LIST(q, sc, zp), out);
    eng_ow_attr_int(s->w, "axis", axis);
    eng_ow_attr_int(s->w, "block_size", NB);
    rnd(s, out);
}

/*
 * The weight [K, N] of rows ROW0 .. ROW0 + N of projection P (the output
 * features), as the graph's MatMul reads it: int4-qdq quantizes each row as
 * the ORT form does (the same codes and scales) and writes them transposed
 * with zero points 8, behind DequantizeLinear; float writes the values.
 */
static void weight(synth *s, const char *base, const eng_synth_proj *p, int64_t row0, int64_t nrows, char *out)
{
    int64_t K = p->k, N = nrows, kb = K / NB;
    uint64_t key = synth_tensor_key(s->seed, p->tensor_id);
    char qn[NAME_MAX_LEN], sn[NAME_MAX_LEN], zn[NAME_MAX_LEN];
    if (s->g->contract != ENG_SYNTH_INT4_QDQ) {
        int64_t dims[2] = {K, N};
        NAME(qn, "%s.weight", base);
        eng_ow_init_begin(s->w, qn, s->adt, 2, dims);
        for (int64_t k = 0; k < K && !s->dry && !eng_ow_error(s->w); k++) {
            for (int64_t n = 0; n < N; n++)
                synth_gen_span(key, (uint64_t)(row0 + n) * (uint64_t)K + (uint64_t)k, 1, p->amp, p->bf16, &s->row[n]);
            synth_write_row(s, s->row, N, s->adt);
        }
        eng_ow_init_end(s->w);
        snprintf(out, NAME_MAX_LEN, "%s", qn);
        return;
    }
    NAME(qn, "%s.weight_quantized", base);
    NAME(sn, "%s.weight_scale", base);
    NAME(zn, "%s.weight_zero_point", base);
    uint8_t *codes = NULL;
    float *scales = NULL;
    if (!s->dry) {
        codes = malloc((size_t)(N * K / 2));
        scales = malloc((size_t)(N * kb) * sizeof *scales);
        if (!codes || !scales)
            eng_ow_fail(s->w, "initializer '%s': out of memory", qn);
        for (int64_t n = 0; n < N && codes && scales; n++) {
            synth_gen_span(key, (uint64_t)(row0 + n) * (uint64_t)K, K, p->amp, p->bf16, s->row);
            eng_synth_q4_row(s->row, K, codes + n * (K / 2), scales + n * kb);
        }
    }
    int64_t qdims[2] = {K, N}, sdims[2] = {kb, N};
    eng_ow_init_begin(s->w, qn, ENG_DT_UINT4, 2, qdims);
    if (codes && scales && !eng_ow_error(s->w)) {
        nibbles z = {.s = s};
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++)
                nib_put(&z, codes[n * (K / 2) + k / 2] >> (4 * (k & 1)));
        nib_end(&z);
    }
    eng_ow_init_end(s->w);
    eng_ow_init_begin(s->w, sn, s->adt, 2, sdims);
    for (int64_t b = 0; codes && scales && b < kb && !eng_ow_error(s->w); b++) {
        for (int64_t n = 0; n < N; n++)
            s->row[n] = scales[n * kb + b];
        synth_write_row(s, s->row, N, s->adt);
    }
    eng_ow_init_end(s->w);
    free(codes);
    free(scales);
    zero_points(s, zn, sdims);
    dequantize(s, base, qn, sn, zn, 0, out);
}

/*
 * The tied embedding [V, D] in s->tied: int4-qdq's one UINT4 copy of the LM
 * head's codes behind DequantizeLinear axis 1, or float's constant.
 */
static void tied_embedding(synth *s)
{
    const eng_synth_geom *g = s->g;
    eng_synth_proj p = eng_synth_proj_of(g, 0, ENG_SYNTH_LM_HEAD);
    uint64_t key = synth_tensor_key(s->seed, p.tensor_id);
    int64_t D = g->hidden, kb = D / NB, dims[2] = {g->vocab, D}, sdims[2] = {g->vocab, kb};
    if (g->contract != ENG_SYNTH_INT4_QDQ) {
        eng_ow_init_begin(s->w, "model.embed_tokens.weight", s->adt, 2, dims);
        for (int64_t v = 0; v < g->vocab && !s->dry && !eng_ow_error(s->w); v++) {
            synth_gen_span(key, (uint64_t)v * (uint64_t)D, D, p.amp, p.bf16, s->row);
            synth_write_row(s, s->row, D, s->adt);
        }
        eng_ow_init_end(s->w);
        snprintf(s->tied, NAME_MAX_LEN, "model.embed_tokens.weight");
        return;
    }
    /* Codes, then scales: one initializer is open at a time, so the rows are drawn twice. */
    for (int pass = 0; pass < 2; pass++) {
        eng_ow_init_begin(s->w, pass ? "model.embed_tokens.weight_scale" : "model.embed_tokens.weight_quantized",
                          pass ? s->adt : ENG_DT_UINT4, 2, pass ? sdims : dims);
        for (int64_t v = 0; v < g->vocab && !s->dry && !eng_ow_error(s->w); v++) {
            synth_gen_span(key, (uint64_t)v * (uint64_t)D, D, p.amp, p.bf16, s->row);
            eng_synth_q4_row(s->row, D, s->blob, s->rsc);
            if (pass)
                synth_write_row(s, s->rsc, kb, s->adt);
            else
                eng_ow_init_write(s->w, s->blob, (size_t)D / 2);
        }
        eng_ow_init_end(s->w);
    }
    zero_points(s, "model.embed_tokens.weight_zero_point", sdims);
    dequantize(s, "/model/embed_tokens", "model.embed_tokens.weight_quantized", "model.embed_tokens.weight_scale",
               "model.embed_tokens.weight_zero_point", 1, s->tied);
}

/* ---- blocks ---- */

/* RMS norm of X over its last axis with weight W: RMSNormalization, or Pow/ReduceMean/Add/Sqrt/Div/Mul. */
static void norm(synth *s, const char *scope, const char *x, const char *w, char *out)
{
    char n[NAME_MAX_LEN];
    if (!s->g->decomposed) {
        NAME(n, "%s/RMSNormalization", scope);
        op(s, "RMSNormalization", n, ENG_OW_LIST(x, w), out);
        eng_ow_attr_int(s->w, "axis", -1);
        eng_ow_attr_float(s->w, "epsilon", RMS_EPS);
        eng_ow_attr_int(s->w, "stash_type", 1);
        rnd(s, out);
        return;
    }
    char sq[NAME_MAX_LEN], ms[NAME_MAX_LEN], ve[NAME_MAX_LEN], rt[NAME_MAX_LEN], xn[NAME_MAX_LEN];
    op(s, "Pow", NAME(n, "%s/Pow", scope), ENG_OW_LIST(x, const_a(s, "2.0", 2.0f)), sq);
    rnd(s, sq);
    op(s, "ReduceMean", NAME(n, "%s/ReduceMean", scope), ENG_OW_LIST(sq, ints(s, -1)), ms);
    eng_ow_attr_int(s->w, "keepdims", 1);
    rnd(s, ms);
    op(s, "Add", NAME(n, "%s/Add", scope), ENG_OW_LIST(ms, const_a(s, "1e-06", RMS_EPS)), ve);
    rnd(s, ve);
    op(s, "Sqrt", NAME(n, "%s/Sqrt", scope), ENG_OW_LIST(ve), rt);
    rnd(s, rt);
    op(s, "Div", NAME(n, "%s/Div", scope), ENG_OW_LIST(x, rt), xn);
    rnd(s, xn);
    op(s, "Mul", NAME(n, "%s/Mul", scope), ENG_OW_LIST(xn, w), out);
    rnd(s, out);
}

static void matmul(synth *s, const char *scope, const char *a, const char *b, char *out)
{
    char n[NAME_MAX_LEN];
    op(s, "MatMul", NAME(n, "%s/MatMul", scope), ENG_OW_LIST(a, b), out);
    rnd(s, out);
}

/* X times rows ROW0 .. ROW0 + N of projection KIND of LAYER. */
static void proj(synth *s, int64_t layer, eng_synth_proj_kind kind, const char *which, int64_t row0, int64_t nrows,
                 const char *x, char *out)
{
    char base[NAME_MAX_LEN], scope[NAME_MAX_LEN], w[NAME_MAX_LEN];
    eng_synth_proj p = eng_synth_proj_of(s->g, layer, kind);
    if (nrows < 0)
        nrows = p.n;
    NAME(base, "model.layers.%" PRId64 ".%s", layer, which);
    NAME(scope, "/model/layers.%" PRId64 "/%s", layer, which);
    weight(s, base, &p, row0, nrows, w);
    matmul(s, scope, x, w, out);
}

/* Per-head RMS norm of the [B, S, N*H] projection X: Reshape to heads, norm, Reshape back. */
static void qk_norm(synth *s, int64_t layer, const char *which, uint32_t tid, int64_t width, const char *x, char *out)
{
    char scope[NAME_MAX_LEN], n[NAME_MAX_LEN], w[NAME_MAX_LEN], r1[NAME_MAX_LEN], ln[NAME_MAX_LEN];
    int64_t heads_shape[3] = {0, -1, s->g->head}, back[3] = {0, -1, width};
    NAME(scope, "/model/layers.%" PRId64 "/self_attn/%s", layer, which);
    op(s, "Reshape", NAME(n, "%s/Reshape_1", scope), ENG_OW_LIST(x, synth_const_i64(s, 3, heads_shape, false)), r1);
    NAME(w, "model.layers.%" PRId64 ".self_attn.%s.weight", layer, which);
    synth_norm_init(s, w, tid, s->g->head, s->adt);
    norm(s, scope, r1, w, ln);
    op(s, "Reshape", NAME(n, "%s/Reshape_2", scope), ENG_OW_LIST(ln, synth_const_i64(s, 3, back, false)), out);
}

/*
 * Rotary embedding of the [B, S, HEADS*H] value X at the positions after
 * the past: RotaryEmbedding with position_ids, or its decomposition
 * x * cos + rotate_half(x) * sin with cos/sin gathered at the positions.
 */
static void rotary(synth *s, const char *scope, const char *x, int64_t heads, char *out)
{
    char n[NAME_MAX_LEN];
    int64_t H = s->g->head;
    if (!s->g->decomposed) {
        op(s, "RotaryEmbedding", NAME(n, "%s/RotaryEmbedding", scope), ENG_OW_LIST(x, s->cos, s->sin, s->pos_ids), out);
        eng_ow_attr_int(s->w, "num_heads", heads);
        eng_ow_attr_int(s->w, "interleaved", 0);
        rnd(s, out);
        return;
    }
    char x4[NAME_MAX_LEN], x1[NAME_MAX_LEN], x2[NAME_MAX_LEN], nx2[NAME_MAX_LEN], rh[NAME_MAX_LEN];
    char xc[NAME_MAX_LEN], rs[NAME_MAX_LEN], sum[NAME_MAX_LEN];
    int64_t shape4[4] = {0, 0, heads, H}, shape3[3] = {0, 0, heads * H}, half = H / 2;
    op(s, "Reshape", NAME(n, "%s/rotary/Reshape", scope), ENG_OW_LIST(x, synth_const_i64(s, 4, shape4, false)), x4);
    op(s, "Slice", NAME(n, "%s/rotary/Slice_1", scope),
       ENG_OW_LIST(x4, ints(s, 0), ints(s, half), ints(s, -1)), x1);
    op(s, "Slice", NAME(n, "%s/rotary/Slice_2", scope),
       ENG_OW_LIST(x4, ints(s, half), ints(s, H), ints(s, -1)), x2);
    op(s, "Neg", NAME(n, "%s/rotary/Neg", scope), ENG_OW_LIST(x2), nx2);
    op(s, "Concat", NAME(n, "%s/rotary/Concat", scope), ENG_OW_LIST(nx2, x1), rh);
    eng_ow_attr_int(s->w, "axis", -1);
    op(s, "Mul", NAME(n, "%s/rotary/Mul_1", scope), ENG_OW_LIST(x4, s->cos), xc);
    rnd(s, xc);
    op(s, "Mul", NAME(n, "%s/rotary/Mul_2", scope), ENG_OW_LIST(rh, s->sin), rs);
    rnd(s, rs);
    op(s, "Add", NAME(n, "%s/rotary/Add", scope), ENG_OW_LIST(xc, rs), sum);
    rnd(s, sum);
    op(s, "Reshape", NAME(n, "%s/rotary/Reshape_1", scope), ENG_OW_LIST(sum, synth_const_i64(s, 3, shape3, false)),
       out);
}

/*
 * Causal GQA attention of layer I with the past from the graph inputs and the
 * present to the graph outputs: Attention, or its decomposition (the cache
 * concatenated, queries grouped by kv head so the keys broadcast over the
 * group, scores scaled, the causal mask added, Softmax, times the values).
 */
static void attention(synth *s, int64_t i, const char *q, const char *k, const char *v, char *out)
{
    const eng_synth_geom *g = s->g;
    char scope[NAME_MAX_LEN], n[NAME_MAX_LEN], pk_in[NAME_MAX_LEN], pv_in[NAME_MAX_LEN];
    char pk[NAME_MAX_LEN], pv[NAME_MAX_LEN], ok[NAME_MAX_LEN], ov[NAME_MAX_LEN];
    char tk[NAME_MAX_LEN], tv[NAME_MAX_LEN];
    int64_t H = g->head, Nq = g->q_heads, Nkv = g->kv_heads, G = Nq / Nkv;
    float scale = (float)(1.0 / sqrt((double)H));
    NAME(scope, "/model/layers.%" PRId64 "/self_attn", i);
    NAME(pk_in, "past_key_values.%" PRId64 ".key", i);
    NAME(pv_in, "past_key_values.%" PRId64 ".value", i);
    NAME(ok, "present.%" PRId64 ".key", i);
    NAME(ov, "present.%" PRId64 ".value", i);
    from_input(s, pk_in, pk);
    from_input(s, pv_in, pv);
    NAME(tk, "%s/present_key", scope);
    NAME(tv, "%s/present_value", scope);
    const char *pk_out = out_name(s, tk, ok), *pv_out = out_name(s, tv, ov);
    if (!g->decomposed) {
        NAME(n, "%s/Attention", scope);
        synth_fmt(out, NAME_MAX_LEN, "%s/output_0", n);
        eng_ow_node(s->w, "Attention", "", n, ENG_OW_LIST(q, k, v, "", pk, pv), ENG_OW_LIST(out, pk_out, pv_out));
        eng_ow_attr_int(s->w, "q_num_heads", Nq);
        eng_ow_attr_int(s->w, "kv_num_heads", Nkv);
        eng_ow_attr_int(s->w, "is_causal", 1);
        eng_ow_attr_float(s->w, "scale", scale);
        rnd(s, out);
        to_output(s, pk_out, ok);
        to_output(s, pv_out, ov);
        return;
    }
    char k4[NAME_MAX_LEN], v4[NAME_MAX_LEN], kr[NAME_MAX_LEN], vr[NAME_MAX_LEN], q5[NAME_MAX_LEN];
    char qr[NAME_MAX_LEN], ku[NAME_MAX_LEN], kt[NAME_MAX_LEN], vu[NAME_MAX_LEN], sc[NAME_MAX_LEN];
    char scs[NAME_MAX_LEN], msk[NAME_MAX_LEN], pr[NAME_MAX_LEN], o5[NAME_MAX_LEN], ot[NAME_MAX_LEN];
    int64_t kshape[4] = {0, 0, Nkv, H}, qshape[5] = {0, 0, Nkv, G, H}, oshape[3] = {0, 0, Nq * H};
    const char *kvs = synth_const_i64(s, 4, kshape, false);
    op(s, "Reshape", NAME(n, "%s/k/Reshape", scope), ENG_OW_LIST(k, kvs), kr);
    op(s, "Transpose", NAME(n, "%s/k/Transpose", scope), ENG_OW_LIST(kr), k4);
    eng_ow_attr_ints(s->w, "perm", 4, (const int64_t[]){0, 2, 1, 3});
    op(s, "Reshape", NAME(n, "%s/v/Reshape", scope), ENG_OW_LIST(v, kvs), vr);
    op(s, "Transpose", NAME(n, "%s/v/Transpose", scope), ENG_OW_LIST(vr), v4);
    eng_ow_attr_ints(s->w, "perm", 4, (const int64_t[]){0, 2, 1, 3});
    const char *outs_k[1] = {pk_out}, *outs_v[1] = {pv_out};
    eng_ow_node(s->w, "Concat", "", NAME(n, "%s/k/Concat", scope), ENG_OW_LIST(pk, k4), 1, outs_k);
    eng_ow_attr_int(s->w, "axis", 2);
    eng_ow_node(s->w, "Concat", "", NAME(n, "%s/v/Concat", scope), ENG_OW_LIST(pv, v4), 1, outs_v);
    eng_ow_attr_int(s->w, "axis", 2);
    to_output(s, pk_out, ok);
    to_output(s, pv_out, ov);
    op(s, "Reshape", NAME(n, "%s/q/Reshape", scope), ENG_OW_LIST(q, synth_const_i64(s, 5, qshape, false)), qr);
    op(s, "Transpose", NAME(n, "%s/q/Transpose", scope), ENG_OW_LIST(qr), q5);
    eng_ow_attr_ints(s->w, "perm", 5, (const int64_t[]){0, 2, 3, 1, 4});
    op(s, "Unsqueeze", NAME(n, "%s/k/Unsqueeze", scope), ENG_OW_LIST(pk_out, ints(s, 2)), ku);
    op(s, "Transpose", NAME(n, "%s/k/Transpose_1", scope), ENG_OW_LIST(ku), kt);
    eng_ow_attr_ints(s->w, "perm", 5, (const int64_t[]){0, 1, 2, 4, 3});
    op(s, "MatMul", NAME(n, "%s/MatMul", scope), ENG_OW_LIST(q5, kt), sc);
    rnd(s, sc);
    char tag[32];
    snprintf(tag, sizeof tag, "%.9g", (double)scale);
    op(s, "Mul", NAME(n, "%s/Mul", scope), ENG_OW_LIST(sc, const_a(s, tag, scale)), scs);
    rnd(s, scs);
    op(s, "Add", NAME(n, "%s/Add", scope), ENG_OW_LIST(scs, s->mask), msk);
    op(s, "Softmax", NAME(n, "%s/Softmax", scope), ENG_OW_LIST(msk), pr);
    eng_ow_attr_int(s->w, "axis", -1);
    rnd(s, pr);
    op(s, "Unsqueeze", NAME(n, "%s/v/Unsqueeze", scope), ENG_OW_LIST(pv_out, ints(s, 2)), vu);
    op(s, "MatMul", NAME(n, "%s/MatMul_1", scope), ENG_OW_LIST(pr, vu), o5);
    rnd(s, o5);
    op(s, "Transpose", NAME(n, "%s/Transpose", scope), ENG_OW_LIST(o5), ot);
    eng_ow_attr_ints(s->w, "perm", 5, (const int64_t[]){0, 3, 1, 2, 4});
    op(s, "Reshape", NAME(n, "%s/Reshape", scope), ENG_OW_LIST(ot, synth_const_i64(s, 3, oshape, false)), out);
}

/*
 * Shared by the layers: the positions after the past (T = the mask's
 * length, S = the new ids, positions T - S .. T - 1), the rotary tables in
 * the graph's type and, for the decomposition, cos/sin at those positions
 * and the causal mask (-inf where key j > past + query i).
 */
static void prelude(synth *s)
{
    const eng_synth_geom *g = s->g;
    char n[NAME_MAX_LEN], ids_shape[NAME_MAX_LEN], S[NAME_MAX_LEN], m_shape[NAME_MAX_LEN], T[NAME_MAX_LEN];
    char P[NAME_MAX_LEN];
    const int64_t one = 1;
    const char *c1 = synth_const_i64(s, 1, &one, true);
#define BASE "/model/positions"
    op(s, "Shape", BASE "/Shape", ENG_OW_LIST("input_ids"), ids_shape);
    op(s, "Gather", BASE "/Gather", ENG_OW_LIST(ids_shape, c1), S);
    eng_ow_attr_int(s->w, "axis", 0);
    op(s, "Shape", BASE "/Shape_1", ENG_OW_LIST("attention_mask"), m_shape);
    op(s, "Gather", BASE "/Gather_1", ENG_OW_LIST(m_shape, c1), T);
    eng_ow_attr_int(s->w, "axis", 0);
    op(s, "Sub", BASE "/Sub", ENG_OW_LIST(T, S), P);
    op(s, "Range", BASE "/Range", ENG_OW_LIST(P, T, c1), s->pos);
    op(s, "Unsqueeze", BASE "/Unsqueeze", ENG_OW_LIST(s->pos, ints(s, 0)), s->pos_ids);

    synth_rope_caches(s);
    char cos[NAME_MAX_LEN], sin[NAME_MAX_LEN];
    const char *tables[2] = {"cos_cache", "sin_cache"};
    char *typed[2] = {cos, sin}, *dst[2] = {s->cos, s->sin};
    for (int t = 0; t < 2; t++) {
        if (s->adt == ENG_DT_BFLOAT16)
            cast(s, tables[t], ENG_DT_BFLOAT16, typed[t]);
        else
            snprintf(typed[t], NAME_MAX_LEN, "%s", tables[t]);
        rnd(s, typed[t]);
        snprintf(dst[t], NAME_MAX_LEN, "%s", typed[t]);
    }
    if (!g->decomposed)
        return;
    for (int t = 0; t < 2; t++) {
        char gat[NAME_MAX_LEN], full[NAME_MAX_LEN];
        op(s, "Gather", NAME(n, BASE "/%s/Gather", tables[t]), ENG_OW_LIST(typed[t], s->pos), gat);
        eng_ow_attr_int(s->w, "axis", 0);
        op(s, "Concat", NAME(n, BASE "/%s/Concat", tables[t]), ENG_OW_LIST(gat, gat), full);
        eng_ow_attr_int(s->w, "axis", -1);
        op(s, "Unsqueeze", NAME(n, BASE "/%s/Unsqueeze", tables[t]), ENG_OW_LIST(full, ints(s, 1)), dst[t]);
    }
    char p1[NAME_MAX_LEN], s1[NAME_MAX_LEN], t1[NAME_MAX_LEN], st[NAME_MAX_LEN], neg[NAME_MAX_LEN];
    op(s, "Add", "/model/causal_mask/Add", ENG_OW_LIST(P, c1), p1);
    op(s, "Unsqueeze", "/model/causal_mask/Unsqueeze", ENG_OW_LIST(S, ints(s, 0)), s1);
    op(s, "Unsqueeze", "/model/causal_mask/Unsqueeze_1", ENG_OW_LIST(T, ints(s, 0)), t1);
    op(s, "Concat", "/model/causal_mask/Concat", ENG_OW_LIST(s1, t1), st);
    eng_ow_attr_int(s->w, "axis", 0);
    op(s, "ConstantOfShape", "/model/causal_mask/ConstantOfShape", ENG_OW_LIST(st), neg);
    uint16_t hinf = 0xFF80;
    float finf = -INFINITY;
    int64_t d1[1] = {1};
    eng_ow_attr_tensor(s->w, "value", NULL, s->adt, 1, d1, s->adt == ENG_DT_BFLOAT16 ? (const void *)&hinf
                                                                                     : (const void *)&finf,
                       s->adt == ENG_DT_BFLOAT16 ? 2 : 4);
    op(s, "Trilu", "/model/causal_mask/Trilu", ENG_OW_LIST(neg, p1), s->mask);
    eng_ow_attr_int(s->w, "upper", 1);
#undef BASE
}

/* One decoder layer; H holds the residual stream in and out. */
static void layer(synth *s, int64_t i, char *h)
{
    const eng_synth_geom *g = s->g;
    char scope[NAME_MAX_LEN], w[NAME_MAX_LEN], x[NAME_MAX_LEN], q[NAME_MAX_LEN], k[NAME_MAX_LEN], v[NAME_MAX_LEN];
    char qn[NAME_MAX_LEN], kn[NAME_MAX_LEN], qr[NAME_MAX_LEN], kr[NAME_MAX_LEN], o[NAME_MAX_LEN], a[NAME_MAX_LEN];
    char n[NAME_MAX_LEN], m[NAME_MAX_LEN], gate[NAME_MAX_LEN], up[NAME_MAX_LEN], sig[NAME_MAX_LEN];
    char act[NAME_MAX_LEN], mul[NAME_MAX_LEN], d[NAME_MAX_LEN];
    int64_t qw = g->q_heads * g->head, kvw = g->kv_heads * g->head;

    NAME(w, "model.layers.%" PRId64 ".input_layernorm.weight", i);
    synth_norm_init(s, w, synth_layer_tid(i, LT_INPUT_LN), g->hidden, s->adt);
    norm(s, NAME(scope, "/model/layers.%" PRId64 "/input_layernorm", i), h, w, x);

    proj(s, i, ENG_SYNTH_QKV, "self_attn.q_proj", 0, qw, x, q);
    proj(s, i, ENG_SYNTH_QKV, "self_attn.k_proj", qw, kvw, x, k);
    proj(s, i, ENG_SYNTH_QKV, "self_attn.v_proj", qw + kvw, kvw, x, v);
    qk_norm(s, i, "q_norm", synth_layer_tid(i, LT_Q_NORM), qw, q, qn);
    qk_norm(s, i, "k_norm", synth_layer_tid(i, LT_K_NORM), kvw, k, kn);
    rotary(s, NAME(scope, "/model/layers.%" PRId64 "/self_attn/q", i), qn, g->q_heads, qr);
    rotary(s, NAME(scope, "/model/layers.%" PRId64 "/self_attn/k", i), kn, g->kv_heads, kr);
    attention(s, i, qr, kr, v, o);
    proj(s, i, ENG_SYNTH_O, "self_attn.o_proj", 0, -1, o, a);
    op(s, "Add", NAME(n, "/model/layers.%" PRId64 "/residual_add_1/Add", i), ENG_OW_LIST(h, a), h);
    rnd(s, h);

    NAME(w, "model.layers.%" PRId64 ".post_attention_layernorm.weight", i);
    synth_norm_init(s, w, synth_layer_tid(i, LT_POST_LN), g->hidden, s->adt);
    norm(s, NAME(scope, "/model/layers.%" PRId64 "/post_attention_layernorm", i), h, w, m);
    proj(s, i, ENG_SYNTH_GATE, "mlp.gate_proj", 0, -1, m, gate);
    proj(s, i, ENG_SYNTH_UP, "mlp.up_proj", 0, -1, m, up);
    op(s, "Sigmoid", NAME(n, "/model/layers.%" PRId64 "/mlp/act_fn/Sigmoid", i), ENG_OW_LIST(gate), sig);
    rnd(s, sig);
    op(s, "Mul", NAME(n, "/model/layers.%" PRId64 "/mlp/act_fn/Mul", i), ENG_OW_LIST(gate, sig), act);
    rnd(s, act);
    op(s, "Mul", NAME(n, "/model/layers.%" PRId64 "/mlp/Mul", i), ENG_OW_LIST(act, up), mul);
    rnd(s, mul);
    proj(s, i, ENG_SYNTH_DOWN, "mlp.down_proj", 0, -1, mul, d);
    op(s, "Add", NAME(n, "/model/layers.%" PRId64 "/residual_add_2/Add", i), ENG_OW_LIST(h, d), h);
    rnd(s, h);
}

void synth_std_graph(synth *s)
{
    const eng_synth_geom *g = s->g;
    bool bf16 = g->contract != ENG_SYNTH_FLOAT32 && g->carrier == ENG_SYNTH_CARRIER_NATIVE;
    s->adt = bf16 ? ENG_DT_BFLOAT16 : ENG_DT_FLOAT;
    s->round = g->carrier == ENG_SYNTH_CARRIER_BF16_ROUND;
    eng_ow_opset(s->w, "", 23);
    synth_graph_io(s);
    prelude(s);
    tied_embedding(s);
    char h[NAME_MAX_LEN], w[NAME_MAX_LEN], f[NAME_MAX_LEN], t[NAME_MAX_LEN], l[NAME_MAX_LEN];
    op(s, "Gather", "/model/embed_tokens/Gather", ENG_OW_LIST(s->tied, "input_ids"), h);
    eng_ow_attr_int(s->w, "axis", 0);
    for (int64_t i = 0; i < g->layers && !eng_ow_error(s->w); i++)
        layer(s, i, h);
    NAME(w, "model.norm.weight");
    synth_norm_init(s, w, TID_FINAL_NORM, g->hidden, s->adt);
    norm(s, "/model/norm", h, w, f);
    op(s, "Transpose", "/lm_head/Transpose", ENG_OW_LIST(s->tied), t);
    eng_ow_attr_ints(s->w, "perm", 2, (const int64_t[]){1, 0});
    const char *outs[1] = {out_name(s, "/lm_head/MatMul/output_0", "logits")};
    eng_ow_node(s->w, "MatMul", "", "/lm_head/MatMul", ENG_OW_LIST(f, t), 1, outs);
    snprintf(l, sizeof l, "%s", outs[0]);
    to_output(s, l, "logits");
}
