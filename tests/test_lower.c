/*
 * test_lower: the lowering of the standard contracts (engine/lower.c) on
 * small graphs written with the project's writer.
 *
 * (1) Near misses of the recognized patterns are refused when the plan is
 * built, with exactly one line naming the node and what differs: a wrong
 * axis, block size 64 with BF16 scales, scales that are not constant, zero
 * points of another type, a Transpose on the wrong side of the LM head, a
 * tied embedding missing its Gather or its LM head, a weight fed as a
 * MatMul's A, a BF16 round trip, a non-causal Attention.
 *
 * (2) The lowered INT4 weights run the MatMulNBits kernels on the same
 * codes: DequantizeLinear -> MatMul gives bit for bit what MatMulNBits gives
 * on those codes and scales (zero points 8, any zero points, FP32 or BF16
 * scales, a partial last block, odd N), the tied embedding's LM head what
 * MatMulNBits gives on the [V, D] codes, and its Gather the rows
 * (q - zp) * scale exactly. ONNX Runtime's view of the same patterns is in
 * test_ops_ort; the whole models' in tests/contracts_vs_ort.sh.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model.h"
#include "engine/writer/onnx_write.h"
#include "engine/plan.h"
#include "kernels/krn.h"
#include "tests/check_main.h"

static char root[512];
static uint64_t rng = 0x243f6a8885a308d3ull;

static uint32_t rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() & 0xffffff) / (float)0x1000000;
}

/* A writer for graph NAME in its own folder, ai.onnx opset 23 (and com.microsoft 1). */
static eng_ow *begin(const char *name, char *dir)
{
    snprintf(dir, 1024, "%s/%s", root, name);
    mkdir(dir, 0755);
    eng_ow *w = eng_ow_new(name);
    ck_assert_ptr_nonnull(w);
    eng_ow_opset(w, "", 23);
    eng_ow_opset(w, "com.microsoft", 1);
    char data[1100];
    snprintf(data, sizeof data, "%s/model.onnx.data", dir);
    eng_ow_data_open(w, data, "model.onnx.data");
    return w;
}

static void save(eng_ow *w, const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    ck_assert_msg(eng_ow_save(w, path) == 0, "%s", eng_ow_error(w) ? eng_ow_error(w) : "");
    eng_ow_free(w);
}

static eng_ow_dim *dims_of(int rank, const int64_t *d)
{
    static eng_ow_dim out[ENG_MAX_RANK];
    for (int i = 0; i < rank; i++)
        out[i] = ENG_OW_FIXED(d[i]);
    return out;
}

/* 4-bit tensor contents: COUNT values, low nibble first. */
typedef struct nib4 {
    uint8_t *b;
    uint64_t count;
} nib4;

static unsigned nget(const nib4 *t, uint64_t i)
{
    return (t->b[i / 2] >> (4 * (i & 1))) & 15;
}

static void nset(nib4 *t, uint64_t i, unsigned v)
{
    t->b[i / 2] = (uint8_t)((t->b[i / 2] & ~(15u << (4 * (i & 1)))) | ((v & 15) << (4 * (i & 1))));
}

static nib4 nnew(uint64_t count)
{
    nib4 t = {calloc(count / 2 + 2, 1), count};
    ck_assert_ptr_nonnull(t.b);
    return t;
}

/*
 * The codes, scales and zero points of one weight W[n][k] = (q - zp) * s,
 * N output features, K inputs, blocks of 32 along K.
 */
typedef struct weight {
    int64_t n, k, kb;
    nib4 q, zp;           /* q: [n][k], zp: [n][kb] */
    float *s;             /* [n][kb] */
} weight;

static weight wnew(int64_t n, int64_t k, bool zp8, bool bf16_scales)
{
    weight w = {n, k, (k + 31) / 32, nnew((uint64_t)(n * k)), nnew((uint64_t)(n * ((k + 31) / 32))), NULL};
    w.s = malloc((size_t)(n * w.kb) * sizeof *w.s);
    for (int64_t i = 0; i < n * k; i++)
        nset(&w.q, (uint64_t)i, rnd() & 15);
    for (int64_t i = 0; i < n * w.kb; i++) {
        nset(&w.zp, (uint64_t)i, zp8 ? 8 : rnd() & 15);
        w.s[i] = rndf(0.01f, 0.1f) * ((rnd() & 1) ? -1.0f : 1.0f);
        if (bf16_scales) {
            uint32_t u;
            memcpy(&u, &w.s[i], 4);
            u &= 0xFFFF0000u;
            memcpy(&w.s[i], &u, 4);
        }
    }
    return w;
}

static void wfree(weight *w)
{
    free(w->q.b);
    free(w->zp.b);
    free(w->s);
}

/*
 * Writes W for DequantizeLinear: axis 0 as [K, N] (a MatMul weight), axis 1
 * as [N, K] (the tied embedding), scales as SDT (FLOAT or BFLOAT16) and zero
 * points as ZDT (UINT4, or a wrong type for the near misses), with blocks of
 * BS; the node BASE_dq writes OUT.
 */
static void write_dq(eng_ow *w, const weight *wt, const char *base, int axis, int bs, int32_t sdt, int32_t zdt,
                     const char *out)
{
    int64_t R = axis ? wt->n : wt->k, C = axis ? wt->k : wt->n, kb = (wt->k + bs - 1) / bs;
    int64_t sr = axis ? wt->n : kb, scn = axis ? kb : wt->n;
    nib4 q = nnew((uint64_t)(R * C)), z = nnew((uint64_t)(sr * scn));
    for (int64_t n = 0; n < wt->n; n++)
        for (int64_t k = 0; k < wt->k; k++)
            nset(&q, (uint64_t)(axis ? n * wt->k + k : k * wt->n + n), nget(&wt->q, (uint64_t)(n * wt->k + k)));
    float *sc = malloc((size_t)(sr * scn) * sizeof *sc);
    uint16_t *sh = malloc((size_t)(sr * scn) * sizeof *sh);
    for (int64_t n = 0; n < wt->n; n++)
        for (int64_t b = 0; b < kb; b++) {
            int64_t i = axis ? n * kb + b : b * wt->n + n, j = n * wt->kb + (b < wt->kb ? b : 0);
            sc[i] = wt->s[j];
            uint32_t u;
            memcpy(&u, &sc[i], 4);
            sh[i] = (uint16_t)(u >> 16);
            nset(&z, (uint64_t)i, nget(&wt->zp, (uint64_t)j));
        }
    char qn[64], sn[64], zn[64], node[64];
    snprintf(qn, sizeof qn, "%s_q", base);
    snprintf(sn, sizeof sn, "%s_s", base);
    snprintf(zn, sizeof zn, "%s_zp", base);
    snprintf(node, sizeof node, "%s_dq", base);
    int64_t qd[2] = {R, C}, sd[2] = {sr, scn};
    eng_ow_init_external(w, qn, ENG_DT_UINT4, 2, qd, q.b, (size_t)((R * C + 1) / 2));
    if (sdt == ENG_DT_BFLOAT16)
        eng_ow_init_external(w, sn, sdt, 2, sd, sh, (size_t)(sr * scn) * 2);
    else
        eng_ow_init_external(w, sn, sdt, 2, sd, sc, (size_t)(sr * scn) * 4);
    if (zdt == ENG_DT_UINT4 || zdt == ENG_DT_INT4) {
        eng_ow_init_external(w, zn, zdt, 2, sd, z.b, (size_t)((sr * scn + 1) / 2));
    } else {
        uint8_t *zb = malloc((size_t)(sr * scn));
        for (int64_t i = 0; i < sr * scn; i++)
            zb[i] = (uint8_t)nget(&z, (uint64_t)i);
        eng_ow_init_external(w, zn, zdt, 2, sd, zb, (size_t)(sr * scn));
        free(zb);
    }
    eng_ow_node(w, "DequantizeLinear", "", node, ENG_OW_LIST(qn, sn, zn), ENG_OW_LIST(out));
    eng_ow_attr_int(w, "axis", axis);
    eng_ow_attr_int(w, "block_size", bs);
    free(q.b);
    free(z.b);
    free(sc);
    free(sh);
}

/* MatMulNBits over W's codes: B [N, kb, 16], fp32 scales, and its zero points unless all are 8. */
static void write_mmnb(eng_ow *w, const weight *wt, bool with_zp, const char *a, const char *out)
{
    int64_t n = wt->n, kb = wt->kb, bd[3] = {n, kb, 16}, sd[1] = {n * kb}, zd[1] = {n * ((kb + 1) / 2)};
    uint8_t *b = calloc((size_t)(n * kb * 16), 1), *z = calloc((size_t)zd[0] + 1, 1);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k = 0; k < wt->k; k++)
            b[i * kb * 16 + k / 2] |= (uint8_t)(nget(&wt->q, (uint64_t)(i * wt->k + k)) << (4 * (k & 1)));
        for (int64_t j = 0; j < kb; j++)
            z[i * ((kb + 1) / 2) + j / 2] |= (uint8_t)(nget(&wt->zp, (uint64_t)(i * kb + j)) << (4 * (j & 1)));
    }
    eng_ow_init_external(w, "mm_B", ENG_DT_UINT8, 3, bd, b, (size_t)(n * kb * 16));
    eng_ow_init_external(w, "mm_S", ENG_DT_FLOAT, 1, sd, wt->s, (size_t)(n * kb) * 4);
    if (with_zp) {
        eng_ow_init_external(w, "mm_Z", ENG_DT_UINT8, 1, zd, z, (size_t)zd[0]);
        eng_ow_node(w, "MatMulNBits", "com.microsoft", "mmnb", ENG_OW_LIST(a, "mm_B", "mm_S", "mm_Z"),
                    ENG_OW_LIST(out));
    } else {
        eng_ow_node(w, "MatMulNBits", "com.microsoft", "mmnb", ENG_OW_LIST(a, "mm_B", "mm_S"), ENG_OW_LIST(out));
    }
    eng_ow_attr_int(w, "K", wt->k);
    eng_ow_attr_int(w, "N", wt->n);
    eng_ow_attr_int(w, "bits", 4);
    eng_ow_attr_int(w, "block_size", 32);
    eng_ow_attr_int(w, "accuracy_level", 4);
    free(b);
    free(z);
}

/* Plans DIR; on success runs it with input NAME = X [rows, cols] (and ids) and copies output OUT (COUNT floats). */
static void run_graph(const char *dir, const char *in, const float *x, int64_t rows, int64_t cols, const int64_t *ids,
                      size_t n_ids, const char *out, float *res, uint64_t count)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    eng_plan *p = NULL;
    ck_assert_msg(eng_graph_load(dir, &g, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    ck_assert_msg(eng_plan_new(g, NULL, &p, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    eng_exec *x_ = eng_exec_new(p, NULL);
    ck_assert_ptr_nonnull(x_);
    int64_t xd[2] = {rows, cols}, idd[1] = {(int64_t)n_ids};
    ck_assert(eng_exec_set_input(x_, in, ENG_DT_FLOAT, 2, xd, x, &d) == 0);
    if (ids)
        ck_assert(eng_exec_set_input(x_, "ids", ENG_DT_INT64, 1, idd, ids, &d) == 0);
    ck_assert_msg(eng_exec_run(x_, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    eng_view v;
    ck_assert(eng_exec_value(x_, out, &v) == 0);
    ck_assert_uint_eq(eng_view_numel(&v), count);
    memcpy(res, v.data, count * sizeof(float));
    eng_exec_free(x_);
    eng_plan_free(p);
    eng_graph_free(g);
    eng_diag_clear(&d);
}

/*
 * The step producing the graph's logits is the LM head itself, Cast folded,
 * so the runner can compute the last row only and fold the greedy argmax in.
 */
static void head_writes_logits(const char *dir)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    eng_plan *p = NULL;
    ck_assert(eng_graph_load(dir, &g, &d) == 0);
    ck_assert(eng_plan_new(g, NULL, &p, &d) == 0);
    eng_exec *x = eng_exec_new(p, NULL);
    ck_assert_ptr_nonnull(x);
    ck_assert_msg(eng_exec_last_row_only(x, "logits", true, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    ck_assert_msg(eng_exec_set_argmax(x, "logits", true, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    eng_exec_free(x);
    eng_plan_free(p);
    eng_graph_free(g);
    eng_diag_clear(&d);
}

/* ---- (2) the same kernels on the same codes ---- */

START_TEST(dq_matmul_is_matmulnbits)
{
    static const struct { int64_t n, k; bool zp8, bf16; } cs[] = {
        {8, 64, true, true}, {8, 64, true, false}, {7, 40, false, false}, {5, 33, false, true}, {24, 256, true, true},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        weight wt = wnew(cs[c].n, cs[c].k, cs[c].zp8, true);
        int64_t m = 3, xd[2] = {m, cs[c].k}, yd[2] = {m, cs[c].n};
        float *x = malloc((size_t)(m * cs[c].k) * sizeof *x), *y0 = malloc((size_t)(m * cs[c].n) * sizeof *y0),
              *y1 = malloc((size_t)(m * cs[c].n) * sizeof *y1);
        for (int64_t i = 0; i < m * cs[c].k; i++)
            x[i] = rndf(-2, 2);
        char d0[1024], d1[1024], name[64];
        snprintf(name, sizeof name, "mmnb_%zu", c);
        eng_ow *w = begin(name, d0);
        eng_ow_input(w, "X", ENG_DT_FLOAT, 2, dims_of(2, xd));
        write_mmnb(w, &wt, !cs[c].zp8, "X", "Y");
        eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, dims_of(2, yd));
        save(w, d0);
        snprintf(name, sizeof name, "dq_%zu", c);
        w = begin(name, d1);
        eng_ow_input(w, "X", ENG_DT_FLOAT, 2, dims_of(2, xd));
        write_dq(w, &wt, "w", 0, 32, cs[c].bf16 ? ENG_DT_BFLOAT16 : ENG_DT_FLOAT, ENG_DT_UINT4, "W");
        eng_ow_node(w, "MatMul", "", "mm", ENG_OW_LIST("X", "W"), ENG_OW_LIST("Y"));
        eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, dims_of(2, yd));
        save(w, d1);
        run_graph(d0, "X", x, m, cs[c].k, NULL, 0, "Y", y0, (uint64_t)(m * cs[c].n));
        run_graph(d1, "X", x, m, cs[c].k, NULL, 0, "Y", y1, (uint64_t)(m * cs[c].n));
        ck_assert_msg(memcmp(y0, y1, (size_t)(m * cs[c].n) * sizeof *y0) == 0,
                      "n %lld k %lld zp8 %d bf16 %d: DequantizeLinear -> MatMul differs from MatMulNBits",
                      (long long)cs[c].n, (long long)cs[c].k, cs[c].zp8, cs[c].bf16);
        free(x);
        free(y0);
        free(y1);
        wfree(&wt);
    }
}
END_TEST

/* H [m, D] -> the tied embedding WT's Gather of 4 ids and LM head, its logits through a Cast to FLOAT if CAST. */
static void write_tied(const char *name, char *dir, const weight *wt, int64_t m, bool cast)
{
    int64_t V = wt->n, D = wt->k;
    int64_t hd[2] = {m, D}, ld[2] = {m, V}, idd[1] = {4}, ed[2] = {4, D};
    eng_ow *w = begin(name, dir);
    eng_ow_input(w, "H", ENG_DT_FLOAT, 2, dims_of(2, hd));
    eng_ow_input(w, "ids", ENG_DT_INT64, 1, dims_of(1, idd));
    write_dq(w, wt, "emb", 1, 32, ENG_DT_BFLOAT16, ENG_DT_UINT4, "E");
    eng_ow_node(w, "Gather", "", "lookup", ENG_OW_LIST("E", "ids"), ENG_OW_LIST("rows"));
    eng_ow_node(w, "Transpose", "", "tie", ENG_OW_LIST("E"), ENG_OW_LIST("ET"));
    eng_ow_attr_ints(w, "perm", 2, (const int64_t[]){1, 0});
    eng_ow_node(w, "MatMul", "", "lm_head", ENG_OW_LIST("H", "ET"), ENG_OW_LIST(cast ? "logits_bf16" : "logits"));
    if (cast) {
        eng_ow_node(w, "Cast", "", "to_float", ENG_OW_LIST("logits_bf16"), ENG_OW_LIST("logits"));
        eng_ow_attr_int(w, "to", ENG_DT_FLOAT);
    }
    eng_ow_output(w, "rows", ENG_DT_FLOAT, 2, dims_of(2, ed));
    eng_ow_output(w, "logits", ENG_DT_FLOAT, 2, dims_of(2, ld));
    save(w, dir);
}

START_TEST(tied_embedding_is_one_weight)
{
    static const struct { int64_t v, d; bool zp8; } cs[] = {{9, 64, true}, {7, 33, false}, {40, 96, true}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t V = cs[c].v, D = cs[c].d, m = 2;
        weight wt = wnew(V, D, cs[c].zp8, true);
        int64_t hd[2] = {m, D}, ld[2] = {m, V};
        int64_t ids[4] = {0, V - 1, -1, V / 2};
        float *h = malloc((size_t)(m * D) * sizeof *h), *l0 = malloc((size_t)(m * V) * 4), *l1 = malloc((size_t)(m * V) * 4);
        float *rows = malloc((size_t)(4 * D) * sizeof *rows);
        for (int64_t i = 0; i < m * D; i++)
            h[i] = rndf(-2, 2);
        char d0[1024], d1[1024], name[64];
        snprintf(name, sizeof name, "head_mmnb_%zu", c);
        eng_ow *w = begin(name, d0);
        eng_ow_input(w, "H", ENG_DT_FLOAT, 2, dims_of(2, hd));
        write_mmnb(w, &wt, !cs[c].zp8, "H", "logits");
        eng_ow_output(w, "logits", ENG_DT_FLOAT, 2, dims_of(2, ld));
        save(w, d0);
        snprintf(name, sizeof name, "tied_%zu", c);
        write_tied(name, d1, &wt, m, false);
        /* the BF16 graph's edge: the LM head's output leaves through a Cast to FLOAT */
        char d2[1024];
        snprintf(name, sizeof name, "tied_cast_%zu", c);
        write_tied(name, d2, &wt, m, true);
        run_graph(d0, "H", h, m, D, NULL, 0, "logits", l0, (uint64_t)(m * V));
        run_graph(d1, "H", h, m, D, ids, 4, "logits", l1, (uint64_t)(m * V));
        ck_assert_msg(memcmp(l0, l1, (size_t)(m * V) * 4) == 0, "v %lld d %lld: the tied LM head differs from "
                      "MatMulNBits on the same codes", (long long)V, (long long)D);
        run_graph(d2, "H", h, m, D, ids, 4, "logits", l1, (uint64_t)(m * V));
        ck_assert_msg(memcmp(l0, l1, (size_t)(m * V) * 4) == 0, "v %lld d %lld: the LM head behind a Cast differs",
                      (long long)V, (long long)D);
        head_writes_logits(d2);
        run_graph(d1, "H", h, m, D, ids, 4, "rows", rows, (uint64_t)(4 * D));
        for (int r = 0; r < 4; r++) {
            int64_t row = ids[r] < 0 ? ids[r] + V : ids[r];
            for (int64_t k = 0; k < D; k++) {
                int64_t b = k / 32;
                float want = (float)((int)nget(&wt.q, (uint64_t)(row * D + k)) -
                                     (int)nget(&wt.zp, (uint64_t)(row * wt.kb + b))) * wt.s[row * wt.kb + b];
                ck_assert_msg(memcmp(&rows[r * D + k], &want, 4) == 0, "v %lld d %lld: row %lld col %lld: %g vs %g",
                              (long long)V, (long long)D, (long long)row, (long long)k, rows[r * D + k], want);
            }
        }
        free(h);
        free(l0);
        free(l1);
        free(rows);
        wfree(&wt);
    }
}
END_TEST

/* ---- (1) near misses ---- */

/* Plans DIR, which must fail with one line naming NODE and holding WHAT. */
static void refused(const char *dir, const char *node, const char *what)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_graph *g = NULL;
    eng_plan *p = NULL;
    ck_assert_msg(eng_graph_load(dir, &g, &d) == 0, "%s: %s", dir, d.n_kept ? d.lines[0] : "");
    ck_assert_int_eq(eng_plan_new(g, NULL, &p, &d), -1);
    ck_assert_ptr_null(p);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", node);
    ck_assert_msg(d.n_total == 1 && strstr(d.lines[0], quoted) && strstr(d.lines[0], what) &&
                      !strchr(d.lines[0], '\n'),
                  "%s: expected one line naming %s with \"%s\", got %zu: %s", dir, quoted, what, d.n_total,
                  d.n_kept ? d.lines[0] : "(none)");
    eng_diag_clear(&d);
    eng_graph_free(g);
}

/* X [2, K] -> MatMul with the weight written by write_dq(axis, bs, sdt, zdt) as B (or as A with swap). */
static void near_miss_matmul(const char *name, int axis, int bs, int32_t sdt, int32_t zdt, bool swap,
                             const char *node, const char *what)
{
    char dir[1024];
    weight wt = wnew(8, 64, true, true);
    eng_ow *w = begin(name, dir);
    int64_t xd[2] = {2, 64}, yd[2] = {2, 8};
    eng_ow_input(w, "X", ENG_DT_FLOAT, 2, dims_of(2, xd));
    write_dq(w, &wt, "w", axis, bs, sdt, zdt, "W");
    if (swap)
        eng_ow_node(w, "MatMul", "", "mm", ENG_OW_LIST("W", "X"), ENG_OW_LIST("Y"));
    else
        eng_ow_node(w, "MatMul", "", "mm", ENG_OW_LIST("X", "W"), ENG_OW_LIST("Y"));
    eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, dims_of(2, yd));
    save(w, dir);
    refused(dir, node, what);
    wfree(&wt);
}

START_TEST(near_misses_of_the_weight)
{
    near_miss_matmul("miss_axis", 1, 32, ENG_DT_BFLOAT16, ENG_DT_UINT4, false, "w_dq", "axis = 1");
    near_miss_matmul("miss_block64", 0, 64, ENG_DT_BFLOAT16, ENG_DT_UINT4, false, "w_dq", "block_size = 64");
    near_miss_matmul("miss_zp_int4", 0, 32, ENG_DT_BFLOAT16, ENG_DT_INT4, false, "w_dq", "zero points are INT4");
    near_miss_matmul("miss_zp_uint8", 0, 32, ENG_DT_FLOAT, ENG_DT_UINT8, false, "w_dq", "zero points are UINT8");
    near_miss_matmul("miss_as_a", 0, 32, ENG_DT_BFLOAT16, ENG_DT_UINT4, true, "w_dq", "MatMul's A");

    /* scales computed (here a graph input) instead of constant */
    char dir[1024];
    eng_ow *w = begin("miss_scales_input", dir);
    int64_t xd[2] = {2, 64}, yd[2] = {2, 8}, qd[2] = {64, 8}, sd[2] = {2, 8};
    uint8_t q[256] = {0}, z[8];
    memset(z, 0x88, sizeof z);
    eng_ow_input(w, "X", ENG_DT_FLOAT, 2, dims_of(2, xd));
    eng_ow_input(w, "S", ENG_DT_FLOAT, 2, dims_of(2, sd));
    eng_ow_init_external(w, "Q", ENG_DT_UINT4, 2, qd, q, sizeof q);
    eng_ow_init_external(w, "Z", ENG_DT_UINT4, 2, sd, z, sizeof z);
    eng_ow_node(w, "DequantizeLinear", "", "w_dq", ENG_OW_LIST("Q", "S", "Z"), ENG_OW_LIST("W"));
    eng_ow_attr_int(w, "axis", 0);
    eng_ow_attr_int(w, "block_size", 32);
    eng_ow_node(w, "MatMul", "", "mm", ENG_OW_LIST("X", "W"), ENG_OW_LIST("Y"));
    eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, dims_of(2, yd));
    save(w, dir);
    refused(dir, "w_dq", "scales are not a constant initializer");
}
END_TEST

/* The tied embedding with GATHER and HEAD (the LM head MatMul; head_as_a: the Transpose feeds its A). */
static void near_miss_tied(const char *name, bool gather, bool head, bool head_as_a, const char *node,
                           const char *what)
{
    char dir[1024];
    weight wt = wnew(9, 64, true, true);
    eng_ow *w = begin(name, dir);
    int64_t hd[2] = {2, 64}, idd[1] = {2}, ld[2] = {2, 9}, ed[2] = {2, 64};
    eng_ow_input(w, "H", ENG_DT_FLOAT, 2, dims_of(2, hd));
    eng_ow_input(w, "ids", ENG_DT_INT64, 1, dims_of(1, idd));
    write_dq(w, &wt, "emb", 1, 32, ENG_DT_BFLOAT16, ENG_DT_UINT4, "E");
    if (gather) {
        eng_ow_node(w, "Gather", "", "lookup", ENG_OW_LIST("E", "ids"), ENG_OW_LIST("rows"));
        eng_ow_output(w, "rows", ENG_DT_FLOAT, 2, dims_of(2, ed));
    }
    if (head) {
        eng_ow_node(w, "Transpose", "", "tie", ENG_OW_LIST("E"), ENG_OW_LIST("ET"));
        eng_ow_attr_ints(w, "perm", 2, (const int64_t[]){1, 0});
        if (head_as_a)
            eng_ow_node(w, "MatMul", "", "lm_head", ENG_OW_LIST("ET", "H"), ENG_OW_LIST("logits"));
        else
            eng_ow_node(w, "MatMul", "", "lm_head", ENG_OW_LIST("H", "ET"), ENG_OW_LIST("logits"));
        eng_ow_output(w, "logits", ENG_DT_FLOAT, 2, dims_of(2, ld));
    }
    save(w, dir);
    refused(dir, node, what);
    wfree(&wt);
}

START_TEST(near_misses_of_the_tie)
{
    near_miss_tied("miss_tie_wrong_side", true, true, true, "lm_head", "Transpose on the wrong side");
    near_miss_tied("miss_tie_no_head", true, false, false, "emb_dq", "feeds a Gather without a Transpose -> MatMul");
    near_miss_tied("miss_tie_no_gather", false, true, false, "emb_dq", "feeds a Transpose without a Gather");
}
END_TEST

START_TEST(near_misses_elsewhere)
{
    /* FLOAT -> BFLOAT16 -> FLOAT rounds on purpose; the plan does not round */
    char dir[1024];
    eng_ow *w = begin("miss_round_trip", dir);
    int64_t xd[2] = {2, 5};
    eng_ow_input(w, "X", ENG_DT_FLOAT, 2, dims_of(2, xd));
    eng_ow_node(w, "Cast", "", "to_bf16", ENG_OW_LIST("X"), ENG_OW_LIST("XB"));
    eng_ow_attr_int(w, "to", ENG_DT_BFLOAT16);
    eng_ow_node(w, "Cast", "", "back", ENG_OW_LIST("XB"), ENG_OW_LIST("Y"));
    eng_ow_attr_int(w, "to", ENG_DT_FLOAT);
    eng_ow_output(w, "Y", ENG_DT_FLOAT, 2, dims_of(2, xd));
    save(w, dir);
    refused(dir, "back", "rounds to BFLOAT16 and back");

    /* an Attention that is not causal */
    w = begin("miss_not_causal", dir);
    int64_t qd[3] = {1, 3, 64}, pd[4] = {1, 1, 0, 32}, od[4] = {1, 1, 3, 32};
    eng_ow_input(w, "q", ENG_DT_FLOAT, 3, dims_of(3, qd));
    eng_ow_input(w, "k", ENG_DT_FLOAT, 3, dims_of(3, (int64_t[]){1, 3, 32}));
    eng_ow_input(w, "v", ENG_DT_FLOAT, 3, dims_of(3, (int64_t[]){1, 3, 32}));
    eng_ow_input(w, "past_k", ENG_DT_FLOAT, 4, dims_of(4, pd));
    eng_ow_input(w, "past_v", ENG_DT_FLOAT, 4, dims_of(4, pd));
    eng_ow_node(w, "Attention", "", "attn", ENG_OW_LIST("q", "k", "v", "", "past_k", "past_v"),
                ENG_OW_LIST("o", "present_k", "present_v"));
    eng_ow_attr_int(w, "q_num_heads", 2);
    eng_ow_attr_int(w, "kv_num_heads", 1);
    eng_ow_attr_int(w, "is_causal", 0);
    eng_ow_output(w, "o", ENG_DT_FLOAT, 3, dims_of(3, qd));
    eng_ow_output(w, "present_k", ENG_DT_FLOAT, 4, dims_of(4, od));
    eng_ow_output(w, "present_v", ENG_DT_FLOAT, 4, dims_of(4, od));
    save(w, dir);
    refused(dir, "attn", "is_causal must be 1");
}
END_TEST

int main(void)
{
    const char *bd = getenv("QD_BUILDDIR");
    if (!bd) {
        fprintf(stderr, "QD_BUILDDIR must be set (run through make check)\n");
        return 1;
    }
    krn_init();
    snprintf(root, sizeof root, "%s/tests/tmp/lower", bd);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    if (system(cmd) != 0)
        return 1;
    Suite *s = suite_create("lower");
    TCase *tc = tcase_create("lower");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dq_matmul_is_matmulnbits);
    tcase_add_test(tc, tied_embedding_is_one_weight);
    tcase_add_test(tc, near_misses_of_the_weight);
    tcase_add_test(tc, near_misses_of_the_tie);
    tcase_add_test(tc, near_misses_elsewhere);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
