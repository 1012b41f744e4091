/*
 * test_loader: engine/model.c on a synthetic model and on corrupt variants.
 *
 * The base model is the `tiny` preset written by the real `qwen3d synth`. Each
 * corrupt case is made by unpacking its model.onnx with protobuf-c, changing
 * one thing, and packing it again (or by damaging the files). Every case must
 * fail to load with a diag line naming the problem, and `qwen3d inspect` on it
 * must exit 1 (not a signal) with "qwen3d: inspect: " error lines only.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/genai_config.h"
#include "engine/geometry.h"
#include "engine/model.h"
#include "engine/onnx.pb-c.h"
#include "tests/check_main.h"

static char base_dir[1024];
static char cases_dir[1024];

static void run_or_die(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
        exit(1);
    }
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    ck_assert(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_all(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "create %s", path);
    ck_assert(fwrite(buf, 1, len, f) == len);
    fclose(f);
}

static void setup_base(void)
{
    const char *bd = getenv("QD_BUILDDIR");
    const char *exe = getenv("QWEN3D");
    if (!bd || !exe) {
        fprintf(stderr, "QD_BUILDDIR and QWEN3D must be set (run through make check)\n");
        exit(1);
    }
    snprintf(base_dir, sizeof base_dir, "%s/tests/tmp/loader-tiny", bd);
    snprintf(cases_dir, sizeof cases_dir, "%s/tests/tmp/loader-cases", bd);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "test -f '%s/model.onnx' || '%s' synth --preset tiny --out '%s' >/dev/null",
             base_dir, exe, base_dir);
    run_or_die(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", cases_dir, cases_dir);
    run_or_die(cmd);
}

/* ---- the valid model ----------------------------------------------------- */

START_TEST(loads_synth_tiny)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    int rc = eng_graph_load(base_dir, &g, &d);
    if (rc != 0)
        eng_diag_print(&d, stderr, "loader");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->ir_version, 10);
    ck_assert_int_eq(g->opset_ms, 1);

    /* Every input of every node is produced before it (topological order). */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (!*n->inputs[j])
                continue;
            int v = n->input_values[j];
            ck_assert_int_ge(v, 0);
            if (g->values[v].kind == ENG_VALUE_NODE_OUTPUT)
                ck_assert_uint_lt(g->values[v].index, i);
        }
    }
    /* Initializers are external: the large ones point into the mapping at
     * their offset, those of at most 256 KiB into memory read from it (model.h).
     * Compare their bytes with the file read independently. */
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx.data", base_dir);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    size_t checked = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        const eng_tensor *t = &g->inits[i];
        ck_assert_msg(t->external, "initializer %s is not external", t->name);
        ck_assert_msg(t->mapped == (t->nbytes > ((uint64_t)256 << 10)), "initializer %s of %llu bytes is %smapped",
                      t->name, (unsigned long long)t->nbytes, t->mapped ? "" : "not ");
        uint8_t buf[64];
        size_t n = t->nbytes < sizeof buf ? t->nbytes : sizeof buf;
        ck_assert(pread(fd, buf, n, (off_t)t->offset) == (ssize_t)n);
        ck_assert_msg(memcmp(buf, t->data, n) == 0, "initializer %s maps the wrong bytes", t->name);
        checked++;
    }
    close(fd);
    ck_assert_uint_gt(checked, 10);

    eng_geometry geo;
    ck_assert_int_eq(eng_graph_geometry(g, &geo, &d), 0);
    ck_assert_int_eq(geo.layers, 2);
    ck_assert_int_eq(geo.hidden, 256);
    ck_assert_int_eq(geo.heads, 2);
    ck_assert_int_eq(geo.kv_heads, 1);
    ck_assert_int_eq(geo.head_size, 128);
    ck_assert_int_eq(geo.vocab, 151936);
    ck_assert_int_eq(geo.intermediate, 768);
    ck_assert_int_eq(geo.rotary_dim, 128);
    ck_assert_int_eq(geo.max_positions, 40960);
    eng_graph_free(g);
    eng_diag_clear(&d);
}
END_TEST

/* ---- corrupt cases --------------------------------------------------------- */

typedef struct corrupt_case {
    const char *name;
    const char *expect;                 /* substring of some diag line */
    void (*mutate)(Onnx__ModelProto *m); /* proto edits, or NULL */
    void (*damage)(const char *dir);     /* file edits after writing, or NULL */
} corrupt_case;

static Onnx__TensorProto *init_named_role(Onnx__ModelProto *m, const char *op, size_t slot, size_t nth)
{
    Onnx__GraphProto *g = m->graph;
    for (size_t i = 0; i < g->n_node; i++) {
        Onnx__NodeProto *n = g->node[i];
        if (strcmp(n->op_type, op) || n->n_input <= slot)
            continue;
        if (nth--)
            continue;
        for (size_t k = 0; k < g->n_initializer; k++)
            if (!strcmp(g->initializer[k]->name, n->input[slot]))
                return g->initializer[k];
    }
    ck_abort_msg("no initializer for %s input %zu", op, slot);
    return NULL;
}

static Onnx__NodeProto *node_of(Onnx__ModelProto *m, const char *op, size_t nth)
{
    for (size_t i = 0; i < m->graph->n_node; i++)
        if (!strcmp(m->graph->node[i]->op_type, op) && nth-- == 0)
            return m->graph->node[i];
    ck_abort_msg("no node %s", op);
    return NULL;
}

static void set_str(char **field, const char *s)
{
    free(*field);
    *field = strdup(s);
}

static void set_external(Onnx__TensorProto *t, const char *key, const char *value)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (!strcmp(t->external_data[i]->key, key)) {
            set_str(&t->external_data[i]->value, value);
            return;
        }
    ck_abort_msg("tensor %s has no external key %s", t->name, key);
}

static const char *get_external(Onnx__TensorProto *t, const char *key)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (!strcmp(t->external_data[i]->key, key))
            return t->external_data[i]->value;
    return NULL;
}

static void mut_offset_past_end(Onnx__ModelProto *m)
{
    set_external(init_named_role(m, "MatMulNBits", 1, 0), "offset", "1000000000000");
}

static void mut_length_past_end(Onnx__ModelProto *m)
{
    /* claim far more bytes than the data file holds */
    Onnx__TensorProto *t = init_named_role(m, "MatMulNBits", 2, 0);
    t->dims[0] = t->dims[0] * 100000;
    char len[64];
    snprintf(len, sizeof len, "%lld", (long long)t->dims[0] * 4);
    set_external(t, "length", len);
}

static void mut_wrong_length(Onnx__ModelProto *m)
{
    Onnx__TensorProto *t = init_named_role(m, "MatMulNBits", 2, 0);
    long long len = atoll(get_external(t, "length"));
    char s[64];
    snprintf(s, sizeof s, "%lld", len - 1);
    set_external(t, "length", s);
}

static void mut_wrong_dtype_size(Onnx__ModelProto *m)
{
    init_named_role(m, "MatMulNBits", 2, 0)->data_type = 7; /* INT64: twice FLOAT's size */
}

static void mut_unknown_dtype(Onnx__ModelProto *m)
{
    init_named_role(m, "MatMulNBits", 2, 1)->data_type = 99;
}

static void mut_negative_dim(Onnx__ModelProto *m)
{
    init_named_role(m, "SimplifiedLayerNormalization", 1, 0)->dims[0] = -256;
}

static void mut_dims_overflow(Onnx__ModelProto *m)
{
    Onnx__TensorProto *t = init_named_role(m, "MatMulNBits", 1, 0);
    for (size_t i = 0; i < t->n_dims; i++)
        t->dims[i] = INT64_C(1) << 40;
}

/* No elements, but dims whose product (zeros counted as 1) is 2^80: the plan's
 * row and stride products over them would overflow. */
static void mut_empty_huge_dims(Onnx__ModelProto *m)
{
    Onnx__TensorProto *t = init_named_role(m, "SimplifiedLayerNormalization", 1, 0);
    free(t->dims);
    t->dims = malloc(3 * sizeof *t->dims);
    t->dims[0] = 0;
    t->dims[1] = t->dims[2] = INT64_C(1) << 40;
    t->n_dims = 3;
    set_external(t, "length", "0");
}

static void mut_cycle(Onnx__ModelProto *m)
{
    /* Feed the second layer's attention output back into the first layer's QKV projection. */
    Onnx__NodeProto *qkv0 = node_of(m, "MatMulNBits", 0);
    Onnx__NodeProto *gqa1 = node_of(m, "GroupQueryAttention", 1);
    set_str(&qkv0->input[0], gqa1->output[0]);
}

static void mut_unknown_op(Onnx__ModelProto *m)
{
    set_str(&node_of(m, "Sigmoid", 0)->op_type, "Softplus");
}

static void mut_dangling_input(Onnx__ModelProto *m)
{
    set_str(&node_of(m, "Mul", 0)->input[1], "no_such_value");
}

static void mut_missing_output(Onnx__ModelProto *m)
{
    set_str(&m->graph->output[0]->name, "not_produced_anywhere");
}

static void mut_no_outputs(Onnx__ModelProto *m)
{
    for (size_t i = 0; i < m->graph->n_output; i++)
        onnx__value_info_proto__free_unpacked(m->graph->output[i], NULL);
    m->graph->n_output = 0;
}

static void mut_overlap(Onnx__ModelProto *m)
{
    /* two norm weights of the same size; make the second alias the first */
    Onnx__TensorProto *a = init_named_role(m, "SkipSimplifiedLayerNormalization", 2, 0);
    Onnx__TensorProto *b = init_named_role(m, "SkipSimplifiedLayerNormalization", 2, 1);
    set_external(b, "offset", get_external(a, "offset"));
}

static void mut_escaping_location(Onnx__ModelProto *m)
{
    set_external(init_named_role(m, "MatMulNBits", 1, 0), "location", "../model.onnx.data");
}

static void mut_bad_opset(Onnx__ModelProto *m)
{
    for (size_t i = 0; i < m->n_opset_import; i++)
        if (!m->opset_import[i]->domain || !*m->opset_import[i]->domain)
            m->opset_import[i]->version = 99;
}

static void mut_unknown_attribute(Onnx__ModelProto *m)
{
    set_str(&node_of(m, "MatMulNBits", 0)->attribute[0]->name, "weight_prepacked_by_magic");
}

static void mut_missing_required_attribute(Onnx__ModelProto *m)
{
    Onnx__NodeProto *n = node_of(m, "GroupQueryAttention", 0);
    for (size_t i = 0; i < n->n_attribute; i++)
        if (!strcmp(n->attribute[i]->name, "num_heads"))
            set_str(&n->attribute[i]->name, "kv_num_heads");
}

static void mut_duplicate_output(Onnx__ModelProto *m)
{
    set_str(&node_of(m, "Sigmoid", 1)->output[0], node_of(m, "Sigmoid", 0)->output[0]);
}

static void mut_bad_offset_text(Onnx__ModelProto *m)
{
    set_external(init_named_role(m, "MatMulNBits", 1, 0), "offset", "-12");
}

static void mut_attr_type(Onnx__ModelProto *m)
{
    Onnx__NodeProto *n = node_of(m, "MatMulNBits", 0);
    n->attribute[0]->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
}

static void damage_truncate_model(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    struct stat st;
    ck_assert(stat(p, &st) == 0);
    ck_assert(truncate(p, st.st_size / 2) == 0);
}

static void damage_empty_model(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    ck_assert(truncate(p, 0) == 0);
}

static void damage_garbage_model(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    uint8_t junk[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (uint8_t)(x >> 16);
    }
    write_all(p, junk, sizeof junk);
}

static void damage_missing_model(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    ck_assert(unlink(p) == 0);
}

static void damage_missing_data(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx.data", dir);
    ck_assert(unlink(p) == 0);
}

static void damage_truncate_data(const char *dir)
{
    /* replace the symlink by a copy of the first half of the data */
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/model.onnx.data", base_dir);
    snprintf(dst, sizeof dst, "%s/model.onnx.data", dir);
    ck_assert(unlink(dst) == 0);
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(in >= 0 && out >= 0);
    struct stat st;
    ck_assert(fstat(in, &st) == 0);
    off_t left = st.st_size / 2;
    static uint8_t buf[1 << 20];
    while (left > 0) {
        ssize_t n = read(in, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf);
        ck_assert(n > 0);
        ck_assert(write(out, buf, (size_t)n) == n);
        left -= n;
    }
    close(in);
    close(out);
}

static const corrupt_case cases[] = {
    {"truncated-protobuf", "protobuf truncated or corrupt", NULL, damage_truncate_model},
    {"empty-model", "file is empty", NULL, damage_empty_model},
    {"garbage-model", "not a valid ONNX model", NULL, damage_garbage_model},
    {"missing-model", "cannot open", NULL, damage_missing_model},
    {"missing-data-file", "external data file", NULL, damage_missing_data},
    {"truncated-data-file", "past the end", NULL, damage_truncate_data},
    {"offset-past-end", "past the end", mut_offset_past_end, NULL},
    {"length-past-end", "past the end", mut_length_past_end, NULL},
    {"wrong-length", "does not match", mut_wrong_length, NULL},
    {"wrong-dtype-size", "does not match", mut_wrong_dtype_size, NULL},
    {"unknown-dtype", "unsupported data type 99", mut_unknown_dtype, NULL},
    {"negative-dim", "negative dimension", mut_negative_dim, NULL},
    {"dims-overflow", "overflow", mut_dims_overflow, NULL},
    {"empty-tensor-huge-dims", "shape [0, 1099511627776, 1099511627776] overflows the largest tensor",
     mut_empty_huge_dims, NULL},
    {"cyclic-graph", "cycle", mut_cycle, NULL},
    {"unknown-op", "unsupported op ai.onnx::Softplus", mut_unknown_op, NULL},
    {"dangling-input", "'no_such_value' is not produced", mut_dangling_input, NULL},
    {"missing-graph-output", "graph output 'not_produced_anywhere'", mut_missing_output, NULL},
    {"no-graph-outputs", "declares no outputs", mut_no_outputs, NULL},
    {"overlapping-ranges", "overlap", mut_overlap, NULL},
    {"location-escapes-folder", "leaves the model folder", mut_escaping_location, NULL},
    {"unsupported-opset", "unsupported ai.onnx opset 99", mut_bad_opset, NULL},
    {"unknown-attribute", "unsupported attribute 'weight_prepacked_by_magic'", mut_unknown_attribute, NULL},
    {"missing-required-attribute", "required attribute 'num_heads'", mut_missing_required_attribute, NULL},
    {"duplicate-output", "defined twice", mut_duplicate_output, NULL},
    {"bad-offset-text", "not a non-negative integer", mut_bad_offset_text, NULL},
    {"wrong-attribute-type", "must be INT", mut_attr_type, NULL},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void make_case(const corrupt_case *c, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", cases_dir, c->name);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && ln -s '%s/model.onnx.data' '%s/model.onnx.data'",
             dir, dir, base_dir, dir);
    run_or_die(cmd);
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/model.onnx", base_dir);
    snprintf(dst, sizeof dst, "%s/model.onnx", dir);
    size_t len;
    uint8_t *bytes = read_all(src, &len);
    if (c->mutate) {
        Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, bytes);
        ck_assert_ptr_nonnull(m);
        c->mutate(m);
        size_t n = onnx__model_proto__get_packed_size(m);
        uint8_t *out = malloc(n);
        ck_assert_uint_eq(onnx__model_proto__pack(m, out), n);
        write_all(dst, out, n);
        free(out);
        onnx__model_proto__free_unpacked(m, NULL);
    } else {
        write_all(dst, bytes, len);
    }
    free(bytes);
    if (c->damage)
        c->damage(dir);
}

START_TEST(corrupt_file_rejected)
{
    const corrupt_case *c = &cases[_i];
    char dir[2048];
    make_case(c, dir, sizeof dir);

    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    ck_assert_int_eq(eng_graph_load(dir, &g, &d), -1);
    ck_assert_ptr_null(g);
    ck_assert_uint_gt(d.n_total, 0);
    bool found = false;
    for (size_t i = 0; i < d.n_kept; i++) {
        ck_assert_msg(strchr(d.lines[i], '\n') == NULL, "multi-line diag");
        if (strstr(d.lines[i], c->expect))
            found = true;
    }
    if (!found)
        eng_diag_print(&d, stderr, c->name);
    ck_assert_msg(found, "case %s: no diag line contains '%s'", c->name, c->expect);
    eng_diag_clear(&d);

    /* The command line reports it as error lines and a normal exit status. */
    char cmd[16384], errpath[4096];
    snprintf(errpath, sizeof errpath, "%s.stderr", dir);
    snprintf(cmd, sizeof cmd, "'%s' inspect --model '%s' >/dev/null 2>'%s'", getenv("QWEN3D"), dir, errpath);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st), "case %s: inspect did not exit normally", c->name);
    ck_assert_msg(WEXITSTATUS(st) == 1, "case %s: inspect exit status %d, want 1", c->name, WEXITSTATUS(st));
    size_t len;
    char *err = (char *)read_all(errpath, &len);
    err[len] = '\0';
    ck_assert_msg(len > 0, "case %s: nothing on stderr", c->name);
    for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
        ck_assert_msg(strncmp(line, "qwen3d: inspect: ", 17) == 0, "case %s: stray stderr line '%s'", c->name, line);
    free(err);
}
END_TEST

START_TEST(missing_folder)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    ck_assert_int_eq(eng_graph_load("/nonexistent-qwen3d-model-folder", &g, &d), -1);
    ck_assert_uint_eq(d.n_total, 1);
    ck_assert_ptr_nonnull(strstr(d.lines[0], "cannot open"));
    eng_diag_clear(&d);
}
END_TEST

/* genai_config.json's context_length must fit the graph's INT32 token counts. */
START_TEST(context_length_range)
{
    static const struct { const char *value; int rc; } lengths[] = {
        {"2147483647", 0}, {"2147483648", -1}, {"9223372036854775807", -1}, {"-1", -1}};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        char dir[2048], path[2100], json[256];
        snprintf(dir, sizeof dir, "%s/genai-context-%zu", cases_dir, i);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/genai_config.json", dir);
        snprintf(json, sizeof json, "{\"model\": {\"type\": \"qwen3\", \"context_length\": %s}}\n", lengths[i].value);
        write_all(path, json, strlen(json));
        eng_diag d;
        eng_diag_init(&d);
        eng_genai_config cfg;
        ck_assert_int_eq(eng_genai_config_load(dir, &cfg, &d), lengths[i].rc);
        if (lengths[i].rc)
            ck_assert_msg(d.n_kept == 1 && strstr(d.lines[0], "model.context_length") &&
                              strstr(d.lines[0], lengths[i].value),
                          "context_length %s: diag '%s'", lengths[i].value, d.n_kept ? d.lines[0] : "(none)");
        eng_diag_clear(&d);
    }
}
END_TEST

/*
 * A folder's graph is the file genai_config.json names (decoder.filename), as
 * ONNX Runtime GenAI loads it: here other.onnx beside a model.onnx that is
 * not a graph at all, so reading model.onnx would fail the load.
 */
START_TEST(graph_named_by_config)
{
    char dir[2048], cmd[32768];
    snprintf(dir, sizeof dir, "%s/named-graph", cases_dir);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && cp '%s/model.onnx' '%s/other.onnx' && cp '%s/model.onnx.data' '%s/' && "
             "echo 'not a graph' > '%s/model.onnx' && "
             "sed 's/\"filename\": \"model.onnx\"/\"filename\": \"other.onnx\"/' '%s/genai_config.json' > "
             "'%s/genai_config.json' && grep -q other.onnx '%s/genai_config.json'",
             dir, dir, base_dir, dir, base_dir, dir, dir, base_dir, dir, dir);
    run_or_die(cmd);
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    eng_genai_config cfg;
    int rc = eng_graph_load_model(dir, &g, &cfg, &d);
    if (rc != 0)
        eng_diag_print(&d, stderr, "named graph");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(g);
    ck_assert_str_eq(cfg.filename, "other.onnx");
    ck_assert_uint_gt(g->n_nodes, 0);
    eng_graph_free(g);
    eng_diag_clear(&d);

    /* `inspect` finds it too. */
    snprintf(cmd, sizeof cmd, "'%s' inspect --model '%s' >/dev/null 2>&1", getenv("QWEN3D"), dir);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "inspect of a config-named graph failed");

    /* A name with no file behind it is an error that says so. */
    snprintf(cmd, sizeof cmd, "sed -i 's/other.onnx/absent.onnx/' '%s/genai_config.json'", dir);
    run_or_die(cmd);
    eng_diag_init(&d);
    g = NULL;
    ck_assert_int_eq(eng_graph_load_model(dir, &g, &cfg, &d), -1);
    ck_assert_ptr_null(g);
    ck_assert_msg(d.n_kept >= 1 && strstr(d.lines[0], "absent.onnx") && strstr(d.lines[0], "decoder.filename"),
                  "diag '%s'", d.n_kept ? d.lines[0] : "(none)");
    eng_diag_clear(&d);
}
END_TEST

int main(void)
{
    setup_base();
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, loads_synth_tiny);
    tcase_add_test(tc, missing_folder);
    tcase_add_test(tc, context_length_range);
    tcase_add_test(tc, graph_named_by_config);
    tcase_add_loop_test(tc, corrupt_file_rejected, 0, (int)N_CASES);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
