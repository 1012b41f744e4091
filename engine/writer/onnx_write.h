/*
 * onnx_write: builds an ONNX ModelProto (protobuf-c types of engine/onnx.proto)
 * and writes model.onnx plus one external data file.
 *
 * Used by `qwen3d synth` and by tests that need small single-node models.
 * Large initializers are streamed into the data file as they are produced
 * (begin / write chunks / end), so no tensor ever has to be held in memory
 * whole. The data file follows the layout real writers use: a tensor larger
 * than 1 MiB starts at a multiple of 64 KiB, smaller ones are packed back to
 * back, and each gets external_data {location, offset, length}.
 *
 * Errors are sticky: the first failure is recorded (one line naming the node,
 * tensor or file at fault), every later call returns -1 without doing
 * anything, and eng_ow_error() returns the message. Callers may therefore
 * issue a whole sequence of calls and check once at the end.
 *
 * An eng_ow belongs to one thread.
 */
#ifndef QWEN3D_ENGINE_ONNX_WRITE_H
#define QWEN3D_ENGINE_ONNX_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/onnx.pb-c.h"

typedef struct eng_ow eng_ow;

/* One graph input/output dimension: symbolic when param is non-NULL. */
typedef struct eng_ow_dim {
    const char *param;
    int64_t value;
} eng_ow_dim;

#define ENG_OW_FIXED(v) ((eng_ow_dim){NULL, (v)})
#define ENG_OW_SYM(s) ((eng_ow_dim){(s), 0})

/*
 * Expands to "count, array" for a list of strings, e.g.
 * eng_ow_node(w, "Add", "", "add0", ENG_OW_LIST("a", "b"), ENG_OW_LIST("c")).
 */
#define ENG_OW_LIST(...) \
    (sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), ((const char *const[]){__VA_ARGS__})

/* Tensors larger than this start at a multiple of ENG_OW_ALIGN in the data file. */
#define ENG_OW_ALIGN_THRESHOLD (UINT64_C(1) << 20)
#define ENG_OW_ALIGN (UINT64_C(1) << 16)

/* A model with ir_version 10, producer "qwen3d" and a graph named GRAPH_NAME. NULL on OOM. */
eng_ow *eng_ow_new(const char *graph_name);
void eng_ow_free(eng_ow *w);

/* The first error recorded, or NULL. */
const char *eng_ow_error(const eng_ow *w);

/* Records a failure found by the caller (e.g. while producing tensor data); returns -1. */
int eng_ow_fail(eng_ow *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int eng_ow_opset(eng_ow *w, const char *domain, int64_t version);

/* Graph inputs, outputs and value_info entries. */
int eng_ow_input(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims);
int eng_ow_output(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims);
int eng_ow_value_info(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims);

/*
 * Appends a node. DOMAIN "" (or NULL) is ai.onnx. Input and output names may be
 * "" to mark an absent optional slot, anywhere in the list. The eng_ow_attr_*
 * calls that follow add attributes to this node.
 */
int eng_ow_node(eng_ow *w, const char *op_type, const char *domain, const char *name,
                size_t n_inputs, const char *const *inputs, size_t n_outputs, const char *const *outputs);

int eng_ow_attr_int(eng_ow *w, const char *name, int64_t v);
int eng_ow_attr_float(eng_ow *w, const char *name, float v);
int eng_ow_attr_ints(eng_ow *w, const char *name, size_t n, const int64_t *v);
int eng_ow_attr_floats(eng_ow *w, const char *name, size_t n, const float *v);
int eng_ow_attr_string(eng_ow *w, const char *name, const char *s);
/* A TENSOR attribute holding NBYTES of DATA inline as raw_data; TNAME may be NULL. */
int eng_ow_attr_tensor(eng_ow *w, const char *name, const char *tname, int32_t dtype,
                       size_t rank, const int64_t *dims, const void *data, size_t nbytes);

/* A Constant node whose "value" tensor (named OUTPUT) holds DATA inline. */
int eng_ow_constant(eng_ow *w, const char *node_name, const char *output, int32_t dtype,
                    size_t rank, const int64_t *dims, const void *data, size_t nbytes);

/*
 * Opens (truncates) the external data file at PATH; LOCATION is the name
 * recorded in external_data, relative to the model file's folder. Without a
 * data file, external initializers are laid out and described exactly the
 * same, but their bytes go nowhere and need not be written at all (a dry run
 * that builds the graph of any model in milliseconds).
 */
int eng_ow_data_open(eng_ow *w, const char *path, const char *location);

/*
 * Progress of the data file: FN(CTX, bytes, TOTAL) each time a buffer of
 * gathered bytes (a few MiB) goes to the file, on the thread making the
 * eng_ow calls; TOTAL is passed through (a dry run of the same model gives
 * it). NULL stops the calls.
 */
typedef void (*eng_ow_progress_fn)(void *ctx, uint64_t written, uint64_t total);
void eng_ow_set_progress(eng_ow *w, eng_ow_progress_fn fn, void *ctx, uint64_t total);

/* An initializer stored inline (raw_data) in model.onnx. */
int eng_ow_init_inline(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims,
                       const void *data, size_t nbytes);

/*
 * An external initializer streamed into the data file: begin, then any number
 * of writes totalling exactly prod(dims) * sizeof(dtype) bytes, then end. Only
 * one may be open at a time. The location is the one given to data_open, or
 * "model.onnx.data" in a dry run.
 */
int eng_ow_init_begin(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims);
int eng_ow_init_write(eng_ow *w, const void *data, size_t nbytes);
int eng_ow_init_end(eng_ow *w);
/* begin + write + end in one call. */
int eng_ow_init_external(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims,
                         const void *data, size_t nbytes);

/*
 * Flushes and closes the data file, then writes the model to PATH through a
 * temporary file renamed into place, so PATH never holds a partial model.
 */
int eng_ow_save(eng_ow *w, const char *path);
/* Serializes the model into a malloc'd buffer. */
int eng_ow_pack(eng_ow *w, uint8_t **out, size_t *len);

/* The model under construction; read-only, valid until the next call that changes it. */
const Onnx__ModelProto *eng_ow_model(const eng_ow *w);
size_t eng_ow_n_nodes(const eng_ow *w);
size_t eng_ow_n_initializers(const eng_ow *w);
/* Bytes of the data file so far, padding included. */
uint64_t eng_ow_data_bytes(const eng_ow *w);

#endif
