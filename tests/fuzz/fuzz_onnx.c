/*
 * fuzz_onnx: the ONNX loader, eng_graph_load(), on a model folder holding
 * the input's model.onnx and model.onnx.data; when the graph loads, the
 * execution plan is built from it (eng_plan_new) and freed again.
 *
 * Input: a little-endian 32-bit header, then the bytes of model.onnx, then
 * those of model.onnx.data. The header's low 30 bits are the length of
 * model.onnx (a length past the end means all the rest); bit 30 builds the
 * plan without fusions, bit 31 with fp32 MatMulNBits. tests/fuzz/seed_onnx
 * writes seeds in this form from small models of the real graph form.
 *
 * When the plan builds, it is run once on one token: every graph input
 * bound to zeros (ones for attention_mask), its symbolic dimensions 1, or 0
 * for the past ones (names holding "past"), as the first step of a
 * generation would; inputs with no shape or over 2^20 elements skip the run.
 *
 * Checked: a load either succeeds or fails with at least one problem
 * reported and nothing else (no crash, leak, hang or undefined behaviour);
 * a loaded graph is topologically sorted and every node input that names a
 * value resolves to it; a plan names a kernel for every node; a run either
 * succeeds or fails with a problem reported. With QD_FUZZ_REPORT set, the
 * problems are printed, and "the plan ran" after a run that succeeded.
 *
 * The folder is made once per process under $TMPDIR (or /tmp) and removed
 * at exit. The kernel level is chosen as the server chooses it (krn_init).
 * Everything runs on the calling thread (the run has no compute pool, the
 * plan packs its weights with one thread), so a seeded run is repeatable.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/plan.h"
#include "kernels/krn.h"
#include "tests/fuzz/fuzz.h"

static char dir[512];

static void remove_dir(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.onnx.data", dir);
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/qwen3d-fuzz-onnx.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_onnx: mkdtemp");
        exit(1);
    }
    atexit(remove_dir);
    /* The plan binds the kernels of the level the server would use. */
    krn_init();
    return 0;
}

static void write_file(const char *name, const uint8_t *data, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("fuzz_onnx: open");
        exit(1);
    }
    while (n) {
        ssize_t w = write(fd, data, n);
        if (w <= 0) {
            perror("fuzz_onnx: write");
            exit(1);
        }
        data += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void check_graph(const eng_graph *g)
{
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i];
        FUZZ_CHECK(n->name && n->op_type && n->domain);
        for (size_t j = 0; j < n->n_inputs; j++) {
            int v = n->input_values[j];
            if (!*n->inputs[j]) {
                FUZZ_CHECK(v == -1);
                continue;
            }
            FUZZ_CHECK(v >= 0 && (size_t)v < g->n_values && !strcmp(g->values[v].name, n->inputs[j]));
            /* Topological order: a value a node reads comes from an earlier node. */
            if (g->values[v].kind == ENG_VALUE_NODE_OUTPUT)
                FUZZ_CHECK(g->values[v].index < i);
        }
    }
    for (size_t i = 0; i < g->n_inits; i++) {
        const eng_tensor *t = &g->inits[i];
        FUZZ_CHECK(t->nbytes == 0 || t->data);
        FUZZ_CHECK(t->nbytes == eng_dtype_bytes(t->dtype, t->n_elems));
    }
}

#define MAX_RUN_ELEMS (1u << 20)

/* Binds every graph input (see the top of the file) and runs the plan once: true when the run succeeded. */
static bool run_once(const eng_graph *g, const eng_plan *p, eng_diag *diag)
{
    bool ran = false;
    eng_exec *x = eng_exec_new(p, NULL);
    void **bufs = calloc(g->n_inputs + 1, sizeof *bufs);
    if (!x || !bufs)
        goto out;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const eng_value_info *vi = &g->inputs[i];
        size_t esize = eng_dtype_size(vi->dtype);
        if (vi->rank < 0 || !esize)
            goto out;
        int64_t dims[ENG_MAX_RANK];
        uint64_t n = 1;
        for (int d = 0; d < vi->rank; d++) {
            int64_t v = vi->dims[d].value;
            if (v < 0)
                v = vi->dims[d].param && strstr(vi->dims[d].param, "past") ? 0 : 1;
            dims[d] = v;
            if (v > (int64_t)MAX_RUN_ELEMS || (n *= (uint64_t)v) > MAX_RUN_ELEMS)
                goto out;
        }
        bufs[i] = calloc(n ? n : 1, esize);
        if (!bufs[i])
            goto out;
        if (strstr(vi->name, "attention_mask"))
            for (uint64_t k = 0; k < n; k++) {
                if (vi->dtype == ENG_DT_INT64)
                    ((int64_t *)bufs[i])[k] = 1;
                else if (vi->dtype == ENG_DT_INT32)
                    ((int32_t *)bufs[i])[k] = 1;
            }
        if (eng_exec_set_input(x, vi->name, vi->dtype, vi->rank, dims, bufs[i], diag) != 0) {
            FUZZ_CHECK(diag->n_total > 0);
            goto out;
        }
    }
    size_t before = diag->n_total;
    if (eng_exec_run(x, diag) != 0)
        FUZZ_CHECK(diag->n_total > before);
    else
        ran = true;
out:
    for (size_t i = 0; bufs && i < g->n_inputs; i++)
        free(bufs[i]);
    free(bufs);
    eng_exec_free(x);
    return ran;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t head = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    size_t onnx_len = head & 0x3fffffffu;
    data += 4;
    size -= 4;
    if (onnx_len > size)
        onnx_len = size;
    write_file("model.onnx", data, onnx_len);
    write_file("model.onnx.data", data + onnx_len, size - onnx_len);

    eng_diag diag;
    eng_diag_init(&diag);
    eng_graph *g = NULL;
    int rc = eng_graph_load(dir, &g, &diag);
    if (rc != 0) {
        FUZZ_CHECK(!g && diag.n_total > 0);
        goto out;
    }
    FUZZ_CHECK(g && diag.n_total == 0);
    check_graph(g);
    /* One packing thread: coverage counters bumped from two threads at once
     * can lose counts, and a fixed-seed run must see the same coverage. */
    eng_plan_opts opts = {.no_fusion = (head >> 30) & 1, .matmul_fp32 = (head >> 31) & 1, .pack_threads = 1};
    eng_plan *p = NULL;
    bool ran = false;
    rc = eng_plan_new(g, &opts, &p, &diag);
    if (rc == 0) {
        FUZZ_CHECK(p && eng_plan_graph(p) == g);
        for (size_t i = 0; i < g->n_nodes; i++) {
            const char *k = eng_plan_kernel(p, i);
            FUZZ_CHECK(k && *k);
        }
        ran = run_once(g, p, &diag);
    } else {
        FUZZ_CHECK(!p && diag.n_total > 0);
    }
    eng_plan_free(p);
    eng_graph_free(g);
    if (ran && fuzz_report())
        fprintf(stderr, "fuzz_onnx: the plan ran\n");
out:
    if (fuzz_report())
        eng_diag_print(&diag, stderr, "fuzz_onnx");
    eng_diag_clear(&diag);
    return 0;
}
