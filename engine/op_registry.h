/*
 * op_registry: one row per supported op, private to engine/.
 *
 * A row holds all that qwen3d knows of an op: the arity and the attributes
 * the loader accepts (model.c rejects any other attribute, since running a
 * node while ignoring part of its definition would compute something else),
 * and the plan's prepare(), infer() and run() (plan.c, exec.c). The rows
 * live in the op-family files beside their functions (op_shape.c,
 * op_math.c, op_norm.c, op_matmul.c, op_attention.c, op_gather_quant.c);
 * plan.c lists them.
 * Adding an op is one row and its three functions.
 *
 * Threads: the rows are constant.
 */
#ifndef QWEN3D_ENGINE_OP_REGISTRY_H
#define QWEN3D_ENGINE_OP_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

#define OP_MS "com.microsoft"
#define OP_MAX_ATTRS 16

typedef struct step step;
typedef struct plan_builder plan_builder;
typedef struct eng_exec eng_exec;

typedef struct op_attr_spec {
    const char *name;
    int type;              /* ENG_ATTR_* */
    bool required;
} op_attr_spec;

typedef struct op_def {
    const char *domain;    /* "" for ai.onnx */
    const char *op;
    /* what the loader checks */
    unsigned min_in, max_in, min_out, max_out;
    uint32_t may_be_empty; /* bit i: input i < min_in may still be "" */
    op_attr_spec attrs[OP_MAX_ATTRS]; /* terminated by an entry with name NULL */
    /* what the plan runs */
    int (*prepare)(plan_builder *b, step *s);
    int (*infer)(eng_exec *x, const step *s);  /* NULL: folded at plan time */
    int (*run)(eng_exec *x, const step *s);
    bool shape_op;         /* integer op run in the shape pass too */
    bool places_outputs;   /* the op sets its outputs' storage itself (views) */
} op_def;

/* The row of DOMAIN::OP ("" or "ai.onnx" for the default domain), or NULL. */
const op_def *plan_op_find(const char *domain, const char *op);

#endif
