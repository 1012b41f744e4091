/*
 * synth: writes a Qwen3 model folder in the exact graph form of the ONNX
 * Runtime GenAI builder's INT4 CPU export (graph-contract.md 6.3), at any
 * geometry, with deterministic random weights.
 *
 * Every weight element is a pure function of (seed, tensor id, index), so any
 * row can be regenerated on its own: the tied lm_head re-derives the embedding
 * rows, and tests compare the file against the generator. Tensors are produced
 * and streamed row by row; memory stays far below the size of the file.
 *
 * Called by `qwen3d synth` and by tests, on one thread.
 */
#ifndef QWEN3D_ENGINE_SYNTH_H
#define QWEN3D_ENGINE_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/writer/onnx_write.h"

/*
 * The graph contracts the writer produces for the same weights
 * (design.md section 1):
 *   ort-int4  the ONNX Runtime GenAI form (MatMulNBits, GroupQueryAttention, ...);
 *   int4-qdq  standard ONNX: every projection UINT4 [K, N] -> DequantizeLinear
 *             (axis 0, block 32, BF16 scales, UINT4 zero points) -> MatMul; the
 *             tied embedding / LM head one UINT4 [V, D] -> DequantizeLinear
 *             (axis 1) -> Gather, and -> Transpose -> MatMul; BF16 activations;
 *   float     standard ONNX with constant BF16 weights and BF16 activations;
 *   float32   its FP32 twin (the same graph with FP32 values).
 * The standard ones use opset 23 RMSNormalization, RotaryEmbedding and
 * Attention, or with `decomposed` their primitive decompositions. Their
 * public inputs and outputs are the ORT form's (FP32 KV and logits), reached
 * through Cast nodes.
 */
typedef enum eng_synth_contract {
    ENG_SYNTH_ORT_INT4 = 0,
    ENG_SYNTH_INT4_QDQ,
    ENG_SYNTH_FLOAT,
    ENG_SYNTH_FLOAT32,
} eng_synth_contract;

/*
 * How the BF16 values of int4-qdq and float are carried. ONNX Runtime has no
 * BF16 CPU kernels, so its references are the same graph with FP32 in their
 * place: the values are exact copies and the Casts to BF16 vanish (fp32), or
 * every computing node's output goes through Cast to BF16 and back
 * (bf16-round), which rounds where the BF16 graph rounds and so bounds how
 * far the BF16 graph's results may lie from the FP32 carrier's.
 */
typedef enum eng_synth_carrier {
    ENG_SYNTH_CARRIER_NATIVE = 0,
    ENG_SYNTH_CARRIER_FP32,
    ENG_SYNTH_CARRIER_BF16_ROUND,
} eng_synth_carrier;

/* "ort-int4", ...; and back (0, or -1 for an unknown name). */
const char *eng_synth_contract_name(eng_synth_contract c);
int eng_synth_contract_parse(const char *s, eng_synth_contract *out);
const char *eng_synth_carrier_name(eng_synth_carrier c);
int eng_synth_carrier_parse(const char *s, eng_synth_carrier *out);

typedef struct eng_synth_geom {
    char preset[16];
    int64_t layers;
    int64_t hidden;         /* D */
    int64_t intermediate;   /* I */
    int64_t q_heads;        /* Nq */
    int64_t kv_heads;       /* Nkv */
    int64_t head;           /* H */
    int64_t vocab;          /* V */
    int64_t context;        /* rows of cos_cache/sin_cache, genai context_length */
    bool f32_weights;       /* weights drawn as full fp32 values instead of bfloat16 ones */
    eng_synth_contract contract;
    bool decomposed;        /* standard contracts: primitive ops instead of the opset 23 ones */
    eng_synth_carrier carrier; /* int4-qdq and float: the ONNX Runtime reference variants */
    bool embed_int4;        /* ort-int4: the FP32 embedding holds the dequantized INT4 tied weight */
} eng_synth_geom;

/* Fills G for "tiny", "0.6b" or "4b"; -1 for any other name. */
int eng_synth_preset(const char *name, eng_synth_geom *g);

/* Quantization block along K, as MatMulNBits block_size. */
#define ENG_SYNTH_BLOCK 32

/* The projections, each stored as one MatMulNBits weight [N, K]. */
typedef enum {
    ENG_SYNTH_QKV,
    ENG_SYNTH_O,
    ENG_SYNTH_GATE,
    ENG_SYNTH_UP,
    ENG_SYNTH_DOWN,
    ENG_SYNTH_LM_HEAD,   /* the int4 copy of the tied fp32 embedding [V, D] */
} eng_synth_proj_kind;

/* How to regenerate one projection's float weights. */
typedef struct eng_synth_proj {
    uint32_t tensor_id;
    int64_t n, k;
    float amp;           /* elements are uniform in (-amp, amp) */
    bool bf16;           /* and rounded to bfloat16 (eng_synth_geom.f32_weights unset) */
} eng_synth_proj;

eng_synth_proj eng_synth_proj_of(const eng_synth_geom *g, int64_t layer, eng_synth_proj_kind kind);
/* Maps a MatMulNBits B initializer name written by synth to its projection; -1 if unknown. */
int eng_synth_proj_by_name(const eng_synth_geom *g, const char *b_name, eng_synth_proj *p);
/* ROW[0..k) = float weights W[n][0..k) of the projection, before quantization. */
void eng_synth_proj_row(const eng_synth_proj *p, uint64_t seed, int64_t n, float *row);

/* One generator draw: uniform in (-amp, amp), a pure function of its arguments. */
float eng_synth_uniform(uint64_t seed, uint32_t tensor_id, uint64_t index, float amp, bool bf16);

/*
 * Quantizes one weight row W[0..k) (k a multiple of ENG_SYNTH_BLOCK) the way
 * ONNX Runtime's symmetric blockwise quantizer does: per block, m = the signed
 * value of largest magnitude, scale = m / -8, q = clamp(round(w / scale) + 8,
 * 0, 15), two per byte with the even k in the low nibble. Writes k/2 bytes to
 * BLOB and k/32 scales.
 */
void eng_synth_q4_row(const float *w, int64_t k, uint8_t *blob, float *scales);

/*
 * Builds the whole model. With DATA_PATH set, weights are generated and
 * streamed to that file (recorded as LOCATION); with DATA_PATH NULL no weight
 * is generated at all and only the graph and its byte layout are built. On
 * failure returns NULL with a one-line message in ERR.
 */
eng_ow *eng_synth_build(const eng_synth_geom *g, uint64_t seed, const char *data_path, const char *location,
                        char *err, size_t errlen);

typedef struct eng_synth_result {
    size_t n_nodes, n_initializers;
    uint64_t onnx_bytes, data_bytes;
} eng_synth_result;

/*
 * Writes the folder DIR (created with its parents if needed): model.onnx.data,
 * genai_config.json, tokenizer.json and tokenizer_config.json copied from
 * TOKENIZER_DIR or TOKENIZER_DIR/models when it is non-NULL, and model.onnx
 * last, so a folder whose run was interrupted never holds a model.onnx. A
 * model.onnx already there is removed first. Returns 0, or -1 with ERR set.
 */
int eng_synth_write(const char *dir, const eng_synth_geom *g, uint64_t seed, const char *tokenizer_dir,
                    eng_synth_result *res, char *err, size_t errlen);

/* Told, on the calling thread, the bytes of model.onnx.data written so far and their total. */
typedef struct eng_synth_progress {
    eng_ow_progress_fn fn;
    void *ctx;
} eng_synth_progress;

/* eng_synth_write, reporting to PROGRESS (NULL for none) as the data file grows. */
int eng_synth_write_progress(const char *dir, const eng_synth_geom *g, uint64_t seed, const char *tokenizer_dir,
                             const eng_synth_progress *progress, eng_synth_result *res, char *err, size_t errlen);

/* Writes genai_config.json for G to PATH. */
int eng_synth_genai_config(const eng_synth_geom *g, const char *path, char *err, size_t errlen);

#endif
