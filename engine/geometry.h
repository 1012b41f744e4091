/*
 * geometry: the transformer's shape (layers, widths, heads, vocabulary) and
 * the role of every initializer, derived from the graph's structure alone.
 * Names and node order are never consulted, so any writer's file of the same
 * form gives the same answer. Pure functions of an immutable eng_graph.
 */
#ifndef QWEN3D_ENGINE_GEOMETRY_H
#define QWEN3D_ENGINE_GEOMETRY_H

#include <stdint.h>

#include "engine/model.h"

typedef struct eng_geometry {
    int64_t layers;        /* attention nodes: GroupQueryAttention, Attention, or decomposed (Softmax) */
    int64_t hidden;        /* embedding width D */
    int64_t heads;         /* query heads */
    int64_t kv_heads;
    int64_t head_size;     /* o_proj K / heads */
    int64_t vocab;         /* embedding rows */
    int64_t intermediate;  /* down_proj K */
    int64_t rotary_dim;    /* 2 * cos_cache columns */
    int64_t max_positions; /* cos_cache rows */
} eng_geometry;

/* Weight roles, for byte accounting and for the planner. */
typedef enum {
    ENG_ROLE_OTHER = 0,
    ENG_ROLE_INT4_WEIGHT,  /* MatMulNBits B */
    ENG_ROLE_SCALES,       /* MatMulNBits scales */
    ENG_ROLE_ZERO_POINTS,  /* MatMulNBits zero points */
    ENG_ROLE_EMBEDDING,    /* float table read by Gather */
    ENG_ROLE_NORM,         /* layer-norm gammas */
    ENG_ROLE_ROTARY,       /* cos/sin caches */
    ENG_ROLE_FLOAT_WEIGHT, /* constant FLOAT / BFLOAT16 MatMul weights (the float contracts) */
    ENG_ROLE_COUNT
} eng_weight_role;

const char *eng_weight_role_name(eng_weight_role r);

/* Role of initializer i (index into g->inits). */
eng_weight_role eng_initializer_role(const eng_graph *g, size_t i);

/* Fills geo; fields that cannot be derived are 0. Returns 0 when every field
 * was derived, else -1 with a problem per missing field in diag. */
int eng_graph_geometry(const eng_graph *g, eng_geometry *geo, eng_diag *diag);

#endif
