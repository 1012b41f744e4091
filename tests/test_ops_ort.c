/*
 * test_ops_ort: every op the engine executes, one node at a time, against
 * ONNX Runtime.
 *
 * Each case is a single-node ONNX model written with the project's own
 * writer (engine/writer/onnx_write.h) plus random inputs. All cases are run through
 * onnxruntime-node in one process (tests/ort/run-graph.js), then through the
 * engine's plan and executor, and every output is compared: integers
 * exactly, floats within a tolerance relative to the largest reference value
 * (stated per case). Cases ONNX Runtime rejects must be rejected by the
 * engine too.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model.h"
#include "engine/writer/onnx_write.h"
#include "engine/plan.h"
#include "engine/pool.h"
#include "kernels/krn.h"
#include "tests/check_main.h"

#define MAX_CASES 112
#define MAX_IN 16
#define MAX_OUT 4

typedef struct tin {
    char name[64];
    int32_t dtype;
    int rank;
    int64_t dims[ENG_MAX_RANK];
    void *data;
    size_t nbytes;
} tin;

typedef struct opcase {
    char name[96];
    char dir[1024];
    eng_ow *w;
    tin in[MAX_IN];
    int n_in;
    char out[MAX_OUT][64];
    int n_out;
    double tol;          /* max |ours - ort| / max(1, max |ort|) for float outputs */
    bool expect_reject;  /* ONNX Runtime and the engine must both refuse the run */
    bool fp32;           /* plan with fp32 activations in the INT4 matmuls (ORT's exact DequantizeLinear -> MatMul) */
    bool packs;          /* its one node is repacked where the level packs 4-bit weights */
} opcase;

/* Setup runs before the check suite starts, so it cannot use ck_assert. */
#define REQUIRE(cond, ...)                                                       \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "test_ops_ort setup: " __VA_ARGS__);                 \
            fputc('\n', stderr);                                                 \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static opcase cases[MAX_CASES];
static int n_cases;
static char root[512];
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() & 0xffffff) / (float)0x1000000;
}

static size_t dtsize(int32_t dt)
{
    return eng_dtype_size(dt);
}

static opcase *new_case_opset(const char *name, double tol, int64_t opset)
{
    REQUIRE(n_cases < MAX_CASES, "too many cases");
    opcase *c = &cases[n_cases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->dir, sizeof c->dir, "%s/%s", root, name);
    mkdir(c->dir, 0755);
    c->tol = tol;
    c->w = eng_ow_new("op_test");
    eng_ow_opset(c->w, "", opset);
    eng_ow_opset(c->w, "com.microsoft", 1);
    char data[1200];
    snprintf(data, sizeof data, "%s/model.onnx.data", c->dir);
    eng_ow_data_open(c->w, data, "model.onnx.data");
    return c;
}

static opcase *new_case(const char *name, double tol)
{
    return new_case_opset(name, tol, 21);
}

static eng_ow_dim *fixed_dims(int rank, const int64_t *d)
{
    static eng_ow_dim dims[ENG_MAX_RANK];
    for (int i = 0; i < rank; i++)
        dims[i] = ENG_OW_FIXED(d[i]);
    return dims;
}

/* A graph input with the given data (copied). */
static void input(opcase *c, const char *name, int32_t dt, int rank, const int64_t *dims, const void *data)
{
    tin *t = &c->in[c->n_in++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->rank = rank;
    uint64_t n = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        n *= (uint64_t)dims[i];
    }
    t->nbytes = n * dtsize(dt);
    t->data = malloc(t->nbytes + 1);
    if (t->nbytes)
        memcpy(t->data, data, t->nbytes);
    eng_ow_input(c->w, name, dt, (size_t)rank, fixed_dims(rank, dims));
}

static float *rand_floats(uint64_t n, float lo, float hi)
{
    float *f = malloc((n + 1) * sizeof *f);
    for (uint64_t i = 0; i < n; i++)
        f[i] = rndf(lo, hi);
    return f;
}

static uint64_t numel(int rank, const int64_t *d)
{
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (uint64_t)d[i];
    return n;
}

static void input_rand(opcase *c, const char *name, int rank, const int64_t *dims, float lo, float hi)
{
    float *f = rand_floats(numel(rank, dims), lo, hi);
    input(c, name, ENG_DT_FLOAT, rank, dims, f);
    free(f);
}

static void init_rand(opcase *c, const char *name, int rank, const int64_t *dims, float lo, float hi)
{
    uint64_t n = numel(rank, dims);
    float *f = rand_floats(n, lo, hi);
    eng_ow_init_external(c->w, name, ENG_DT_FLOAT, (size_t)rank, dims, f, n * sizeof(float));
    free(f);
}

/* A graph output of the given element type and rank, dimensions left symbolic. */
static void output(opcase *c, const char *name, int32_t dt, int rank)
{
    static const char *syms[] = {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"};
    eng_ow_dim dims[ENG_MAX_RANK];
    for (int i = 0; i < rank; i++)
        dims[i] = ENG_OW_SYM(syms[i]);
    eng_ow_output(c->w, name, dt, (size_t)rank, dims);
    snprintf(c->out[c->n_out++], 64, "%s", name);
}

static void i64_const(opcase *c, const char *out, int rank, const int64_t *dims, const int64_t *vals)
{
    char node[80];
    snprintf(node, sizeof node, "const_%s", out);
    eng_ow_constant(c->w, node, out, ENG_DT_INT64, (size_t)rank, dims, vals, numel(rank, dims) * 8);
}

static const char *dtname(int32_t dt)
{
    switch (dt) {
    case ENG_DT_FLOAT: return "float32";
    case ENG_DT_INT64: return "int64";
    case ENG_DT_INT32: return "int32";
    case ENG_DT_UINT8: return "uint8";
    default: return "unknown";
    }
}

static void finish_case(opcase *c)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/model.onnx", c->dir);
    int rc = eng_ow_save(c->w, path);
    REQUIRE(rc == 0, "case %s: writer: %s", c->name, eng_ow_error(c->w));
    json_t *ins = json_array(), *outs = json_array();
    for (int i = 0; i < c->n_in; i++) {
        tin *t = &c->in[i];
        char file[96];
        snprintf(file, sizeof file, "in_%d.bin", i);
        snprintf(path, sizeof path, "%s/%s", c->dir, file);
        FILE *f = fopen(path, "wb");
        REQUIRE(f && fwrite(t->data, 1, t->nbytes, f) == t->nbytes, "cannot write %s", path);
        fclose(f);
        json_t *dims = json_array();
        for (int k = 0; k < t->rank; k++)
            json_array_append_new(dims, json_integer(t->dims[k]));
        json_array_append_new(ins, json_pack("{s:s, s:s, s:o, s:s}", "name", t->name, "dtype", dtname(t->dtype),
                                             "dims", dims, "file", file));
    }
    for (int i = 0; i < c->n_out; i++)
        json_array_append_new(outs, json_string(c->out[i]));
    json_t *spec = json_pack("{s:o, s:o}", "inputs", ins, "outputs", outs);
    snprintf(path, sizeof path, "%s/case.json", c->dir);
    REQUIRE(json_dump_file(spec, path, 0) == 0, "cannot write %s", path);
    json_decref(spec);
    eng_ow_free(c->w);
    c->w = NULL;
}

/* ---- the cases -------------------------------------------------------------- */

/* A MatMulNBits case's zero points. ZP_ALL8 (4-bit) is the default written
 * out, which the packed kernels read as none. */
typedef enum { ZP_NONE, ZP_RANDOM, ZP_ALL8 } zp_kind;

typedef struct mmnb_spec {
    int64_t m, n, k, bs, acc;
    zp_kind zp;
    bool bias, rank3;
    int bits; /* 4 or 8 */
} mmnb_spec;

static void case_mmnb(const mmnb_spec *sp)
{
    static const char *const zp_tag[] = {"", "_zp", "_zp8"};
    char name[96];
    const int bits = sp->bits;
    snprintf(name, sizeof name, "mmnb_m%lld_n%lld_k%lld_b%lld_acc%lld%s%s%s%s", (long long)sp->m, (long long)sp->n,
             (long long)sp->k, (long long)sp->bs, (long long)sp->acc, zp_tag[sp->zp], sp->bias ? "_bias" : "",
             sp->rank3 ? "_r3" : "", bits == 8 ? "_8bit" : "");
    /* int8 activations match ONNX Runtime's own int8 path closely; fp32
     * accumulation differs only in summation order */
    opcase *c = new_case(name, sp->acc == 4 ? 2e-4 : 2e-5);
    c->packs = sp->acc == 4 && bits == 4 && sp->zp != ZP_RANDOM;
    int64_t kb = (sp->k + sp->bs - 1) / sp->bs, blob = sp->bs * bits / 8;
    if (sp->rank3) {
        int64_t d[3] = {1, sp->m, sp->k};
        input_rand(c, "A", 3, d, -2, 2);
    } else {
        int64_t d[2] = {sp->m, sp->k};
        input_rand(c, "A", 2, d, -2, 2);
    }
    int64_t bd[3] = {sp->n, kb, blob};
    uint64_t nb = (uint64_t)(sp->n * kb * blob);
    uint8_t *b = malloc(nb);
    for (uint64_t i = 0; i < nb; i++)
        b[i] = (uint8_t)rnd(); /* includes the padding past K: it must be ignored */
    eng_ow_init_external(c->w, "B", ENG_DT_UINT8, 3, bd, b, nb);
    free(b);
    uint64_t ns = (uint64_t)(sp->n * kb);
    float *sc = malloc(ns * sizeof *sc);
    for (uint64_t i = 0; i < ns; i++)
        sc[i] = rndf(0.01f, 0.1f) * ((rnd() & 1) ? -1.0f : 1.0f);
    int64_t sd[1] = {(int64_t)ns};
    eng_ow_init_external(c->w, "scales", ENG_DT_FLOAT, 1, sd, sc, ns * sizeof(float));
    free(sc);
    const char *ins[6] = {"A", "B", "scales", "", "", ""};
    int n_in = 3;
    if (sp->zp != ZP_NONE) {
        int64_t zd[1] = {sp->n * (bits == 8 ? kb : (kb + 1) / 2)};
        uint8_t *zp = malloc((size_t)zd[0]);
        for (int64_t i = 0; i < zd[0]; i++)
            zp[i] = sp->zp == ZP_ALL8 ? 0x88 : (uint8_t)rnd();
        eng_ow_init_external(c->w, "zp", ENG_DT_UINT8, 1, zd, zp, (size_t)zd[0]);
        free(zp);
        ins[3] = "zp";
        n_in = 4;
    }
    if (sp->bias) {
        int64_t bdim[1] = {sp->n};
        init_rand(c, "bias", 1, bdim, -1, 1);
        ins[5] = "bias";
        n_in = 6;
    }
    eng_ow_node(c->w, "MatMulNBits", "com.microsoft", "mm", (size_t)n_in, ins, ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "K", sp->k);
    eng_ow_attr_int(c->w, "N", sp->n);
    eng_ow_attr_int(c->w, "bits", bits);
    eng_ow_attr_int(c->w, "block_size", sp->bs);
    eng_ow_attr_int(c->w, "accuracy_level", sp->acc);
    output(c, "Y", ENG_DT_FLOAT, sp->rank3 ? 3 : 2);
    finish_case(c);
}

typedef struct gqa_spec {
    const char *tag;
    int64_t nq, nkv, h, s, past, max_pos;
    bool rotary, packed, no_past;
} gqa_spec;

static void case_gqa(const gqa_spec *g)
{
    char name[96];
    snprintf(name, sizeof name, "gqa_%s", g->tag);
    opcase *c = new_case(name, 1e-5);
    int64_t S = g->s, P = g->past, T = P + S, H = g->h;
    if (g->packed) {
        int64_t d[3] = {1, S, (g->nq + 2 * g->nkv) * H};
        input_rand(c, "q", 3, d, -1, 1);
    } else {
        int64_t dq[3] = {1, S, g->nq * H}, dk[3] = {1, S, g->nkv * H};
        input_rand(c, "q", 3, dq, -1, 1);
        input_rand(c, "k", 3, dk, -1, 1);
        input_rand(c, "v", 3, dk, -1, 1);
    }
    if (!g->no_past) {
        int64_t dp[4] = {1, g->nkv, P, H};
        input_rand(c, "past_k", 4, dp, -1, 1);
        input_rand(c, "past_v", 4, dp, -1, 1);
    }
    int32_t seqlens = (int32_t)(T - 1), total = (int32_t)T;
    int64_t d1[1] = {1};
    input(c, "seqlens_k", ENG_DT_INT32, 1, d1, &seqlens);
    input(c, "total_len", ENG_DT_INT32, 0, NULL, &total);
    if (g->rotary) {
        int64_t cd[2] = {g->max_pos, H / 2};
        uint64_t n = (uint64_t)(g->max_pos * H / 2);
        float *cs = malloc(n * sizeof *cs), *sn = malloc(n * sizeof *sn);
        for (int64_t p = 0; p < g->max_pos; p++)
            for (int64_t i = 0; i < H / 2; i++) {
                float inv = 1.0f / powf(10000.0f, (float)(2 * i) / (float)H);
                cs[p * H / 2 + i] = cosf((float)p * inv);
                sn[p * H / 2 + i] = sinf((float)p * inv);
            }
        eng_ow_init_external(c->w, "cos", ENG_DT_FLOAT, 2, cd, cs, n * sizeof(float));
        eng_ow_init_external(c->w, "sin", ENG_DT_FLOAT, 2, cd, sn, n * sizeof(float));
        free(cs);
        free(sn);
    }
    const char *ins[9] = {"q", g->packed ? "" : "k", g->packed ? "" : "v", g->no_past ? "" : "past_k",
                          g->no_past ? "" : "past_v", "seqlens_k", "total_len", g->rotary ? "cos" : "",
                          g->rotary ? "sin" : ""};
    eng_ow_node(c->w, "GroupQueryAttention", "com.microsoft", "gqa", g->rotary ? 9 : 7, ins,
                ENG_OW_LIST("out", "present_k", "present_v"));
    eng_ow_attr_int(c->w, "num_heads", g->nq);
    eng_ow_attr_int(c->w, "kv_num_heads", g->nkv);
    eng_ow_attr_int(c->w, "do_rotary", g->rotary);
    eng_ow_attr_int(c->w, "rotary_interleaved", 0);
    output(c, "out", ENG_DT_FLOAT, 3);
    output(c, "present_k", ENG_DT_FLOAT, 4);
    output(c, "present_v", ENG_DT_FLOAT, 4);
    finish_case(c);
}

static void case_norms(void)
{
    opcase *c = new_case("sln_last_axis", 1e-5);
    int64_t d[3] = {2, 3, 64}, g[1] = {64};
    input_rand(c, "X", 3, d, -3, 3);
    init_rand(c, "gamma", 1, g, 0.5f, 1.5f);
    eng_ow_node(c->w, "SimplifiedLayerNormalization", "", "n", ENG_OW_LIST("X", "gamma"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "axis", -1);
    eng_ow_attr_float(c->w, "epsilon", 1e-6f);
    eng_ow_attr_int(c->w, "stash_type", 1);
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("sln_axis1_odd", 1e-5);
    int64_t d2[3] = {3, 5, 7}, g2[2] = {5, 7};
    input_rand(c, "X", 3, d2, -3, 3);
    init_rand(c, "gamma", 2, g2, 0.5f, 1.5f);
    eng_ow_node(c->w, "SimplifiedLayerNormalization", "", "n", ENG_OW_LIST("X", "gamma"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "axis", 1);
    eng_ow_attr_float(c->w, "epsilon", 1e-5f);
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    /* the three output layouts of SkipSimplifiedLayerNormalization the graph uses */
    for (int layout = 0; layout < 4; layout++) {
        static const char *names[] = {"skip_sln_out0", "skip_sln_out0_sum", "skip_sln_bias_sum", "skip_sln_bcast"};
        opcase *k = new_case(names[layout], 1e-5);
        int64_t dd[3] = {2, 3, 96}, ds[2] = {3, 96}, gg[1] = {96};
        input_rand(k, "X", 3, dd, -2, 2);
        if (layout == 3)
            input_rand(k, "skip", 2, ds, -2, 2);
        else
            input_rand(k, "skip", 3, dd, -2, 2);
        init_rand(k, "gamma", 1, gg, 0.5f, 1.5f);
        const char *ins[4] = {"X", "skip", "gamma", "bias"};
        if (layout == 2)
            init_rand(k, "bias", 1, gg, -0.5f, 0.5f);
        if (layout == 0) {
            eng_ow_node(k->w, "SkipSimplifiedLayerNormalization", "com.microsoft", "n", 3, ins, ENG_OW_LIST("Y"));
            eng_ow_attr_float(k->w, "epsilon", 1e-6f);
            output(k, "Y", ENG_DT_FLOAT, 3);
        } else {
            eng_ow_node(k->w, "SkipSimplifiedLayerNormalization", "com.microsoft", "n", layout == 2 ? 4 : 3, ins,
                        ENG_OW_LIST("Y", "", "", "S"));
            eng_ow_attr_float(k->w, "epsilon", 1e-6f);
            output(k, "Y", ENG_DT_FLOAT, 3);
            output(k, "S", ENG_DT_FLOAT, 3);
        }
        finish_case(k);
    }
}

static void case_gather(void)
{
    opcase *c = new_case("gather_rows_negative", 0);
    int64_t td[2] = {10, 8};
    init_rand(c, "table", 2, td, -1, 1);
    int64_t idx[6] = {0, 9, -1, -10, 3, 3}, id[2] = {2, 3};
    input(c, "idx", ENG_DT_INT64, 2, id, idx);
    eng_ow_node(c->w, "Gather", "", "g", ENG_OW_LIST("table", "idx"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("gather_axis1_int32_idx", 0);
    int64_t dd[3] = {4, 5, 6};
    input_rand(c, "X", 3, dd, -1, 1);
    int32_t idx32[3] = {4, -5, 2};
    int64_t d3[1] = {3};
    input(c, "idx", ENG_DT_INT32, 1, d3, idx32);
    eng_ow_node(c->w, "Gather", "", "g", ENG_OW_LIST("X", "idx"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "axis", 1);
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("gather_scalar_of_shape", 0);
    int64_t md[2] = {1, 7};
    int64_t ones[7] = {1, 1, 1, 1, 1, 1, 1};
    input(c, "mask", ENG_DT_INT64, 2, md, ones);
    int64_t one = 1;
    i64_const(c, "one", 0, NULL, &one);
    eng_ow_node(c->w, "Shape", "", "sh", ENG_OW_LIST("mask"), ENG_OW_LIST("shape"));
    eng_ow_node(c->w, "Gather", "", "g", ENG_OW_LIST("shape", "one"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "axis", 0);
    output(c, "Y", ENG_DT_INT64, 0);
    finish_case(c);

    c = new_case("gather_out_of_range", 0);
    c->expect_reject = true;
    init_rand(c, "table", 2, td, -1, 1);
    int64_t bad[2] = {2, 10}, bd[1] = {2};
    input(c, "idx", ENG_DT_INT64, 1, bd, bad);
    eng_ow_node(c->w, "Gather", "", "g", ENG_OW_LIST("table", "idx"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 2);
    finish_case(c);
}

static void case_small_ops(void)
{
    /* the attention-mask prelude, node for node */
    opcase *c = new_case("mask_prelude", 0);
    int64_t md[2] = {1, 9};
    int64_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    input(c, "mask", ENG_DT_INT64, 2, md, ones);
    int64_t axes[1] = {1}, d1[1] = {1}, one = 1;
    i64_const(c, "axes", 1, d1, axes);
    i64_const(c, "one_vec", 1, d1, axes);
    i64_const(c, "one", 0, NULL, &one);
    eng_ow_node(c->w, "ReduceSum", "", "rs", ENG_OW_LIST("mask", "axes"), ENG_OW_LIST("sum"));
    eng_ow_attr_int(c->w, "keepdims", 0);
    eng_ow_node(c->w, "Sub", "", "sub", ENG_OW_LIST("sum", "one_vec"), ENG_OW_LIST("sub"));
    eng_ow_node(c->w, "Cast", "", "c1", ENG_OW_LIST("sub"), ENG_OW_LIST("seqlens"));
    eng_ow_attr_int(c->w, "to", ENG_DT_INT32);
    eng_ow_node(c->w, "Shape", "", "sh", ENG_OW_LIST("mask"), ENG_OW_LIST("shape"));
    eng_ow_node(c->w, "Gather", "", "g", ENG_OW_LIST("shape", "one"), ENG_OW_LIST("tot64"));
    eng_ow_node(c->w, "Cast", "", "c2", ENG_OW_LIST("tot64"), ENG_OW_LIST("total"));
    eng_ow_attr_int(c->w, "to", ENG_DT_INT32);
    output(c, "seqlens", ENG_DT_INT32, 1);
    output(c, "total", ENG_DT_INT32, 0);
    finish_case(c);

    c = new_case("reduce_sum_float_axes02_keep", 1e-6);
    int64_t fd[3] = {3, 4, 5}, ax2[2] = {0, -1}, d2[1] = {2};
    input_rand(c, "X", 3, fd, -1, 1);
    i64_const(c, "axes", 1, d2, ax2);
    eng_ow_node(c->w, "ReduceSum", "", "rs", ENG_OW_LIST("X", "axes"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("reduce_sum_all", 1e-6);
    input_rand(c, "X", 3, fd, -1, 1);
    eng_ow_node(c->w, "ReduceSum", "", "rs", ENG_OW_LIST("X"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "keepdims", 0);
    output(c, "Y", ENG_DT_FLOAT, 0);
    finish_case(c);

    c = new_case("reduce_sum_noop_empty", 0);
    input_rand(c, "X", 3, fd, -1, 1);
    eng_ow_node(c->w, "ReduceSum", "", "rs", ENG_OW_LIST("X"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "noop_with_empty_axes", 1);
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("cast_float_to_int64_and_back", 0);
    float fv[6] = {-2.75f, -0.5f, 0.0f, 0.99f, 3.5f, 1e6f};
    int64_t d6[1] = {6};
    input(c, "X", ENG_DT_FLOAT, 1, d6, fv);
    eng_ow_node(c->w, "Cast", "", "c", ENG_OW_LIST("X"), ENG_OW_LIST("I"));
    eng_ow_attr_int(c->w, "to", ENG_DT_INT64);
    eng_ow_node(c->w, "Cast", "", "c2", ENG_OW_LIST("I"), ENG_OW_LIST("F"));
    eng_ow_attr_int(c->w, "to", ENG_DT_FLOAT);
    output(c, "I", ENG_DT_INT64, 1);
    output(c, "F", ENG_DT_FLOAT, 1);
    finish_case(c);

    c = new_case("shape_start_end", 0);
    int64_t sd[4] = {2, 3, 4, 5};
    input_rand(c, "X", 4, sd, -1, 1);
    eng_ow_node(c->w, "Shape", "", "s1", ENG_OW_LIST("X"), ENG_OW_LIST("all"));
    eng_ow_node(c->w, "Shape", "", "s2", ENG_OW_LIST("X"), ENG_OW_LIST("mid"));
    eng_ow_attr_int(c->w, "start", 1);
    eng_ow_attr_int(c->w, "end", -1);
    output(c, "all", ENG_DT_INT64, 1);
    output(c, "mid", ENG_DT_INT64, 1);
    finish_case(c);

    c = new_case("reshape_zero_and_minus_one", 1e-6);
    int64_t rd[3] = {2, 6, 4}, shp[3] = {0, -1, 8}, d3[1] = {3};
    input_rand(c, "X", 3, rd, -1, 1);
    i64_const(c, "shape", 1, d3, shp);
    eng_ow_node(c->w, "Reshape", "", "r", ENG_OW_LIST("X", "shape"), ENG_OW_LIST("Y"));
    eng_ow_node(c->w, "Sigmoid", "", "s", ENG_OW_LIST("Y"), ENG_OW_LIST("Z"));
    output(c, "Z", ENG_DT_FLOAT, 3);
    finish_case(c);

    for (int rows = 1; rows <= 3; rows += 2) {
        char nm[64];
        snprintf(nm, sizeof nm, "split_last_axis_%d_rows", rows);
        c = new_case(nm, 0);
        int64_t xd[3] = {1, rows, 40}, sizes[3] = {24, 8, 8};
        input_rand(c, "X", 3, xd, -1, 1);
        i64_const(c, "split", 1, d3, sizes);
        eng_ow_node(c->w, "Split", "", "sp", ENG_OW_LIST("X", "split"), ENG_OW_LIST("A", "B", "C"));
        eng_ow_attr_int(c->w, "axis", -1);
        output(c, "A", ENG_DT_FLOAT, 3);
        output(c, "B", ENG_DT_FLOAT, 3);
        output(c, "C", ENG_DT_FLOAT, 3);
        finish_case(c);
    }

    c = new_case("split_num_outputs_uneven", 0);
    int64_t ud[2] = {2, 7};
    input_rand(c, "X", 2, ud, -1, 1);
    eng_ow_node(c->w, "Split", "", "sp", ENG_OW_LIST("X"), ENG_OW_LIST("A", "B", "C"));
    eng_ow_attr_int(c->w, "axis", 1);
    eng_ow_attr_int(c->w, "num_outputs", 3);
    output(c, "A", ENG_DT_FLOAT, 2);
    output(c, "B", ENG_DT_FLOAT, 2);
    output(c, "C", ENG_DT_FLOAT, 2);
    finish_case(c);

    c = new_case("sigmoid_extremes", 1e-6);
    float ex[9] = {-1000.0f, -100.0f, -20.0f, -1e-3f, 0.0f, 1e-3f, 20.0f, 100.0f, 1000.0f};
    int64_t d9[1] = {9};
    input(c, "X", ENG_DT_FLOAT, 1, d9, ex);
    eng_ow_node(c->w, "Sigmoid", "", "s", ENG_OW_LIST("X"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 1);
    finish_case(c);

    c = new_case("swiglu_chain_odd", 1e-6);
    int64_t gd[2] = {3, 77};
    input_rand(c, "g", 2, gd, -6, 6);
    input_rand(c, "u", 2, gd, -3, 3);
    eng_ow_node(c->w, "Sigmoid", "", "s", ENG_OW_LIST("g"), ENG_OW_LIST("sg"));
    eng_ow_node(c->w, "Mul", "", "m1", ENG_OW_LIST("g", "sg"), ENG_OW_LIST("silu"));
    eng_ow_node(c->w, "Mul", "", "m2", ENG_OW_LIST("silu", "u"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 2);
    finish_case(c);

    /* up broadcast over gate: the fused plan must fall back to the three steps */
    c = new_case("swiglu_chain_broadcast_up", 1e-6);
    int64_t ud2[1] = {77};
    input_rand(c, "g", 2, gd, -6, 6);
    input_rand(c, "u", 1, ud2, -3, 3);
    eng_ow_node(c->w, "Sigmoid", "", "s", ENG_OW_LIST("g"), ENG_OW_LIST("sg"));
    eng_ow_node(c->w, "Mul", "", "m1", ENG_OW_LIST("sg", "g"), ENG_OW_LIST("silu"));
    eng_ow_node(c->w, "Mul", "", "m2", ENG_OW_LIST("u", "silu"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 2);
    finish_case(c);

    c = new_case("mul_sub_broadcast", 1e-6);
    int64_t ad[3] = {2, 1, 4}, bd2[3] = {1, 3, 1};
    input_rand(c, "A", 3, ad, -2, 2);
    input_rand(c, "B", 3, bd2, -2, 2);
    eng_ow_node(c->w, "Mul", "", "m", ENG_OW_LIST("A", "B"), ENG_OW_LIST("M"));
    eng_ow_node(c->w, "Sub", "", "s", ENG_OW_LIST("M", "A"), ENG_OW_LIST("D"));
    output(c, "M", ENG_DT_FLOAT, 3);
    output(c, "D", ENG_DT_FLOAT, 3);
    finish_case(c);

    c = new_case("constant_value_ints", 0);
    int64_t cd[2] = {2, 3}, cv[6] = {5, -4, 3, 0, 1, 2};
    i64_const(c, "K", 2, cd, cv);
    int64_t xd2[2] = {2, 3}, xv[6] = {1, 2, 3, 4, 5, 6};
    input(c, "X", ENG_DT_INT64, 2, xd2, xv);
    eng_ow_node(c->w, "Sub", "", "s", ENG_OW_LIST("X", "K"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_INT64, 2);
    finish_case(c);
}

/* ---- the standard contracts' patterns (engine/lower.c) ---- */

/* COUNT 4-bit values into a packed buffer (low nibble first); with zp8 all 8, else random. */
static uint8_t *nibbles(uint64_t count, bool all8)
{
    uint8_t *b = calloc(count / 2 + 2, 1);
    for (uint64_t i = 0; i < count; i++)
        b[i / 2] |= (uint8_t)((all8 ? 8u : rnd() & 15u) << (4 * (i & 1)));
    return b;
}

/* UINT4 codes, FLOAT scales and UINT4 zero points of a DequantizeLinear weight, blocks of 32 along AXIS. */
static void dq_weight(opcase *c, const char *base, int64_t rows, int64_t cols, int axis, bool zp8, const char *out)
{
    int64_t K = axis ? cols : rows, kb = (K + 31) / 32;
    int64_t qd[2] = {rows, cols}, sd[2] = {axis ? rows : kb, axis ? kb : cols};
    char qn[64], sn[64], zn[64];
    snprintf(qn, sizeof qn, "%s_q", base);
    snprintf(sn, sizeof sn, "%s_s", base);
    snprintf(zn, sizeof zn, "%s_zp", base);
    uint8_t *q = nibbles((uint64_t)(rows * cols), false), *z = nibbles((uint64_t)(sd[0] * sd[1]), zp8);
    eng_ow_init_external(c->w, qn, ENG_DT_UINT4, 2, qd, q, (size_t)((rows * cols + 1) / 2));
    uint64_t ns = (uint64_t)(sd[0] * sd[1]);
    float *sc = malloc(ns * sizeof *sc);
    for (uint64_t i = 0; i < ns; i++)
        sc[i] = rndf(0.01f, 0.1f) * ((rnd() & 1) ? -1.0f : 1.0f);
    eng_ow_init_external(c->w, sn, ENG_DT_FLOAT, 2, sd, sc, ns * sizeof *sc);
    eng_ow_init_external(c->w, zn, ENG_DT_UINT4, 2, sd, z, (size_t)((ns + 1) / 2));
    free(q);
    free(z);
    free(sc);
    char node[80];
    snprintf(node, sizeof node, "%s_dq", base);
    eng_ow_node(c->w, "DequantizeLinear", "", node, ENG_OW_LIST(qn, sn, zn), ENG_OW_LIST(out));
    eng_ow_attr_int(c->w, "axis", axis);
    eng_ow_attr_int(c->w, "block_size", 32);
}

/*
 * UINT4 [K, N] -> DequantizeLinear (axis 0) -> MatMul: zero points 8 (the
 * packed form) or any (MatMulNBits' layout with zero points), K with a
 * partial last block, odd N, an odd number of codes (a half-used last byte).
 * Planned with fp32 activations, the engine computes what ONNX Runtime
 * computes without graph optimizations: the exact DequantizeLinear -> MatMul.
 */
static void case_qdq_matmul(int64_t m, int64_t k, int64_t n, bool zp8)
{
    char name[96];
    snprintf(name, sizeof name, "qdq_matmul_m%lld_k%lld_n%lld%s", (long long)m, (long long)k, (long long)n,
             zp8 ? "_zp8" : "_zp");
    opcase *c = new_case_opset(name, 2e-5, 23);
    c->fp32 = true;
    int64_t ad[2] = {m, k};
    input_rand(c, "A", 2, ad, -2, 2);
    dq_weight(c, "w", k, n, 0, zp8, "W");
    eng_ow_node(c->w, "MatMul", "", "mm", ENG_OW_LIST("A", "W"), ENG_OW_LIST("Y"));
    output(c, "Y", ENG_DT_FLOAT, 2);
    finish_case(c);
}

/*
 * The tied embedding: UINT4 [V, D] -> DequantizeLinear (axis 1) -> Gather
 * (the looked-up rows, dequantized exactly: tolerance 0) and -> Transpose ->
 * MatMul (the LM head over the same prepared weights).
 */
static void case_qdq_tied(int64_t v, int64_t d, bool zp8)
{
    char name[96];
    snprintf(name, sizeof name, "qdq_tied_v%lld_d%lld%s", (long long)v, (long long)d, zp8 ? "_zp8" : "_zp");
    opcase *c = new_case_opset(name, 2e-5, 23);
    c->fp32 = true;
    int64_t idd[2] = {1, 4}, ids[4] = {0, v - 1, -1, v / 2};
    input(c, "ids", ENG_DT_INT64, 2, idd, ids);
    int64_t hd[3] = {1, 3, d};
    input_rand(c, "H", 3, hd, -2, 2);
    dq_weight(c, "emb", v, d, 1, zp8, "E");
    eng_ow_node(c->w, "Gather", "", "lookup", ENG_OW_LIST("E", "ids"), ENG_OW_LIST("rows"));
    eng_ow_node(c->w, "Transpose", "", "tie", ENG_OW_LIST("E"), ENG_OW_LIST("ET"));
    eng_ow_attr_ints(c->w, "perm", 2, (const int64_t[]){1, 0});
    eng_ow_node(c->w, "MatMul", "", "lm_head", ENG_OW_LIST("H", "ET"), ENG_OW_LIST("logits"));
    output(c, "rows", ENG_DT_FLOAT, 3);
    output(c, "logits", ENG_DT_FLOAT, 3);
    finish_case(c);
}

/*
 * com.microsoft GatherBlockQuantized, dequantized exactly (tolerance 0):
 * UINT8 codes at 8 bits (the builder's tied embedding over an 8-bit LM head)
 * and at 4 bits (two per byte), INT4 and UINT4 codes (ONNX Runtime's
 * quantized Gather); with and without zero points (4-bit ones padded per
 * row: an odd block count), a partial last block, the table as a Reshape of
 * a MatMulNBits B [rows, blocks, blob] to a constant shape as the builder
 * writes it, a rank-3 table, INT32 and INT64 indices of rank 1 and 2,
 * negative ones and both ends.
 */
typedef struct gbq_spec {
    int32_t dtype;     /* ENG_DT_UINT8, ENG_DT_UINT4 or ENG_DT_INT4 */
    int bits;          /* 4 or 8 */
    int64_t rows, mid, cols, bs; /* table [rows, (mid,) cols codes]; mid 0: rank 2 */
    bool zp, reshape, idx32;
} gbq_spec;

static void case_gbq(const gbq_spec *sp)
{
    char name[96];
    bool u8 = sp->dtype == ENG_DT_UINT8;
    snprintf(name, sizeof name, "gbq_%s%d_r%lld_m%lld_c%lld_b%lld%s%s%s", u8 ? "u8_" : sp->dtype == ENG_DT_INT4 ? "i4_" : "u4_",
             sp->bits, (long long)sp->rows, (long long)sp->mid, (long long)sp->cols, (long long)sp->bs,
             sp->zp ? "_zp" : "", sp->reshape ? "_reshape" : "", sp->idx32 ? "_i32" : "");
    opcase *c = new_case(name, 0);
    int64_t per_byte = u8 ? 8 / sp->bits : 1, kb = (sp->cols + sp->bs - 1) / sp->bs;
    int64_t last = sp->cols / per_byte, sub = sp->mid ? sp->mid : 1;
    int r = sp->mid ? 3 : 2;
    int64_t dd[3] = {sp->rows, sp->mid ? sp->mid : last, last}, sd[3] = {sp->rows, sp->mid ? sp->mid : kb, kb};
    uint64_t codes = (uint64_t)(sp->rows * sub * sp->cols);
    uint64_t nbytes = u8 ? codes / (uint64_t)per_byte : (codes + 1) / 2;
    uint8_t *q = malloc(nbytes);
    for (uint64_t i = 0; i < nbytes; i++)
        q[i] = (uint8_t)rnd();
    if (sp->reshape) { /* MatMulNBits' B [rows, blocks, blob] viewed as [rows, cols * bits / 8] */
        int64_t bd[3] = {sp->rows, kb, sp->bs * sp->bits / 8}, shape[2] = {sp->rows, last}, two = 2;
        eng_ow_init_external(c->w, "B", ENG_DT_UINT8, 3, bd, q, nbytes);
        i64_const(c, "table_shape", 1, &two, shape);
        eng_ow_node(c->w, "Reshape", "", "view", ENG_OW_LIST("B", "table_shape"), ENG_OW_LIST("table"));
    } else {
        eng_ow_init_external(c->w, "table", sp->dtype, (size_t)r, dd, q, nbytes);
    }
    free(q);
    uint64_t ns = (uint64_t)(sp->rows * sub * kb);
    float *sc = malloc(ns * sizeof *sc);
    for (uint64_t i = 0; i < ns; i++)
        sc[i] = rndf(0.01f, 0.1f) * ((rnd() & 1) ? -1.0f : 1.0f);
    eng_ow_init_external(c->w, "scales", ENG_DT_FLOAT, (size_t)r, sd, sc, ns * sizeof *sc);
    free(sc);
    if (sp->zp) {
        int64_t zd[3] = {sd[0], sd[1], sd[2]};
        uint64_t zb;
        if (u8 && sp->bits == 4) { /* two per byte, each row of blocks padded to whole bytes */
            zd[r - 1] = (kb + 1) / 2;
            zb = (uint64_t)(sp->rows * sub * zd[r - 1]);
        } else {
            zb = u8 ? ns : (ns + 1) / 2;
        }
        uint8_t *z = malloc(zb);
        for (uint64_t i = 0; i < zb; i++)
            z[i] = (uint8_t)rnd();
        eng_ow_init_external(c->w, "zp", sp->dtype, (size_t)r, zd, z, zb);
        free(z);
    }
    /* both ends, negatives, a repeat */
    int64_t ids[6] = {0, sp->rows - 1, -1, -sp->rows, sp->rows / 2, 0};
    if (sp->idx32) {
        int32_t i32[6];
        for (int i = 0; i < 6; i++)
            i32[i] = (int32_t)ids[i];
        int64_t id[1] = {6};
        input(c, "ids", ENG_DT_INT32, 1, id, i32);
    } else {
        int64_t id[2] = {2, 3};
        input(c, "ids", ENG_DT_INT64, 2, id, ids);
    }
    static const char *const ins[4] = {"table", "ids", "scales", "zp"};
    eng_ow_node(c->w, "GatherBlockQuantized", "com.microsoft", "gbq", sp->zp ? 4 : 3, ins, ENG_OW_LIST("Y"));
    eng_ow_attr_int(c->w, "bits", sp->bits);
    eng_ow_attr_int(c->w, "block_size", sp->bs);
    eng_ow_attr_int(c->w, "gather_axis", 0);
    eng_ow_attr_int(c->w, "quantize_axis", r - 1);
    output(c, "Y", ENG_DT_FLOAT, (sp->idx32 ? 1 : 2) + r - 1);
    finish_case(c);
}

/* MatMul with a constant FLOAT weight [K, N], and one with the transpose of a constant [N, K] (a tied head). */
static void case_float_matmul(void)
{
    opcase *c = new_case_opset("matmul_float_weight", 2e-5, 23);
    int64_t ad[3] = {1, 5, 41}, wd[2] = {41, 9}, ed[2] = {13, 41};
    input_rand(c, "A", 3, ad, -2, 2);
    init_rand(c, "W", 2, wd, -1, 1);
    init_rand(c, "E", 2, ed, -1, 1);
    eng_ow_node(c->w, "MatMul", "", "mm", ENG_OW_LIST("A", "W"), ENG_OW_LIST("Y"));
    eng_ow_node(c->w, "Transpose", "", "tie", ENG_OW_LIST("E"), ENG_OW_LIST("ET"));
    eng_ow_attr_ints(c->w, "perm", 2, (const int64_t[]){1, 0});
    eng_ow_node(c->w, "MatMul", "", "head", ENG_OW_LIST("A", "ET"), ENG_OW_LIST("Z"));
    output(c, "Y", ENG_DT_FLOAT, 3);
    output(c, "Z", ENG_DT_FLOAT, 3);
    finish_case(c);
}

/* RMSNormalization (opset 23) over the last axis, as the standard contracts' norms and q/k norms. */
static void case_rmsnorm(void)
{
    opcase *c = new_case_opset("rmsnorm_opset23", 1e-5, 23);
    int64_t xd[3] = {1, 6, 40}, gd[1] = {40};
    input_rand(c, "X", 3, xd, -3, 3);
    init_rand(c, "G", 1, gd, 0.5f, 1.5f);
    eng_ow_node(c->w, "RMSNormalization", "", "rms", ENG_OW_LIST("X", "G"), ENG_OW_LIST("Y"));
    eng_ow_attr_float(c->w, "epsilon", 1e-6f);
    eng_ow_attr_int(c->w, "axis", -1);
    output(c, "Y", ENG_DT_FLOAT, 3);
    finish_case(c);
}

static void build_cases(void)
{
    static const mmnb_spec mm[] = {
        {1, 7, 32, 32, 4, ZP_NONE, false, false, 4}, {3, 33, 64, 32, 4, ZP_NONE, false, true, 4},
        {5, 31, 40, 32, 4, ZP_NONE, false, false, 4}, {2, 129, 100, 32, 0, ZP_NONE, false, false, 4},
        {1, 17, 96, 16, 0, ZP_RANDOM, false, false, 4}, {4, 64, 128, 64, 4, ZP_NONE, true, false, 4},
        {1, 1, 1024, 32, 4, ZP_NONE, false, true, 4}, {7, 127, 1024, 32, 4, ZP_RANDOM, false, false, 4},
        {16, 33, 256, 32, 1, ZP_NONE, true, false, 4}, {1, 129, 33, 32, 4, ZP_RANDOM, true, false, 4},
        {33, 16, 64, 32, 4, ZP_NONE, false, true, 4}, {2, 48, 136, 128, 0, ZP_RANDOM, false, false, 4},
        {37, 40, 256, 32, 4, ZP_RANDOM, true, false, 4}, {9, 24, 100, 32, 4, ZP_RANDOM, false, true, 4},
        /* int8 products over blocks of several 32-k groups (packed records of 64 to 256 k) */
        {9, 40, 1000, 128, 4, ZP_RANDOM, false, false, 4}, {17, 33, 768, 256, 4, ZP_NONE, false, true, 4},
        {1, 48, 320, 64, 4, ZP_RANDOM, true, false, 4},
        /* 8-bit weights (mixed-precision exports), with and without zero points, blocks of 16 to 128 */
        {1, 7, 32, 32, 4, ZP_NONE, false, false, 8}, {3, 33, 100, 32, 4, ZP_RANDOM, false, false, 8},
        {5, 40, 256, 128, 4, ZP_RANDOM, true, false, 8}, {2, 17, 80, 16, 4, ZP_RANDOM, false, true, 8},
        {4, 24, 64, 32, 0, ZP_RANDOM, false, false, 8}, {9, 129, 1024, 64, 4, ZP_NONE, true, false, 8},
        {1, 9, 72, 16, 1, ZP_NONE, true, false, 8},
        /* 4-bit zero points all 8, odd and even block counts */
        {5, 40, 256, 32, 4, ZP_ALL8, false, false, 4}, {3, 33, 96, 32, 4, ZP_ALL8, true, false, 4},
        {2, 24, 512, 128, 4, ZP_ALL8, false, false, 4},
    };
    for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++)
        case_mmnb(&mm[i]);
    static const gqa_spec gq[] = {
        {"prefill_s5_rotary", 4, 2, 64, 5, 0, 32, true, false, false},
        {"prefill_nopast_input", 4, 2, 64, 5, 0, 32, true, false, true},
        {"decode_past6", 4, 2, 64, 1, 6, 32, true, false, false},
        {"continue_s3_past4", 8, 2, 32, 3, 4, 16, true, false, false},
        {"decode_mha_no_rotary", 2, 2, 16, 1, 9, 0, false, false, false},
        {"packed_qkv_decode", 4, 1, 128, 1, 3, 8, true, true, false},
        {"prefill_s17_h128", 2, 1, 128, 17, 0, 40, true, false, false},
    };
    for (size_t i = 0; i < sizeof gq / sizeof gq[0]; i++)
        case_gqa(&gq[i]);
    case_norms();
    case_gather();
    case_small_ops();
    case_qdq_matmul(1, 64, 8, true);
    case_qdq_matmul(3, 40, 7, false);
    case_qdq_matmul(2, 33, 5, false);
    case_qdq_matmul(4, 256, 24, true);
    case_qdq_tied(9, 64, true);
    case_qdq_tied(7, 33, false);
    static const gbq_spec gbq[] = {
        {ENG_DT_UINT8, 8, 37, 0, 96, 32, true, true, false},  {ENG_DT_UINT8, 8, 11, 0, 80, 16, false, false, true},
        {ENG_DT_UINT8, 4, 13, 0, 48, 16, true, true, false},  {ENG_DT_UINT8, 4, 9, 0, 128, 32, false, true, true},
        {ENG_DT_UINT8, 4, 5, 0, 40, 16, true, false, false},  {ENG_DT_UINT8, 8, 6, 0, 100, 64, true, false, true},
        {ENG_DT_UINT4, 4, 7, 0, 33, 16, true, false, false},  {ENG_DT_INT4, 4, 9, 0, 64, 32, false, false, true},
        {ENG_DT_INT4, 4, 5, 0, 37, 16, true, false, false},   {ENG_DT_UINT8, 8, 6, 3, 64, 32, true, false, false},
    };
    for (size_t i = 0; i < sizeof gbq / sizeof gbq[0]; i++)
        case_gbq(&gbq[i]);
    case_float_matmul();
    case_rmsnorm();
}

/* ---- comparing ----------------------------------------------------------------- */

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int32_t dtype_of(const char *s)
{
    return !strcmp(s, "float32") ? ENG_DT_FLOAT : !strcmp(s, "int64") ? ENG_DT_INT64
         : !strcmp(s, "int32") ? ENG_DT_INT32 : !strcmp(s, "uint8") ? ENG_DT_UINT8 : ENG_DT_UNDEFINED;
}

START_TEST(op_matches_onnx_runtime)
{
    const opcase *c = &cases[_i];
    char path[1200];
    snprintf(path, sizeof path, "%s/ort.json", c->dir);
    json_error_t je;
    json_t *ort = json_load_file(path, 0, &je);
    ck_assert_msg(ort != NULL, "case %s: no ONNX Runtime result (%s)", c->name, je.text);
    json_t *err = json_object_get(ort, "error");

    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    eng_plan *p = NULL;
    eng_exec *x = NULL;
    ck_assert_msg(eng_graph_load(c->dir, &g, &d) == 0, "case %s: load failed: %s", c->name,
                  d.n_kept ? d.lines[0] : "");
    eng_plan_opts po = {.matmul_fp32 = c->fp32};
    ck_assert_msg(eng_plan_new(g, &po, &p, &d) == 0, "case %s: plan failed: %s", c->name,
                  d.n_kept ? d.lines[0] : "");
    if (c->packs && krn_active()->q4_packed) /* zero points all 8 are read as none, not left unpacked */
        ck_assert_msg(strstr(eng_plan_kernel(p, 0), "(packed") && !strstr(eng_plan_kernel(p, 0), "zero points"),
                      "case %s: kernel '%s', expected the packed form without zero points", c->name,
                      eng_plan_kernel(p, 0));
    x = eng_exec_new(p, NULL);
    ck_assert_ptr_nonnull(x);
    for (int i = 0; i < c->n_in; i++)
        ck_assert(eng_exec_set_input(x, c->in[i].name, c->in[i].dtype, c->in[i].rank, c->in[i].dims,
                                     c->in[i].data, &d) == 0);
    int rc = eng_exec_run(x, &d);
    if (c->expect_reject) {
        ck_assert_msg(err != NULL, "case %s: ONNX Runtime accepted a run expected to fail", c->name);
        ck_assert_msg(rc != 0, "case %s: the engine accepted what ONNX Runtime rejects (%s)", c->name,
                      json_string_value(err));
        ck_assert_uint_ge(d.n_kept, 1);
        goto done;
    }
    ck_assert_msg(err == NULL, "case %s: ONNX Runtime failed: %s", c->name, err ? json_string_value(err) : "");
    ck_assert_msg(rc == 0, "case %s: run failed: %s", c->name, d.n_kept ? d.lines[0] : "");

    json_t *outs = json_object_get(ort, "outputs");
    for (int o = 0; o < c->n_out; o++) {
        json_t *oj = json_array_get(outs, (size_t)o);
        int32_t dt = dtype_of(json_string_value(json_object_get(oj, "dtype")));
        json_t *dims = json_object_get(oj, "dims");
        eng_view v;
        ck_assert(eng_exec_value(x, c->out[o], &v) == 0);
        ck_assert_msg(v.dtype == dt, "case %s output %s: dtype %s vs %s", c->name, c->out[o],
                      eng_dtype_name(v.dtype), eng_dtype_name(dt));
        ck_assert_msg((size_t)v.rank == json_array_size(dims), "case %s output %s: rank %d vs %zu", c->name,
                      c->out[o], v.rank, json_array_size(dims));
        for (int k = 0; k < v.rank; k++)
            ck_assert_msg(v.dims[k] == json_integer_value(json_array_get(dims, (size_t)k)),
                          "case %s output %s: dim %d is %lld vs %lld", c->name, c->out[o], k, (long long)v.dims[k],
                          (long long)json_integer_value(json_array_get(dims, (size_t)k)));
        snprintf(path, sizeof path, "%s/ort_out_%d.bin", c->dir, o);
        size_t len;
        uint8_t *ref = read_file(path, &len);
        uint64_t n = eng_view_numel(&v);
        ck_assert_uint_eq(len, n * eng_dtype_size(dt));
        if (dt != ENG_DT_FLOAT) {
            ck_assert_msg(memcmp(ref, v.data, len) == 0, "case %s output %s: integers differ", c->name, c->out[o]);
        } else {
            const float *r = (const float *)ref, *q = v.data;
            double maxref = 1.0, maxdiff = 0.0;
            for (uint64_t i = 0; i < n; i++) {
                ck_assert_msg(isfinite(q[i]), "case %s output %s[%llu] is not finite", c->name, c->out[o],
                              (unsigned long long)i);
                if (fabs(r[i]) > maxref)
                    maxref = fabs(r[i]);
                if (fabs((double)r[i] - q[i]) > maxdiff)
                    maxdiff = fabs((double)r[i] - q[i]);
            }
            ck_assert_msg(maxdiff <= c->tol * maxref, "case %s output %s: max difference %g > %g (max |ref| %g)",
                          c->name, c->out[o], maxdiff, c->tol * maxref, maxref);
        }
        free(ref);
    }
    /* Any split of the work among a pool's participants gives the same bits
     * (the kernels' contract), including an uneven one and an idle participant. */
    for (int threads = 2; threads <= 3; threads++) {
        eng_pool *pool = eng_pool_new(threads, 0);
        ck_assert_ptr_nonnull(pool);
        eng_exec *xp = eng_exec_new(p, pool);
        ck_assert_ptr_nonnull(xp);
        for (int i = 0; i < c->n_in; i++)
            ck_assert(eng_exec_set_input(xp, c->in[i].name, c->in[i].dtype, c->in[i].rank, c->in[i].dims,
                                         c->in[i].data, &d) == 0);
        ck_assert_msg(eng_exec_run(xp, &d) == 0, "case %s, %d threads: run failed: %s", c->name, threads,
                      d.n_kept ? d.lines[0] : "");
        for (int o = 0; o < c->n_out; o++) {
            eng_view v1, vp;
            ck_assert(eng_exec_value(x, c->out[o], &v1) == 0 && eng_exec_value(xp, c->out[o], &vp) == 0);
            ck_assert_uint_eq(eng_view_numel(&v1), eng_view_numel(&vp));
            ck_assert_msg(memcmp(v1.data, vp.data, eng_view_numel(&v1) * eng_dtype_size(v1.dtype)) == 0,
                          "case %s output %s: %d threads differ from 1", c->name, c->out[o], threads);
        }
        eng_exec_free(xp);
        eng_pool_free(pool);
    }
done:
    json_decref(ort);
    eng_exec_free(x);
    eng_plan_free(p);
    eng_graph_free(g);
    eng_diag_clear(&d);
}
END_TEST

/* A writer for a one-node model of the engine's own refusal tests, in folder DIR (made here). */
static eng_ow *refusal_writer(const char *dir)
{
    mkdir(dir, 0755);
    eng_ow *w = eng_ow_new("refuse");
    eng_ow_opset(w, "", 21);
    eng_ow_opset(w, "com.microsoft", 1);
    char data[1200];
    snprintf(data, sizeof data, "%s/model.onnx.data", dir);
    eng_ow_data_open(w, data, "model.onnx.data");
    return w;
}

/* Saves W's model in DIR and loads it (the loader must accept it: the refusals come later). */
static eng_graph *save_and_load(eng_ow *w, const char *dir, eng_diag *d)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    ck_assert_int_eq(eng_ow_save(w, path), 0);
    eng_ow_free(w);
    eng_graph *g = NULL;
    ck_assert_int_eq(eng_graph_load(dir, &g, d), 0);
    return g;
}

/* Saves W's model in DIR and checks that planning it fails with one problem line naming NODE and EXPECT. */
static void expect_plan_refusal(eng_ow *w, const char *dir, const char *node, const char *expect)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = save_and_load(w, dir, &d);
    eng_plan *p = NULL;
    ck_assert_int_eq(eng_plan_new(g, NULL, &p, &d), -1);
    ck_assert_ptr_null(p);
    ck_assert_msg(d.n_kept == 1 && strstr(d.lines[0], node) && strstr(d.lines[0], expect), "%s: unexpected diag: %s",
                  dir, d.n_kept ? d.lines[0] : "(none)");
    eng_diag_clear(&d);
    eng_graph_free(g);
}

/*
 * Variants the engine must refuse at plan time, naming node and attribute or
 * input: attribute values it does not run, and inputs of the right size in
 * another shape (scales transposed to [k_blocks, N], B flattened to
 * [N, k_blocks * blob]), which ONNX Runtime refuses too, never read as
 * [N, k_blocks].
 */
START_TEST(unsupported_variants_rejected)
{
    static const struct {
        const char *tag, *attr;
        int64_t v;
        int b_rank;
        int64_t b_dims[3], s_dims[2];
        const char *expect;
    } bad[] = {
        {"bits", "bits", 2, 3, {8, 2, 16}, {8, 2}, "'bits' = 2"},
        {"block_size", "block_size", 24, 3, {8, 2, 16}, {8, 2}, "'block_size' = 24"},
        {"scales_transposed", "", 0, 3, {8, 2, 16}, {2, 8}, "input scales must"},
        {"b_flat", "", 0, 2, {8, 32, 0}, {8, 2}, "input B must"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/reject_%s", root, bad[i].tag);
        eng_ow *w = refusal_writer(dir);
        int64_t ad[2] = {1, 64};
        eng_ow_input(w, "A", ENG_DT_FLOAT, 2, fixed_dims(2, ad));
        uint8_t b[8 * 2 * 16] = {0};
        float sc[16] = {0};
        eng_ow_init_external(w, "B", ENG_DT_UINT8, bad[i].b_rank, bad[i].b_dims, b, sizeof b);
        eng_ow_init_external(w, "S", ENG_DT_FLOAT, 2, bad[i].s_dims, sc, sizeof sc);
        eng_ow_node(w, "MatMulNBits", "com.microsoft", "mm_bad", ENG_OW_LIST("A", "B", "S"), ENG_OW_LIST("Y"));
        eng_ow_attr_int(w, "K", 64);
        eng_ow_attr_int(w, "N", 8);
        eng_ow_attr_int(w, "bits", !strcmp(bad[i].attr, "bits") ? bad[i].v : 4);
        eng_ow_attr_int(w, "block_size", !strcmp(bad[i].attr, "block_size") ? bad[i].v : 32);
        eng_ow_attr_int(w, "accuracy_level", 4);
        eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, fixed_dims(2, (int64_t[]){1, 8}));
        expect_plan_refusal(w, dir, "mm_bad", bad[i].expect);
    }
}
END_TEST

/* GroupQueryAttention's do_rotary is 0 or 1 (ONNX Runtime rotates only for 1): another value is refused. */
START_TEST(gqa_do_rotary_out_of_range)
{
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/reject_do_rotary", root);
    eng_ow *w = refusal_writer(dir);
    int64_t qd[3] = {1, 1, 64}, kd[3] = {1, 1, 32}, pd[4] = {1, 1, 4, 32}, one[1] = {1};
    eng_ow_input(w, "q", ENG_DT_FLOAT, 3, fixed_dims(3, qd));
    eng_ow_input(w, "k", ENG_DT_FLOAT, 3, fixed_dims(3, kd));
    eng_ow_input(w, "v", ENG_DT_FLOAT, 3, fixed_dims(3, kd));
    eng_ow_input(w, "pk", ENG_DT_FLOAT, 4, fixed_dims(4, pd));
    eng_ow_input(w, "pv", ENG_DT_FLOAT, 4, fixed_dims(4, pd));
    eng_ow_input(w, "seqlens_k", ENG_DT_INT32, 1, fixed_dims(1, one));
    eng_ow_input(w, "total_len", ENG_DT_INT32, 1, fixed_dims(1, one));
    eng_ow_node(w, "GroupQueryAttention", "com.microsoft", "gqa_bad",
                ENG_OW_LIST("q", "k", "v", "pk", "pv", "seqlens_k", "total_len"), ENG_OW_LIST("o", "pk_out", "pv_out"));
    eng_ow_attr_int(w, "num_heads", 2);
    eng_ow_attr_int(w, "kv_num_heads", 1);
    eng_ow_attr_int(w, "do_rotary", 2);
    eng_ow_output(w, "o", ENG_DT_FLOAT, 3, fixed_dims(3, qd));
    eng_ow_output(w, "pk_out", ENG_DT_FLOAT, 4, fixed_dims(4, pd));
    eng_ow_output(w, "pv_out", ENG_DT_FLOAT, 4, fixed_dims(4, pd));
    expect_plan_refusal(w, dir, "gqa_bad", "'do_rotary' = 2");
}
END_TEST

/*
 * GatherBlockQuantized where qwen3d refuses what ONNX Runtime runs: 2-bit
 * codes and FLOAT16 scales at plan time, naming the node; an index past
 * the table when run (ONNX Runtime's CPU kernel writes a row of zeros; a
 * token id past the vocabulary is an error here).
 */
START_TEST(gbq_refusals)
{
    static const struct { int bits; int32_t scale_dt; int64_t index; const char *expect; } bad[] = {
        {2, ENG_DT_FLOAT, 0, "'bits' = 2"},
        {8, ENG_DT_FLOAT16, 0, "FLOAT16"},
        {8, ENG_DT_FLOAT, 4, "index 4 out of range [-4, 4)"},
        {4, ENG_DT_FLOAT, -5, "index -5 out of range [-4, 4)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/gbq_refused_%zu", root, i);
        eng_ow *w = refusal_writer(dir);
        int64_t id[1] = {1};
        eng_ow_input(w, "ids", ENG_DT_INT64, 1, fixed_dims(1, id));
        uint8_t q[4 * 32] = {0};
        uint16_t sc[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
        float scf[4] = {1, 1, 1, 1};
        int64_t qd[2] = {4, 32 * bad[i].bits / 8}, sd[2] = {4, 1};
        eng_ow_init_external(w, "table", ENG_DT_UINT8, 2, qd, q, (size_t)(qd[0] * qd[1]));
        if (bad[i].scale_dt == ENG_DT_FLOAT16)
            eng_ow_init_external(w, "scales", ENG_DT_FLOAT16, 2, sd, sc, sizeof sc);
        else
            eng_ow_init_external(w, "scales", ENG_DT_FLOAT, 2, sd, scf, sizeof scf);
        eng_ow_node(w, "GatherBlockQuantized", "com.microsoft", "gbq_bad", ENG_OW_LIST("table", "ids", "scales"),
                    ENG_OW_LIST("Y"));
        eng_ow_attr_int(w, "bits", bad[i].bits);
        eng_ow_attr_int(w, "block_size", 32);
        eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, fixed_dims(2, (int64_t[]){1, 32}));
        eng_diag d;
        eng_diag_init(&d);
        eng_graph *g = save_and_load(w, dir, &d);
        eng_plan *p = NULL;
        int rc = eng_plan_new(g, NULL, &p, &d);
        if (bad[i].index == 0) {
            ck_assert_int_eq(rc, -1);
            ck_assert_ptr_null(p);
        } else {
            ck_assert_msg(rc == 0, "plan failed: %s", d.n_kept ? d.lines[0] : "");
            eng_exec *x = eng_exec_new(p, NULL);
            ck_assert_ptr_nonnull(x);
            ck_assert(eng_exec_set_input(x, "ids", ENG_DT_INT64, 1, id, &bad[i].index, &d) == 0);
            ck_assert_int_eq(eng_exec_run(x, &d), -1);
            eng_exec_free(x);
        }
        ck_assert_msg(d.n_kept >= 1 && strstr(d.lines[0], "gbq_bad") && strstr(d.lines[0], bad[i].expect),
                      "unexpected diag: %s", d.n_kept ? d.lines[0] : "(none)");
        eng_plan_free(p);
        eng_diag_clear(&d);
        eng_graph_free(g);
    }
}
END_TEST

int main(void)
{
    const char *bd = getenv("QD_BUILDDIR"), *src = getenv("QD_SRCDIR"), *node = getenv("NODE");
    if (!bd || !src) {
        fprintf(stderr, "QD_BUILDDIR and QD_SRCDIR must be set (run through make check)\n");
        return 1;
    }
    krn_init();
    snprintf(root, sizeof root, "%s/tests/tmp/ops", bd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    if (system(cmd) != 0)
        return 1;
    build_cases();
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ort/run-graph.js' '%s'", node ? node : "node", src, root);
    if (system(cmd) != 0) {
        fprintf(stderr, "running the cases through ONNX Runtime failed\n");
        return 1;
    }
    Suite *s = suite_create("ops_vs_onnxruntime");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, op_matches_onnx_runtime, 0, n_cases);
    tcase_add_test(tc, unsupported_variants_rejected);
    tcase_add_test(tc, gqa_do_rotary_out_of_range);
    tcase_add_test(tc, gbq_refusals);
    suite_add_tcase(s, tc);
    int status = qd_run_suite(s);
    for (int i = 0; i < n_cases; i++)
        for (int k = 0; k < cases[i].n_in; k++)
            free(cases[i].in[k].data);
    return status;
}
