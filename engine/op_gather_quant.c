/*
 * op_gather_quant: com.microsoft GatherBlockQuantized, the row lookup of a
 * block-quantized table. The ONNX Runtime GenAI builder writes it for the
 * embedding of tied models (Qwen3 0.6B to 4B) exported with the LM head
 * quantized (int4_algo_config rtn, k_quant, k_quant_mixed, k_quant_last): a
 * Reshape of the LM head's MatMulNBits codes to [vocab, hidden * bits / 8]
 * and its 2-D scales and zero points; ONNX Runtime's quantizer writes it
 * for a quantized Gather (INT4 or UINT4 codes). The rows are dequantized as
 * ONNX Runtime's CPU kernel does: (float)(q - zp) * scale, exact.
 *
 * Supported: data UINT8 (bits 4, two codes per byte low nibble first, or 8)
 * or INT4 / UINT4 (bits 4), gather_axis 0, quantize_axis the last, FLOAT
 * scales. An index outside [-rows, rows) fails the run (ONNX Runtime's CPU
 * kernel writes a row of zeros instead; a token id past the vocabulary is a
 * caller's error here, never a row of the model).
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"

#include <stdlib.h>

/*
 * The type rules prepare (on initializers) and infer (on the run's values)
 * both apply: false with the reason in WHY. A type of ENG_DT_UNDEFINED is
 * not known yet and passes.
 */
static bool gbq_types_ok(int32_t data_dt, int bits, int32_t scales_dt, char *why, size_t n)
{
    if (data_dt != ENG_DT_UNDEFINED && data_dt != ENG_DT_UINT8 && data_dt != ENG_DT_UINT4 && data_dt != ENG_DT_INT4)
        snprintf(why, n, "input data is %s; UINT8, UINT4 and INT4 codes are supported", eng_dtype_name(data_dt));
    else if (data_dt != ENG_DT_UNDEFINED && data_dt != ENG_DT_UINT8 && bits != 4)
        snprintf(why, n, "attribute 'bits' = %d with %s data (its codes are 4-bit)", bits, eng_dtype_name(data_dt));
    else if (scales_dt != ENG_DT_UNDEFINED && scales_dt != ENG_DT_FLOAT)
        snprintf(why, n, "input scales is %s; only FLOAT scales are supported (qwen3d computes in fp32)",
                 eng_dtype_name(scales_dt));
    else
        return true;
    return false;
}

static int prep_gbq(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    int64_t bits = eng_node_attr_int(n, "bits", 4), bs = eng_node_attr_int(n, "block_size", 128);
    if (bits != 4 && bits != 8)
        PREP_FAIL(b, s, "attribute 'bits' = %lld is not supported (only 4 and 8)", (long long)bits);
    if (bs < 16 || (bs & (bs - 1)))
        PREP_FAIL(b, s, "attribute 'block_size' = %lld must be a power of two >= 16", (long long)bs);
    s->p.gbq.bits = (int)bits;
    s->p.gbq.block = bs;
    s->p.gbq.gather_axis = eng_node_attr_int(n, "gather_axis", 0);
    s->p.gbq.quantize_axis = eng_node_attr_int(n, "quantize_axis", 1);
    const eng_tensor *data = const_input(b, s, 0), *sc = const_input(b, s, 2);
    char why[256];
    if (!gbq_types_ok(data ? data->dtype : ENG_DT_UNDEFINED, (int)bits, sc ? sc->dtype : ENG_DT_UNDEFINED, why,
                      sizeof why))
        PREP_FAIL(b, s, "%s", why);
    /* rows are looked up in the mapped table itself, also where the LM head repacks it (tied) */
    for (int i = 0; i < s->n_in; i++)
        if (i != 1)
            plan_mark_read_at_run(b->p, s->in[i]);
    snprintf(s->kernel, sizeof s->kernel, "gather_block_quantized.generic (%lld-bit rows dequantized on lookup)",
             (long long)bits);
    return 0;
}

/* The shapes the op needs, checked as ONNX Runtime's kernel checks them. */
typedef struct gbq_shape {
    uint64_t rows;      /* data dims[0]: what the indices select */
    uint64_t sub_rows;  /* quantized rows per gathered row: the product of data dims[1 .. r-2] */
    uint64_t cols;      /* codes per quantized row (data's last dim times the codes per byte) */
    uint64_t blocks;    /* scales per quantized row */
    /* The zero points' last dim: bytes for UINT8 4-bit (two per byte, each row padded to whole
     * bytes), else one per block (INT4 / UINT4 data index theirs by element). */
    uint64_t zp_row;
} gbq_shape;

/* The sizes of SH from data's view (gbq_check has accepted the step's values). */
static void gbq_derive(const step *s, const eng_view *d, gbq_shape *sh)
{
    const int r = d->rank;
    const uint64_t per_byte = d->dtype == ENG_DT_UINT8 ? 8u / (unsigned)s->p.gbq.bits : 1;
    sh->rows = (uint64_t)d->dims[0];
    sh->sub_rows = 1;
    for (int i = 1; i < r - 1; i++)
        sh->sub_rows *= (uint64_t)d->dims[i];
    sh->cols = (uint64_t)d->dims[r - 1] * per_byte;
    sh->blocks = (sh->cols + (uint64_t)s->p.gbq.block - 1) / (uint64_t)s->p.gbq.block;
    /* UINT8 4-bit: two zero points per byte, each row padded to whole bytes; else one per block */
    sh->zp_row = d->dtype == ENG_DT_UINT8 && s->p.gbq.bits == 4 ? (sh->blocks + 1) / 2 : sh->blocks;
}

/* The step's values checked as ONNX Runtime's kernel checks them, and their sizes in SH. */
static int gbq_check(eng_exec *x, const step *s, gbq_shape *sh)
{
    const rt_val *d = IN(x, s, 0), *ix = IN(x, s, 1), *sc = IN(x, s, 2);
    const rt_val *zp = s->n_in > 3 && s->in[3] >= 0 ? IN(x, s, 3) : NULL;
    int r = d->v.rank, bits = s->p.gbq.bits;
    int32_t dt = d->v.dtype;
    char why[256];
    if (!gbq_types_ok(dt, bits, sc->v.dtype, why, sizeof why))
        STEP_FAIL(x, s, "%s", why);
    if (r < 2)
        STEP_FAIL(x, s, "input data has rank %d; a table of rank 2 or more is gathered", r);
    int64_t ga = s->p.gbq.gather_axis < 0 ? s->p.gbq.gather_axis + r : s->p.gbq.gather_axis;
    int64_t qa = s->p.gbq.quantize_axis < 0 ? s->p.gbq.quantize_axis + r : s->p.gbq.quantize_axis;
    if (ga != 0 || qa != r - 1)
        STEP_FAIL(x, s, "gather_axis = %lld and quantize_axis = %lld on rank %d: only rows (axis 0) quantized along "
                  "the last axis are supported", (long long)s->p.gbq.gather_axis,
                  (long long)s->p.gbq.quantize_axis, r);
    if (ix->v.dtype != ENG_DT_INT64 && ix->v.dtype != ENG_DT_INT32)
        STEP_FAIL(x, s, "indices must be INT64 or INT32, not %s", eng_dtype_name(ix->v.dtype));
    if (ix->v.rank + r - 1 > ENG_MAX_RANK)
        STEP_FAIL(x, s, "output rank %d too large", ix->v.rank + r - 1);
    gbq_derive(s, &d->v, sh);
    bool ok = sc->v.rank == r && (uint64_t)sc->v.dims[r - 1] == sh->blocks;
    for (int i = 0; ok && i < r - 1; i++)
        ok = sc->v.dims[i] == d->v.dims[i];
    if (!ok)
        STEP_FAIL(x, s, "input scales must have data's shape with its last dimension %llu (%llu codes in blocks of "
                  "%lld)", (unsigned long long)sh->blocks, (unsigned long long)sh->cols,
                  (long long)s->p.gbq.block);
    if (zp) {
        if (zp->v.dtype != dt)
            STEP_FAIL(x, s, "input zero_points is %s; it must be data's type %s", eng_dtype_name(zp->v.dtype),
                      eng_dtype_name(dt));
        ok = zp->v.rank == r && (uint64_t)zp->v.dims[r - 1] == sh->zp_row;
        for (int i = 0; ok && i < r - 1; i++)
            ok = zp->v.dims[i] == sc->v.dims[i];
        if (!ok)
            STEP_FAIL(x, s, "input zero_points must have the scales' shape with its last dimension %llu",
                      (unsigned long long)sh->zp_row);
    }
    return 0;
}

static int infer_gbq(eng_exec *x, const step *s)
{
    gbq_shape sh;
    if (gbq_check(x, s, &sh) != 0)
        return -1;
    const rt_val *d = IN(x, s, 0), *ix = IN(x, s, 1);
    int64_t od[ENG_MAX_RANK];
    int k = 0;
    for (int i = 0; i < ix->v.rank; i++)
        od[k++] = ix->v.dims[i];
    for (int i = 1; i < d->v.rank - 1; i++)
        od[k++] = d->v.dims[i];
    od[k++] = (int64_t)sh.cols;
    return set_out(x, s, 0, ENG_DT_FLOAT, k, od);
}

/* Code e of a table of nibbles, low nibble first; signed (INT4) or not. */
static inline int32_t nibble(const uint8_t *p, uint64_t e, bool is_signed)
{
    int32_t v = (p[e >> 1] >> ((e & 1) * 4)) & 0x0F;
    return is_signed ? v - ((v & 8) << 1) : v;
}

static int run_gbq(eng_exec *x, const step *s)
{
    const rt_val *d = IN(x, s, 0), *ix = IN(x, s, 1), *scv = IN(x, s, 2);
    gbq_shape sh; /* infer_gbq checked these values in this run */
    gbq_derive(s, &d->v, &sh);
    const rt_val *zpv = s->n_in > 3 && s->in[3] >= 0 ? IN(x, s, 3) : NULL;
    const uint8_t *data = d->v.data, *zp = zpv ? zpv->v.data : NULL;
    const float *sc = scv->v.data;
    float *o = OUT(x, s, 0)->v.data;
    const int bits = s->p.gbq.bits;
    const uint64_t bs = (uint64_t)s->p.gbq.block, n = eng_view_numel(&ix->v);
    const bool uint8 = d->v.dtype == ENG_DT_UINT8, is_signed = d->v.dtype == ENG_DT_INT4;
    /* without zero points: the middle of the unsigned range in UINT8 data, 0 in INT4 / UINT4 codes */
    const int32_t zp_none = uint8 ? 1 << (bits - 1) : 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = int_at(&ix->v, i);
        if (v < -(int64_t)sh.rows || v >= (int64_t)sh.rows)
            STEP_FAIL(x, s, "index %lld out of range [-%llu, %llu)", (long long)v, (unsigned long long)sh.rows,
                      (unsigned long long)sh.rows);
    }
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = int_at(&ix->v, i);
        uint64_t row = (uint64_t)(v < 0 ? v + (int64_t)sh.rows : v);
        for (uint64_t j = 0; j < sh.sub_rows; j++) {
            uint64_t qr = row * sh.sub_rows + j; /* the quantized row */
            float *y = o + (i * sh.sub_rows + j) * sh.cols;
            const float *srow = sc + qr * sh.blocks;
            for (uint64_t b = 0; b < sh.blocks; b++) {
                int32_t z = zp_none;
                if (zp && uint8)
                    z = bits == 8 ? zp[qr * sh.zp_row + b] : nibble(zp + qr * sh.zp_row, b, false);
                else if (zp)
                    z = nibble(zp, qr * sh.blocks + b, is_signed);
                const float scale = srow[b];
                uint64_t e0 = b * bs, e1 = e0 + bs < sh.cols ? e0 + bs : sh.cols;
                if (uint8 && bits == 8) {
                    const uint8_t *q = data + qr * sh.cols;
                    for (uint64_t e = e0; e < e1; e++)
                        y[e] = (float)((int32_t)q[e] - z) * scale;
                } else {
                    for (uint64_t e = e0; e < e1; e++)
                        y[e] = (float)(nibble(data, qr * sh.cols + e, is_signed) - z) * scale;
                }
            }
        }
    }
    return 0;
}

const op_def op_gather_block_quantized = {
    .domain = OP_MS, .op = "GatherBlockQuantized",
    .min_in = 3, .max_in = 4, .min_out = 1, .max_out = 1,
    .attrs = {{"gather_axis", ENG_ATTR_INT, false}, {"quantize_axis", ENG_ATTR_INT, false},
              {"block_size", ENG_ATTR_INT, false}, {"bits", ENG_ATTR_INT, false}},
    .prepare = prep_gbq, .infer = infer_gbq, .run = run_gbq,
};
