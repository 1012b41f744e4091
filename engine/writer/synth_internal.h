/*
 * synth_internal: what the two halves of the model writer share, private to
 * engine/writer/synth*.c: the generator's tensor ids and draws, the graph builder's
 * state and its naming and constant helpers. synth.c writes the ONNX Runtime
 * GenAI form and the model folder; synth_std.c the standard-ONNX contracts.
 *
 * Threads: one builder belongs to one thread.
 */
#ifndef QWEN3D_ENGINE_SYNTH_INTERNAL_H
#define QWEN3D_ENGINE_SYNTH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/writer/synth.h"

#define ROPE_THETA 1000000.0f
#define RMS_EPS 1e-6f
#define MAX_CONSTS 64
#define NAME_MAX_LEN 192

/* Tensor ids of the generator: one per weight tensor. */
enum {
    TID_EMBED = 1,
    TID_FINAL_NORM = 2,
};
enum {
    LT_INPUT_LN = 1,
    LT_QKV,
    LT_Q_NORM,
    LT_K_NORM,
    LT_O,
    LT_POST_LN,
    LT_GATE,
    LT_UP,
    LT_DOWN,
};

uint32_t synth_layer_tid(int64_t layer, int kind);
uint64_t synth_tensor_key(uint64_t seed, uint32_t tid);
/* OUT[0..count) = draws first.. of the tensor with key KEY, uniform in (-amp, amp). */
void synth_gen_span(uint64_t key, uint64_t first, int64_t count, float amp, bool bf16, float *out);
/* Norm weights near 1. */
void synth_gen_norm(uint64_t seed, uint32_t tid, int64_t n, bool bf16, float *out);

typedef struct synth {
    eng_ow *w;
    const eng_synth_geom *g;
    uint64_t seed;
    bool dry;                          /* no data file: generate nothing */
    char consts[MAX_CONSTS][NAME_MAX_LEN];
    int n_consts;
    float *row;                        /* one weight row, [max K] */
    uint8_t *blob;                     /* its int4 packing, [max K / 2] */
    char seqlens_k[NAME_MAX_LEN], total_len[NAME_MAX_LEN];
    /* the standard contracts (synth_std.c) */
    int32_t adt;                       /* activation and weight type: BFLOAT16, or FLOAT in the FP32 forms */
    bool round;                        /* FP32 carrier with a BF16 round trip after every computing node */
    uint16_t *row16;                   /* one row as bfloat16, [max K] */
    float *rsc;                        /* one row's block scales, [max K / 32] */
    char pos[NAME_MAX_LEN], pos_ids[NAME_MAX_LEN], mask[NAME_MAX_LEN];
    char cos[NAME_MAX_LEN], sin[NAME_MAX_LEN];
    char tied[NAME_MAX_LEN];           /* the dequantized (or constant) embedding [V, D] */
} synth;

__attribute__((format(printf, 3, 4)))
const char *synth_fmt(char *buf, size_t cap, const char *f, ...);
#define NAME(buf, ...) synth_fmt(buf, sizeof buf, __VA_ARGS__)

/* The output of the deduplicated INT64 Constant holding V (0-D when SCALAR). */
const char *synth_const_i64(synth *s, size_t n, const int64_t *v, bool scalar);
/* Constant node NODE giving value OUT, written once: a later call for the same OUT returns the first. */
const char *synth_const(synth *s, const char *out, const char *node, int32_t dt, int rank, const int64_t *dims,
                        const void *data, size_t bytes);
/* The graph inputs and outputs every contract shares (graph-contract.md 6.4). */
void synth_graph_io(synth *s);
/* The FP32 initializers cos_cache / sin_cache [context, H/2]. */
void synth_rope_caches(synth *s);
/* x as bfloat16 bits, rounded to nearest even. */
uint16_t synth_bf16(float x);
/* Writes N values of V into the open initializer as DT (FLOAT or BFLOAT16). */
void synth_write_row(synth *s, const float *v, int64_t n, int32_t dt);
/* A norm weight [N] of dtype DT (FLOAT or BFLOAT16). */
void synth_norm_init(synth *s, const char *name, uint32_t tid, int64_t n, int32_t dt);

/* The standard contracts' graph (synth_std.c), into s->w after its I/O. */
void synth_std_graph(synth *s);

#endif
