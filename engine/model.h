/*
 * model: the loaded ONNX graph of a model folder.
 *
 * eng_graph_load() parses model.onnx (protobuf-c, schema engine/onnx.proto),
 * maps every external data file read-only with mmap and points each
 * initializer into that mapping (never copying it; only tensors of at most
 * 256 KiB, norm weights and the like, are read into owned memory),
 * validates everything it can about the file (ranges, dtypes, dims, names,
 * opsets, ops, attributes, cycles) and reports all problems into an eng_diag.
 * On success the nodes are in topological order and every node input is
 * resolved to a value.
 *
 * The graph is immutable after load and may be read from any thread. Strings
 * and tensors point into memory owned by the graph; they live until
 * eng_graph_free().
 */
#ifndef QWEN3D_ENGINE_MODEL_H
#define QWEN3D_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"

#define ENG_MAX_RANK 8

/* ONNX TensorProto.DataType values used by qwen3d. */
enum {
    ENG_DT_UNDEFINED = 0,
    ENG_DT_FLOAT = 1,
    ENG_DT_UINT8 = 2,
    ENG_DT_INT8 = 3,
    ENG_DT_UINT16 = 4,
    ENG_DT_INT16 = 5,
    ENG_DT_INT32 = 6,
    ENG_DT_INT64 = 7,
    ENG_DT_STRING = 8,
    ENG_DT_BOOL = 9,
    ENG_DT_FLOAT16 = 10,
    ENG_DT_DOUBLE = 11,
    ENG_DT_UINT32 = 12,
    ENG_DT_UINT64 = 13,
    ENG_DT_BFLOAT16 = 16,
    ENG_DT_UINT4 = 21,
    ENG_DT_INT4 = 22,
};

/* Bytes per element of a byte-wide or wider dtype qwen3d can hold; 0 for any other (4-bit ones included). */
size_t eng_dtype_size(int32_t dtype);

/* Largest tensor accepted, in the file or computed at run time: far above any
 * real model, far below the point where sizes and offsets overflow. */
#define ENG_MAX_TENSOR_BYTES (UINT64_C(1) << 44)

/*
 * Checks a shape of RANK dims of ESIZE-byte elements: every dim is >= 0 and
 * the dims' product, with zero dims counted as 1, times ESIZE (1 if 0) is at
 * most ENG_MAX_TENSOR_BYTES. Zero dims count as 1 so that an empty tensor
 * cannot carry dims whose partial products (the rows before an axis, the
 * elements after it) overflow or make loops run for ages. Returns 0 and
 * sets the element count and byte size (either pointer may be NULL), or -1.
 */
int eng_shape_size(const int64_t *dims, int rank, size_t esize, uint64_t *n_elems, uint64_t *nbytes);
/* Writes "[d0, d1, ...]" into BUF (cut to CAP bytes); returns BUF. */
const char *eng_shape_str(const int64_t *dims, int rank, char *buf, size_t cap);
/*
 * Bytes of COUNT elements of any dtype qwen3d can hold, 4-bit ones included
 * (two per byte, the first in the low nibble, the last byte padded); 0 for
 * an unknown dtype.
 */
uint64_t eng_dtype_bytes(int32_t dtype, uint64_t count);
/* "FLOAT", "INT64", ...; "dtype(N)" style names are not returned: unknown -> "UNKNOWN". */
const char *eng_dtype_name(int32_t dtype);

typedef struct eng_tensor {
    const char *name;
    int32_t dtype;
    int rank;
    int64_t dims[ENG_MAX_RANK];
    uint64_t n_elems;
    uint64_t nbytes;
    const void *data;     /* read-only, little-endian; NULL only when nbytes == 0 */
    bool external;        /* stored in an external data file (location, offset) */
    bool mapped;          /* external, and data points into that file's mapping (the
                           * small ones are read into owned memory instead) */
    const char *location; /* external: file name relative to the model folder */
    uint64_t offset;      /* external: byte offset in that file */
} eng_tensor;

/* ONNX AttributeProto.AttributeType values. */
enum {
    ENG_ATTR_FLOAT = 1,
    ENG_ATTR_INT = 2,
    ENG_ATTR_STRING = 3,
    ENG_ATTR_TENSOR = 4,
    ENG_ATTR_GRAPH = 5,
    ENG_ATTR_FLOATS = 6,
    ENG_ATTR_INTS = 7,
    ENG_ATTR_STRINGS = 8,
};

typedef struct eng_attr {
    const char *name;
    int type;              /* ENG_ATTR_* */
    float f;
    int64_t i;
    const char *s;         /* STRING: bytes, NUL-terminated copy */
    size_t s_len;
    const float *floats;
    size_t n_floats;
    const int64_t *ints;
    size_t n_ints;
    const eng_tensor *t;   /* TENSOR: decoded tensor */
} eng_attr;

typedef struct eng_dim {
    int64_t value;         /* >= 0 when fixed, -1 when symbolic or unknown */
    const char *param;     /* symbolic name, or NULL */
} eng_dim;

typedef struct eng_value_info {
    const char *name;
    int32_t dtype;
    int rank;              /* -1 when the file gives no shape */
    eng_dim dims[ENG_MAX_RANK];
} eng_value_info;

/* Where a named value comes from. */
typedef enum { ENG_VALUE_INPUT, ENG_VALUE_INITIALIZER, ENG_VALUE_NODE_OUTPUT } eng_value_kind;

typedef struct eng_value {
    const char *name;
    eng_value_kind kind;
    size_t index;          /* into inputs, inits or nodes */
    size_t slot;           /* NODE_OUTPUT: output position of the producing node */
} eng_value;

typedef struct eng_node {
    const char *name;      /* never NULL; "" when the file gives none */
    const char *op_type;
    const char *domain;    /* "" for ai.onnx, else e.g. "com.microsoft" */
    int64_t opset;         /* version imported for its domain */
    size_t n_inputs;
    const char **inputs;   /* "" marks an absent optional input */
    int *input_values;     /* index into values, -1 when absent */
    size_t n_outputs;
    const char **outputs;
    int *output_values;
    size_t n_attrs;
    eng_attr *attrs;
    size_t file_index;     /* position in the file, before topological sorting */
} eng_node;

typedef struct eng_graph {
    const char *dir;           /* model folder */
    const char *producer;
    int64_t ir_version;
    int64_t opset_onnx;        /* ai.onnx version imported */
    int64_t opset_ms;          /* com.microsoft version imported, 0 if none */
    size_t n_nodes;
    eng_node *nodes;           /* topological order */
    size_t n_inits;
    eng_tensor *inits;
    size_t n_inputs;
    eng_value_info *inputs;
    size_t n_outputs;
    eng_value_info *outputs;
    size_t n_values;
    eng_value *values;
    uint64_t onnx_file_bytes;
    uint64_t data_file_bytes;  /* sum of mapped external files */
    struct eng_graph_priv *priv;
} eng_graph;

/*
 * Loads DIR/model.onnx (or the file DIR names, if it is a file). Returns 0 and
 * sets *out, or returns -1 with every problem found added to diag.
 */
int eng_graph_load(const char *dir, eng_graph **out, eng_diag *diag);
void eng_graph_free(eng_graph *g);

/* Index into g->values of NAME, or -1. O(1) average. */
int eng_graph_value(const eng_graph *g, const char *name);
/* The initializer called NAME, or NULL. */
const eng_tensor *eng_graph_initializer(const eng_graph *g, const char *name);
/*
 * The files the graph was loaded from: I = 0 is model.onnx, 1.. the external
 * data files in the order first named. Writes the path into PATH (CAP bytes)
 * and returns 0, or -1 past the last file (or when the path does not fit).
 */
int eng_graph_source(const eng_graph *g, size_t i, char *path, size_t cap);
/* The node producing value NAME, or NULL. */
const eng_node *eng_graph_producer(const eng_graph *g, const char *name);

const eng_attr *eng_node_attr(const eng_node *n, const char *name);
/* The tensor of a Constant node (ai.onnx) whose one attribute is "value"; NULL for any other node. */
const eng_tensor *eng_node_constant(const eng_node *n);
int64_t eng_node_attr_int(const eng_node *n, const char *name, int64_t fallback);
float eng_node_attr_float(const eng_node *n, const char *name, float fallback);

#endif
