/*
 * krn: the kernel layer's public interface.
 *
 * Owns the argument structs and signatures of every compute kernel the engine
 * runs, the dispatch table of those kernels for one instruction-set level, and
 * the CPU probe that picks the level. The engine's execution plan fills one
 * argument struct per step at plan time (tensors bound, shapes fixed) and at run
 * time calls `fn(&args, begin, end)` from each compute worker with that worker's
 * slice of the step's work items. Kernels never allocate, lock, start threads or
 * do I/O; scratch memory they need (quantized activations) is passed in by the
 * caller, sized by the matching *_size() function.
 *
 * Threads: krn_init() runs once on the main thread before any worker starts; it
 * is the only writer of the active table. Everything else is read-only or pure
 * and may be called from any thread. Two calls with disjoint ranges on the same
 * argument struct write disjoint output and may run concurrently.
 *
 * Levels: ref (portable scalar C, the numerical reference), avx2 (AVX2 + FMA +
 * F16C), avx512 (AVX-512 F/BW/VL, using VNNI when present). A level is only ever
 * selected when the CPU and OS support it; QWEN3D_KERNELS=ref|avx2|avx512 lowers
 * the choice (it is capped at what the CPU has). QWEN3D_CPU_HIDE=avx512vnni,...
 * makes the probe report the named features absent, so tests run the tables
 * and the choice of a smaller CPU on a bigger one (it never adds a feature).
 * Ops a level does not speed up reuse the next lower level's kernel, and the
 * kernel's name says which one runs.
 */
#ifndef QWEN3D_KERNELS_KRN_H
#define QWEN3D_KERNELS_KRN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */

/* X(name, value, message): one table yields the codes and krn_strerror(). */
#define KRN_ERRORS(X)                                                         \
    X(KRN_OK, 0, "success")                                                   \
    X(KRN_EINVAL, -1, "invalid kernel arguments")                             \
    X(KRN_ERANGE, -2, "index out of range")                                   \
    X(KRN_ENOTSUP, -3, "kernel level not supported by this CPU or build")     \
    X(KRN_EENV, -4, "QWEN3D_KERNELS must be one of ref, avx2, avx512; QWEN3D_CPU_HIDE a list of cpu features")

enum krn_error {
#define KRN_ERR_ENUM(name, value, msg) name = value,
    KRN_ERRORS(KRN_ERR_ENUM)
#undef KRN_ERR_ENUM
};

/* Message for a code from KRN_ERRORS; "unknown kernel error" otherwise. */
const char *krn_strerror(int err);

/* ------------------------------------------------------------------------- */
/* Levels and CPU features                                                    */

typedef enum krn_level {
    KRN_LEVEL_REF = 0,
    KRN_LEVEL_AVX2 = 1,
    KRN_LEVEL_AVX512 = 2,
    KRN_LEVEL_COUNT
} krn_level;

/* What CPUID reports and XGETBV confirms the OS saves (so AVX state is usable). */
typedef struct krn_cpu_features {
    bool avx2, fma, f16c;            /* with OS YMM support */
    bool avx512f, avx512bw, avx512vl; /* with OS ZMM/opmask support */
    bool avx512vnni;                 /* VPDPBUSD on ZMM/YMM (EVEX) */
    bool avxvnni;                    /* VPDPBUSD on YMM (VEX), no AVX-512 needed */
} krn_cpu_features;

/* Probes the running CPU, less what QWEN3D_CPU_HIDE names. Cheap enough to call more than once. */
krn_cpu_features krn_cpu_detect(void);

/* The highest level this CPU and this build can run. */
krn_level krn_cpu_best_level(void);

/* "ref", "avx2", "avx512"; "?" for anything else. */
const char *krn_level_name(krn_level level);

/* Parses a level name as QWEN3D_KERNELS spells it; 0 or KRN_EINVAL. */
int krn_level_parse(const char *s, krn_level *out);

/* ------------------------------------------------------------------------- */
/* MatMulNBits (com.microsoft, bits = 4 or 8)                                 */

/*
 * The weights as the ONNX file stores them, bound once at plan time.
 * 4 bits: element (n, k) lives in block b = k / block_size, byte
 * b_data[(n * k_blocks + b) * block_size / 2 + (k % block_size) / 2],
 * even k in the low nibble; zero points two per byte, 8 when absent.
 * 8 bits (bits8): byte b_data[(n * k_blocks + b) * block_size + k % block_size];
 * zero points one byte per block, zero_pts[n * k_blocks + b], 128 when absent
 * (the layout ONNX Runtime's quantizer writes for bits = 8, as mixed-precision
 * exports use for their most sensitive projections and the LM head).
 * W[n][k] = (q - zp[n][b]) * scales[n * k_blocks + b].
 * 8-bit weights run the mmnb8_* kernels, from a packed copy on tables with
 * q8_packed, else in place.
 */
typedef struct krn_q4_weights {
    const uint8_t *b_data;   /* [n, k_blocks, block_size / 2] */
    const void *packed;      /* NULL, or krn_q4_pack() of these weights (see below) */
    bool packed_bf16;        /* the packed copy holds the scales as bfloat16 (see below) */
    bool packed_zp;          /* the packed copy holds a zero point per column and block (see below) */
    const float *scales;     /* [n * k_blocks]; may be negative */
    const uint8_t *zero_pts; /* [n, (k_blocks + 1) / 2], even block in the low nibble; NULL = 8 (bits8: [n, k_blocks]; NULL = 128) */
    bool bits8;              /* 8-bit codes (see above) */
    const float *bias;       /* [n] or NULL */
    size_t n;                /* output features */
    size_t k;                /* input features; the padding of the last block is ignored */
    size_t block_size;       /* power of two, >= 16 */
    size_t k_blocks;         /* ceil(k / block_size) */
} krn_q4_weights;

/*
 * One MatMulNBits call: y[m][n] = sum_{k < K} a[m][k] * W[n][k] (+ bias[n]).
 * Work items are output columns n in [0, w.n); every row m is done by each call.
 * mmnb_f32 reads `a` (fp32 dequantize-and-accumulate: accuracy_level 0/1);
 * mmnb_i8 reads `qa`, the activations quantized by quant_a8 with the same m, k
 * and block_size (ONNX Runtime's accuracy_level 4 numerics). mmnb8_f32 and
 * mmnb8_i8 are the same for weights with bits8 set, which the 4-bit kernels
 * never get. Every level's mmnb8_i8 gives the reference's bits: per block the
 * exact int32 dot of qa with (q - zp), then the reference's float steps.
 */
typedef struct krn_mmnb_args {
    krn_q4_weights w;
    size_t m;           /* rows of A and Y */
    const float *a;     /* [m, a_ld], first k used */
    size_t a_ld;
    const void *qa;     /* quantized A, see krn_quant_a8_size() */
    float *y;           /* [m, y_ld], columns [0, w.n) written */
    size_t y_ld;
} krn_mmnb_args;

typedef void (*krn_mmnb_fn)(const krn_mmnb_args *args, size_t n_begin, size_t n_end);

/* Fills k_blocks from k and block_size (callers may also set it themselves). */
void krn_q4_weights_set_blocks(krn_q4_weights *w);

/*
 * Optional repacking of the weights, once at plan time, into the order in
 * which the int8-mode kernels read them: columns in tiles of sixteen and, per
 * tile and block, two records of eight columns, each the columns' weight
 * bytes interleaved four at a time (one column per 32-bit vector lane)
 * followed by their eight scales, so a tile is one sequential stream and the
 * GEMM needs no horizontal reduction.
 * The packed copy has the same size as b_data plus scales (up to the padding
 * of a last partial tile). It exists for block sizes 32 (the form of the
 * exported Qwen3 graphs) to 256, where a record holds one block (block_size
 * / 32 groups of 32 k); krn_q4_pack_size() is 0 for the others. Weights
 * with zero points pack only with packed_zp set, and then each record also
 * holds its eight columns' zero points, one byte each (one byte per column
 * and block more than b_data plus scales, against the half byte of
 * zero_pts). Tables whose q4_packed flag is set run mmnb_i8 from w.packed
 * when it is non-NULL; every other kernel keeps reading b_data, scales and
 * zero_pts, which must stay valid. The layout is private to kernels/.
 * 8-bit weights (bits8) pack the same way, with records of sixteen columns
 * whose codes sit in the quantized activations' slot order (no unpacking, no
 * reorder); their zero points are one byte per column and block either
 * way. Only tables with q8_packed run mmnb8_i8 from that copy.
 */
size_t krn_q4_pack_size(const krn_q4_weights *w);

/*
 * Columns per tile of the packed form. The tiles follow each other, so the
 * pack of columns [t * KRN_Q4_PACK_TILE, (t + 1) * KRN_Q4_PACK_TILE) alone
 * is byte for byte tile t of the whole matrix's pack (which lets a caller
 * pack a matrix it has to gather column by column, one tile at a time).
 */
#define KRN_Q4_PACK_TILE 16

/*
 * Columns [off, off + n) of W as weights of their own, sharing W's storage
 * (data, scales, zero points, bias and packed copy): a kernel run on them
 * computes each of those columns exactly as on W. off must be a multiple of
 * KRN_Q4_PACK_TILE when W has a packed copy, and off + n <= W's n.
 */
krn_q4_weights krn_q4_columns(const krn_q4_weights *w, size_t off, size_t n);

/*
 * Version of the packed form's byte layout. Copies of packed weights kept
 * outside the process (the engine's prepared-weights cache) are keyed by
 * it: raise it with any change to what krn_q4_pack() writes.
 */
#define KRN_Q4_PACK_LAYOUT 5

/*
 * With packed_bf16 set, the packed copy keeps each scale as its upper 16
 * bits (bfloat16), which is exact, and only allowed, when every scale's low
 * 16 bits are zero: krn_q4_scales_fit_bf16(). Scales quantized from a
 * bfloat16 checkpoint (Qwen3's) have this form, since ONNX Runtime's
 * symmetric quantizer sets scale = -max / 8 from the block's bfloat16 value
 * of largest magnitude. The copy is then 144 instead of 160 bytes per block
 * of eight columns, the kernels read 10% fewer bytes, and the results are
 * bit for bit those of the fp32 scales.
 */
bool krn_q4_scales_fit_bf16(const float *scales, size_t count);

/*
 * Writes krn_q4_pack_size(w) bytes to dst (64-byte aligned): KRN_OK, or
 * KRN_EINVAL (the form does not apply, packed_bf16 is set and a scale
 * does not fit, or packed_zp is set without zero_pts).
 */
int krn_q4_pack(const krn_q4_weights *w, void *dst);

/*
 * Row n of W in fp32, out[k] = (q - zp) * scale for k < w->k: one output
 * column of the MatMul, which for a tied embedding is the embedding row of
 * token n. Read from the packed copy when w->packed is set (the form that
 * stays resident), else from b_data / scales / zero_pts. The product of a
 * 4-bit difference and a float scale is exact in fp32 for scales with at most
 * 19 significant bits (bfloat16 ones have 8), so both give the same bits.
 */
void krn_q4_dequant_row(const krn_q4_weights *w, size_t n, float *out);

/* Plan-time validation of a MatMulNBits binding: KRN_OK or KRN_EINVAL. */
int krn_mmnb_check(const krn_mmnb_args *args, bool int8_mode);

/*
 * Activation quantization for mmnb_i8, per row of A and per block of
 * block_size along K (as ONNX Runtime's CompInt8 path): amax = max|a|,
 * sA = amax / 127, qa = round-half-even(a * (127 / amax)) clamped to +-127,
 * all zero when amax == 0; entries past k are zero. The buffer layout is
 * private to the kernels (all levels agree on it). Work items are rows m.
 */
typedef struct krn_quant_args {
    const float *a;     /* [m, a_ld] */
    size_t a_ld;
    size_t m, k, block_size;
    void *qa;           /* krn_quant_a8_size(m, k, block_size) bytes, 64-byte alignment advised */
} krn_quant_args;

typedef void (*krn_quant_fn)(const krn_quant_args *args, size_t m_begin, size_t m_end);

/* Bytes of quantized-activation scratch for m rows of k values. */
size_t krn_quant_a8_size(size_t m, size_t k, size_t block_size);

/* ------------------------------------------------------------------------- */
/* MatMul with a constant float weight (standard ONNX MatMul)                  */

/*
 * y[m][n] = sum_{k < K} a[m][k] * W(k, n), with W read in place: element
 * (k, n) at w[k * w_ld + n] (the ONNX MatMul B [K, N]) or, with w_nk, at
 * w[n * w_ld + k] (its transpose, e.g. a tied embedding [V, D] as the LM
 * head); fp32, or bfloat16 widened exactly. Every level sums in the same
 * order, so all give the same bits: eight partial sums p_j over the k with
 * k % 8 == j, each adding the rounded products a * W in increasing k (no
 * fused multiply-add), then y = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)).
 * A row's result does not depend on the other rows. Work items are output
 * columns n in [0, n).
 */
typedef struct krn_mmf_args {
    const float *a;     size_t a_ld;     /* [m, a_ld] */
    const void *w;      size_t w_ld;
    bool w_bf16, w_nk;
    float *y;           size_t y_ld;     /* [m, y_ld] */
    size_t m, n, k;
} krn_mmf_args;

typedef void (*krn_mmf_fn)(const krn_mmf_args *args, size_t n_begin, size_t n_end);

/* ------------------------------------------------------------------------- */
/* RMSNorm (SimplifiedLayerNormalization) and SkipRMSNorm                     */

/*
 * Rows of n values. Row r of every tensor starts at
 * base + (r / group) * ld + (r % group) * n, so a [S, heads * H] view (e.g. the
 * q part of a fused QKV output with ld = its full width) normalizes per head
 * with n = H and group = heads. group 0 means 1.
 *   rmsnorm:       y = x / sqrt(mean(x^2) + eps) * gamma
 *   skip_rmsnorm:  v = x + skip (+ bias); sum = v if sum != NULL;
 *                  y = v / sqrt(mean(v^2) + eps) * gamma
 * mean(x^2) is accumulated in fp32 as ONNX Runtime does; y may alias x, and
 * sum may alias x or skip (the row is read before it is written).
 * Fused quantization: with qa non-NULL (and group <= 1), each finished row of
 * y is also quantized into record r of qa exactly as quant_a8 with k = n and
 * block_size = qa_block would do it, so a following int8-mode MatMulNBits can
 * skip its own quantization step (the bytes are identical; y is still written).
 * Work items are rows r in [0, rows).
 */
typedef struct krn_norm_args {
    const float *x;     size_t x_ld;
    const float *skip;  size_t skip_ld;  /* skip_rmsnorm only */
    const float *bias;                   /* [n] or NULL, skip_rmsnorm only */
    const float *gamma;                  /* [n] */
    float *y;           size_t y_ld;
    float *sum;         size_t sum_ld;   /* NULL: not stored */
    size_t rows, n, group;
    float eps;
    void *qa;           /* NULL, or krn_quant_a8_size(rows, n, qa_block) bytes */
    size_t qa_block;
} krn_norm_args;

typedef void (*krn_norm_fn)(const krn_norm_args *args, size_t r_begin, size_t r_end);

/* ------------------------------------------------------------------------- */
/* KV cache element types                                                      */

/*
 * What a KV cache stores: fp32, IEEE binary16 (uint16_t bit patterns), or
 * int8 rows with a scale (q8).
 *
 * fp16 rows are written from fp32 with round-to-nearest-even (overflow to
 * inf, NaN stays NaN) and widened exactly when read; every level produces
 * the same bits (the avx2 level through F16C, the reference in portable C).
 *
 * A q8 row of n values is n int8 codes followed by their fp32 scale s (4
 * bytes, unaligned): n + 4 one-byte elements, so strides count bytes. Value
 * d reads as (float)code[d] * s, one rounded product. Written from fp32 x:
 * with a = max |x_d|, s = a / 127 and code[d] = x_d / s rounded to nearest
 * even (within [-127, 127]); a row of zeros, or one whose s underflows to
 * 0, stores codes 0 and s = 0; a row holding inf or NaN stores codes 0 and
 * s = NaN, so whatever attends to it reads NaN as it would from an fp32
 * cache. Every level writes the same bytes (krn_kv_row_from_f32). The
 * error is at most s / 2 per value: about 0.4% of the row's largest
 * magnitude, against 0.05% of each value for fp16, for a quarter of fp32's
 * bytes. Attention over a q8 cache takes each query row as int16 codes
 * with one scale (error 0.0015% of its largest magnitude) and a key's score
 * as their exact integer dot product times both scales: the same bits on
 * every level, and a quarter of the work of widening the keys to floats.
 */
typedef enum krn_kv_type { KRN_KV_F32 = 0, KRN_KV_F16 = 1, KRN_KV_Q8 = 2 } krn_kv_type;

/* Whether T names one of the types above (a value from outside may not). */
static inline bool krn_kv_type_known(krn_kv_type t)
{
    return t == KRN_KV_F32 || t == KRN_KV_F16 || t == KRN_KV_Q8;
}

/* Bytes of one element of a cache of type T (a q8 code, its scale counting as four). */
static inline size_t krn_kv_elem_bytes(krn_kv_type t)
{
    return t == KRN_KV_F32 ? 4 : t == KRN_KV_F16 ? 2 : 1;
}

/* Elements of one row of N values: N, and 4 more for a q8 row's scale. */
static inline size_t krn_kv_row_elems(krn_kv_type t, size_t n)
{
    return t == KRN_KV_Q8 ? n + 4 : n;
}

/* Writes the N values of X as one row of type T at ROW (the bytes every level writes). */
void krn_kv_row_from_f32(krn_kv_type t, const float *x, size_t n, void *row);
/* Value D of a row of N values of type T. */
float krn_kv_row_value(krn_kv_type t, const void *row, size_t n, size_t d);

/*
 * Stores rows into a KV cache: for token t and head h the n floats at
 * x + t*x_tok_stride + h*x_head_stride go to y + t*y_tok_stride + h*y_head_stride
 * (strides in elements of each side's type), as fp32 copies or converted to
 * fp16 per y_type. Work items are (t, h) pairs, item = t * n_heads + h.
 */
typedef struct krn_rows_args {
    const float *x;
    size_t x_tok_stride, x_head_stride;
    void *y;
    size_t y_tok_stride, y_head_stride;
    size_t n_tok, n_heads, n;
    krn_kv_type y_type;
} krn_rows_args;

typedef void (*krn_rows_fn)(const krn_rows_args *args, size_t i_begin, size_t i_end);

/* ------------------------------------------------------------------------- */
/* Rotary embedding                                                            */

/*
 * For token t and head h, the head vector at x + t*x_tok_stride + h*x_head_stride
 * is rotated by the cache row p = pos[t] and written to the same place under y
 * (y may equal x with equal strides, or point into a KV cache, whose element
 * type y_type may be fp16 or q8: the rotated fp32 values are then rounded as
 * krn_kv_type describes; y strides count elements of that type). With R = rot_dim,
 * c_i = cos_cache[p * cache_ld + i], s_i = sin_cache[...], i < R/2:
 *   half split:  y[i] = x[i] c_i - x[i+R/2] s_i,  y[i+R/2] = x[i+R/2] c_i + x[i] s_i
 *   interleaved: y[2i] = x[2i] c_i - x[2i+1] s_i,  y[2i+1] = x[2i+1] c_i + x[2i] s_i
 * Elements [R, head_dim) are copied. Positions are checked at plan time by the
 * caller (0 <= pos < cache rows). Work items are (t, h) pairs, item = t * n_heads + h.
 */
typedef struct krn_rotary_args {
    const float *x;
    void *y;                             /* float, or a KV cache row of y_type */
    size_t x_tok_stride, x_head_stride;  /* floats */
    size_t y_tok_stride, y_head_stride;  /* elements of y_type */
    size_t n_tok, n_heads, head_dim, rot_dim;
    const float *cos_cache, *sin_cache;  /* [rows, cache_ld], first rot_dim/2 used */
    size_t cache_ld;
    const int64_t *pos;                  /* [n_tok] */
    bool interleaved;
    krn_kv_type y_type;                  /* KRN_KV_F32 (0) unless writing an fp16 or q8 cache */
} krn_rotary_args;

typedef void (*krn_rotary_fn)(const krn_rotary_args *args, size_t i_begin, size_t i_end);

/* ------------------------------------------------------------------------- */
/* GroupQueryAttention core (batch 1)                                          */

/*
 * q holds S new query rows, already rotated. The K/V cache already holds the
 * rotated keys and the values of the P past tokens and of the S new ones:
 * element (kv head g, token t, d) is at k_cache[g*kv_head_stride + t*kv_tok_stride + d]
 * (the ONNX present tensor [1, Nkv, T, H] has kv_head_stride = T*H, kv_tok_stride = H).
 * New token s sees cache rows j in [0, P + s] (causal), restricted to
 * j >= P + s + 1 - local_window when local_window >= 0. For query head h the kv
 * head is h / (n_heads / n_kv_heads).
 *   score_j = scale * dot(q, k_j); if softcap > 0: softcap * tanh(score_j / softcap)
 *   out = sum_j softmax(score)_j v_j   (fp32, max-subtracted)
 * The cache holds fp32, fp16 or q8 per kv_type (strides count its elements,
 * bytes for q8, whose rows are head_dim + 4 long).
 * Work items are (s, h) pairs ordered by kv head first: with G = n_heads /
 * n_kv_heads, item = (g * S + s) * G + (h - g * G) for kv head g = h / G (for
 * S = 1 simply item = h). An even split of the items thus gives each worker
 * whole kv heads over all tokens, which balances causal prefill, keeps each
 * head's K/V in one core's cache, and lets query blocks of several tokens
 * share each pass over the keys.
 * The kernels keep a bounded amount of state on the stack (an online softmax
 * over blocks of keys): nothing proportional to the context or to S x T.
 */
typedef struct krn_gqa_args {
    const float *q;       size_t q_ld;   /* [S, q_ld], head h at column h*head_dim */
    const void *k_cache, *v_cache;       /* rows of kv_type */
    size_t kv_head_stride, kv_tok_stride; /* elements */
    float *out;           size_t out_ld; /* [S, out_ld] */
    size_t seq;                          /* S */
    size_t past;                         /* P */
    size_t n_heads, n_kv_heads, head_dim;
    float scale;                         /* 1/sqrt(head_dim) when the graph says 0 */
    int64_t local_window;                /* -1: off */
    float softcap;                       /* 0: off */
    krn_kv_type kv_type;                 /* KRN_KV_F32 (0), KRN_KV_F16 or KRN_KV_Q8 */
    /*
     * The rows are prompt tokens: they take the arithmetic of a prompt's
     * rows (the prefill path) whatever S is, also S = 1, so a prompt's
     * results do not depend on how it was cut into chunks. Without it a
     * one-token step takes the decode path, whose reduction order differs.
     */
    bool prompt;
} krn_gqa_args;

typedef void (*krn_gqa_fn)(const krn_gqa_args *args, size_t i_begin, size_t i_end);

/* Largest head_dim the attention kernels accept (they keep one head on the stack). */
#define KRN_MAX_HEAD_DIM 512

/* Plan-time validation: KRN_OK or KRN_EINVAL. */
int krn_gqa_check(const krn_gqa_args *args);

/* ------------------------------------------------------------------------- */
/* Elementwise and gather                                                      */

/*
 * y[i] = f(a[i]) or f(a[i], b[i]) for i in the range, over n elements:
 *   sigmoid: 1 / (1 + exp(-a)), computed without overflow for any a
 *   mul: a * b     add: a + b
 *   silu_mul: (a * sigmoid(a)) * b   (SiLU(gate) * up, same rounding order as
 *             the graph's Mul(Mul(g, Sigmoid(g)), u))
 * y may alias a or b. Work items are element indices.
 */
typedef struct krn_ew_args {
    const float *a, *b;
    float *y;
    size_t n;
} krn_ew_args;

typedef void (*krn_ew_fn)(const krn_ew_args *args, size_t i_begin, size_t i_end);

/*
 * Embedding lookup: y[i] = table[idx[i]] (rows of n_cols floats); a negative
 * index counts from the end (ONNX Gather). Work items are i in [0, n_idx).
 * Returns KRN_ERANGE (writing nothing for that row and later ones) if an index
 * is outside [-n_rows, n_rows), else KRN_OK.
 */
typedef struct krn_gather_args {
    const float *table;  size_t table_ld; /* [n_rows, table_ld] */
    size_t n_rows, n_cols;
    const int64_t *idx;  size_t n_idx;
    float *y;            size_t y_ld;     /* [n_idx, y_ld] */
} krn_gather_args;

typedef int (*krn_gather_fn)(const krn_gather_args *args, size_t i_begin, size_t i_end);

/* ------------------------------------------------------------------------- */
/* Dispatch table                                                              */

/*
 * One entry per op: the function and its name ("mmnb_i8.avx2", ...), which the
 * plan stores with each step so `inspect` can print what executes every node.
 */
typedef struct krn_table {
    krn_level level;
    const char *level_name;
    bool q4_packed;        /* mmnb_i8 reads krn_q4_weights.packed when it is set */
    bool q8_packed;        /* mmnb8_i8 too (8-bit weights); others read 8-bit codes in place */
    struct { krn_quant_fn fn;  const char *name; } quant_a8;
    struct { krn_mmnb_fn fn;   const char *name; } mmnb_f32;
    struct { krn_mmnb_fn fn;   const char *name; } mmnb_i8;
    struct { krn_mmnb_fn fn;   const char *name; } mmnb8_f32;
    struct { krn_mmnb_fn fn;   const char *name; } mmnb8_i8;
    struct { krn_mmf_fn fn;    const char *name; } mm_f;
    struct { krn_norm_fn fn;   const char *name; } rmsnorm;
    struct { krn_norm_fn fn;   const char *name; } skip_rmsnorm;
    struct { krn_rotary_fn fn; const char *name; } rotary;
    struct { krn_rows_fn fn;   const char *name; } kv_store;
    struct { krn_gqa_fn fn;    const char *name; } gqa;
    struct { krn_ew_fn fn;     const char *name; } sigmoid;
    struct { krn_ew_fn fn;     const char *name; } mul;
    struct { krn_ew_fn fn;     const char *name; } add;
    struct { krn_ew_fn fn;     const char *name; } silu_mul;
    struct { krn_gather_fn fn; const char *name; } gather;
} krn_table;

/*
 * Probes the CPU, applies QWEN3D_KERNELS and fills the active table. Call once
 * before starting workers. Returns KRN_OK, or KRN_EENV when QWEN3D_KERNELS,
 * QWEN3D_CPU_HIDE or QWEN3D_PREFETCH holds an unknown name (the table is then
 * filled for the best level the probe allows, with both prefetches).
 */
int krn_init(void);

/*
 * The software prefetches of the packed kernels' weight stream (bits of
 * krn_stream_prefetch()): each block of a row block's first register tile
 * asks L1 for its lines a few KiB ahead (KRN_PF_L1) and L2 16 KiB ahead
 * (KRN_PF_L2). Both by default; QWEN3D_PREFETCH=l1+l2|l2|none chooses, to
 * measure a CPU's own prefetchers against them (on a Zen 5 EPYC L2 alone was
 * faster on some shapes and slower on others: bench/README). Results keep
 * their bits in every mode.
 */
#define KRN_PF_L1 1u
#define KRN_PF_L2 2u
#define KRN_PF_DEFAULT (KRN_PF_L1 | KRN_PF_L2)
unsigned krn_stream_prefetch(void);

/* The active table: the ref level until krn_init() has run. */
const krn_table *krn_active(void);

/*
 * Fills *out with the kernels of one level, independent of the active table
 * (tests and benchmarks compare levels with it). KRN_ENOTSUP if the CPU or the
 * build lacks that level.
 */
int krn_table_for_level(krn_level level, krn_table *out);

/*
 * One line describing the active choice, e.g.
 * "kernels avx2 (cpu: avx2 fma f16c; QWEN3D_KERNELS=avx512 capped to avx2), weight prefetch l1+l2".
 * Returns what snprintf returns. A buffer of KRN_DESCRIBE_LEN bytes holds the
 * longest line krn.c can make (it asserts so), so callers size theirs with it.
 */
#define KRN_DESCRIBE_LEN 384
int krn_describe(char *buf, size_t len);

/* F to IEEE binary16 as the f16 cache stores it (F16C rounding: nearest even). Pure. */
uint16_t krn_f16_from_f32(float f);

#endif
