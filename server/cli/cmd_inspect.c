/*
 * inspect: `qwen3d inspect --model DIR [--json]`. Loads the graph, derives its
 * geometry, names the graph contract the plan recognized, accounts weight
 * bytes by role and prints one line per node with the kernel that executes
 * it. Runs on the main thread only.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "engine/genai_config.h"
#include "engine/geometry.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/pool.h"
#include "kernels/krn.h"
#include "server/cli/cli.h"

#define CMD "inspect"

/* The plan being described; kernel names come from it, never guessed. */
static const eng_plan *the_plan;

static const char *node_kernel(const eng_graph *g, const eng_node *n)
{
    return eng_plan_kernel(the_plan, (size_t)(n - g->nodes));
}

typedef struct op_count {
    const char *domain;
    const char *op;
    size_t count;
} op_count;

static size_t count_ops(const eng_graph *g, op_count *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *nd = &g->nodes[i];
        size_t k = 0;
        while (k < n && (strcmp(out[k].domain, nd->domain) || strcmp(out[k].op, nd->op_type)))
            k++;
        if (k == n) {
            if (n == cap)
                continue;
            out[n++] = (op_count){nd->domain, nd->op_type, 0};
        }
        out[k].count++;
    }
    return n;
}

static const char *domain_name(const char *d) { return *d ? d : "ai.onnx"; }

static json_t *shape_json(const eng_value_info *vi)
{
    json_t *a = json_array();
    for (int i = 0; i < vi->rank; i++) {
        const eng_dim *d = &vi->dims[i];
        json_array_append_new(a, d->value >= 0 ? json_integer(d->value)
                                               : json_string(d->param ? d->param : "?"));
    }
    return a;
}

static void print_shape(const eng_value_info *vi)
{
    if (vi->rank < 0) {
        printf("(no shape)");
        return;
    }
    printf("[");
    for (int i = 0; i < vi->rank; i++) {
        const eng_dim *d = &vi->dims[i];
        if (d->value >= 0)
            printf("%s%lld", i ? ", " : "", (long long)d->value);
        else
            printf("%s%s", i ? ", " : "", d->param ? d->param : "?");
    }
    printf("]");
}

static json_t *io_json(const eng_value_info *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:o}", "name", v[i].name, "dtype",
                                           eng_dtype_name(v[i].dtype), "shape", shape_json(&v[i])));
    return a;
}

static json_t *strings_json(const char **s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(s[i]));
    return a;
}

static int print_json(const eng_graph *g, const eng_geometry *geo, const eng_genai_config *cfg,
                      const op_count *ops, size_t n_ops, const uint64_t *role_bytes, uint64_t total)
{
    json_t *root = json_object();
    json_object_set_new(root, "model", json_string(g->dir));
    json_object_set_new(root, "producer", json_string(g->producer));
    json_object_set_new(root, "ir_version", json_integer(g->ir_version));
    json_t *opsets = json_object();
    json_object_set_new(opsets, "ai.onnx", json_integer(g->opset_onnx));
    if (g->opset_ms)
        json_object_set_new(opsets, "com.microsoft", json_integer(g->opset_ms));
    json_object_set_new(root, "opsets", opsets);
    json_object_set_new(root, "contract", json_string(eng_plan_contract(the_plan)));
    json_object_set_new(root, "node_count", json_integer((json_int_t)g->n_nodes));
    json_object_set_new(root, "initializer_count", json_integer((json_int_t)g->n_inits));

    json_t *by_domain = json_object();
    for (size_t i = 0; i < n_ops; i++) {
        const char *d = domain_name(ops[i].domain);
        json_t *dom = json_object_get(by_domain, d);
        if (!dom) {
            dom = json_object();
            json_object_set_new(by_domain, d, dom);
        }
        json_object_set_new(dom, ops[i].op, json_integer((json_int_t)ops[i].count));
    }
    json_object_set_new(root, "ops", by_domain);
    json_object_set_new(root, "inputs", io_json(g->inputs, g->n_inputs));
    json_object_set_new(root, "outputs", io_json(g->outputs, g->n_outputs));

    json_object_set_new(root, "geometry",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                                  "layers", (json_int_t)geo->layers, "hidden", (json_int_t)geo->hidden,
                                  "heads", (json_int_t)geo->heads, "kv_heads", (json_int_t)geo->kv_heads,
                                  "head_size", (json_int_t)geo->head_size, "vocab", (json_int_t)geo->vocab,
                                  "intermediate", (json_int_t)geo->intermediate,
                                  "rotary_dim", (json_int_t)geo->rotary_dim,
                                  "max_positions", (json_int_t)geo->max_positions));
    json_t *w = json_object();
    for (int r = 0; r < ENG_ROLE_COUNT; r++)
        json_object_set_new(w, eng_weight_role_name((eng_weight_role)r), json_integer((json_int_t)role_bytes[r]));
    json_object_set_new(w, "serialized_total", json_integer((json_int_t)total));
    json_object_set_new(w, "prepared", json_integer((json_int_t)eng_plan_prepared_bytes(the_plan)));
    json_object_set_new(w, "in_place", json_integer((json_int_t)eng_plan_in_place_bytes(the_plan)));
    json_object_set_new(root, "weight_bytes", w);
    eng_prep_info pi;
    eng_plan_prepared_cache(the_plan, &pi);
    json_object_set_new(root, "prepared_cache", json_pack("{s:s, s:s, s:s}", "state", eng_prep_state_name(pi.state),
                                                          "path", pi.path, "note", pi.note));
    eng_placement pl;
    eng_pool_placement(&pl);
    json_object_set_new(root, "placement",
                        json_pack("{s:s, s:i, s:s, s:s}", "cpus", pl.cpus, "cores", pl.cores, "membind",
                                  pl.membind ? "bind" : "first_touch", "numa_nodes", pl.mem_nodes));
    json_object_set_new(root, "onnx_file_bytes", json_integer((json_int_t)g->onnx_file_bytes));
    json_object_set_new(root, "data_file_bytes", json_integer((json_int_t)g->data_file_bytes));

    if (cfg->present) {
        json_t *eos = json_array();
        for (int i = 0; i < cfg->n_eos; i++)
            json_array_append_new(eos, json_integer(cfg->eos_token_id[i]));
        json_object_set_new(root, "genai_config",
                            json_pack("{s:I, s:I, s:I, s:o, s:s}", "context_length",
                                      (json_int_t)cfg->context_length, "bos_token_id",
                                      (json_int_t)cfg->bos_token_id, "pad_token_id",
                                      (json_int_t)cfg->pad_token_id, "eos_token_id", eos, "type", cfg->type));
    }

    json_t *nodes = json_array();
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i];
        json_array_append_new(nodes, json_pack("{s:s, s:s, s:s, s:o, s:o, s:s}", "name", n->name, "domain",
                                               domain_name(n->domain), "op", n->op_type, "inputs",
                                               strings_json(n->inputs, n->n_inputs), "outputs",
                                               strings_json(n->outputs, n->n_outputs), "kernel",
                                               node_kernel(g, n)));
    }
    json_object_set_new(root, "nodes", nodes);
    int rc = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    putchar('\n');
    json_decref(root);
    return rc;
}

static void print_text(const eng_graph *g, const eng_geometry *geo, const eng_genai_config *cfg,
                       const op_count *ops, size_t n_ops, const uint64_t *role_bytes, uint64_t total)
{
    printf("model        %s\n", g->dir);
    printf("format       ir %lld, producer '%s', opsets ai.onnx %lld", (long long)g->ir_version, g->producer,
           (long long)g->opset_onnx);
    if (g->opset_ms)
        printf(", com.microsoft %lld", (long long)g->opset_ms);
    printf("\nsize         model.onnx %llu bytes, external data %llu bytes\n",
           (unsigned long long)g->onnx_file_bytes, (unsigned long long)g->data_file_bytes);
    printf("graph        %zu nodes, %zu initializers\n", g->n_nodes, g->n_inits);
    printf("contract     %s\n\nops\n", eng_plan_contract(the_plan));
    for (size_t i = 0; i < n_ops; i++)
        printf("  %-14s %-34s %5zu\n", domain_name(ops[i].domain), ops[i].op, ops[i].count);

    printf("\ninputs\n");
    for (size_t i = 0; i < g->n_inputs; i++) {
        printf("  %-32s %-6s ", g->inputs[i].name, eng_dtype_name(g->inputs[i].dtype));
        print_shape(&g->inputs[i]);
        printf("\n");
    }
    printf("outputs\n");
    for (size_t i = 0; i < g->n_outputs; i++) {
        printf("  %-32s %-6s ", g->outputs[i].name, eng_dtype_name(g->outputs[i].dtype));
        print_shape(&g->outputs[i]);
        printf("\n");
    }
    printf("\ngeometry     layers %lld, hidden %lld, heads %lld, kv heads %lld, head size %lld, "
           "vocab %lld, intermediate %lld, rotary dim %lld, positions %lld\n",
           (long long)geo->layers, (long long)geo->hidden, (long long)geo->heads, (long long)geo->kv_heads,
           (long long)geo->head_size, (long long)geo->vocab, (long long)geo->intermediate,
           (long long)geo->rotary_dim, (long long)geo->max_positions);
    if (cfg->present) {
        printf("config       context length %lld, bos %lld, pad %lld, eos", (long long)cfg->context_length,
               (long long)cfg->bos_token_id, (long long)cfg->pad_token_id);
        for (int i = 0; i < cfg->n_eos; i++)
            printf(" %lld", (long long)cfg->eos_token_id[i]);
        printf("\n");
    } else {
        printf("config       no genai_config.json\n");
    }
    printf("\nweights (serialized bytes)\n");
    for (int r = 0; r < ENG_ROLE_COUNT; r++)
        printf("  %-16s %14llu\n", eng_weight_role_name((eng_weight_role)r), (unsigned long long)role_bytes[r]);
    printf("  %-16s %14llu\n", "total", (unsigned long long)total);
    printf("  %-16s %14llu  (resident INT4 projections: repacked, or used in place)\n", "prepared",
           (unsigned long long)eng_plan_prepared_bytes(the_plan));
    printf("  %-16s %14llu  (read from the mapped model files at run time)\n", "in place",
           (unsigned long long)eng_plan_in_place_bytes(the_plan));
    eng_prep_info pi;
    eng_plan_prepared_cache(the_plan, &pi);
    printf("  %-16s %s%s%s%s%s\n", "prepared cache", eng_prep_state_name(pi.state), *pi.path ? " " : "", pi.path,
           *pi.note ? ": " : "", pi.note);
    char kd[KRN_DESCRIBE_LEN];
    krn_describe(kd, sizeof kd);
    char where[400];
    eng_pool_describe_placement(where, sizeof where);
    printf("\n%s\ncompute pool: %d threads by default, one pinned per physical core\nplacement: %s\n", kd,
           eng_pool_physical_cores(), where);

    printf("\nnodes (execution order)\n");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i];
        printf("  %4zu %-34s %-52s kernel %s\n", i, n->op_type, n->name, node_kernel(g, n));
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: qwen3d inspect --model DIR [--json] [--no-fusion] [--matmul-fp32] [--prepared-cache DIR|off] "
                    CLI_PLACEMENT_USAGE "\n");
    return 2;
}

int cmd_inspect(int argc, char **argv)
{
    const char *model = NULL;
    bool json = false;
    eng_plan_opts opts = {.describe_only = true};
    cli_placement place = CLI_PLACEMENT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_opt(CMD, argc, argv, &i, "model", &v)) != 0) {
            if (r < 0)
                return 2;
            model = v;
        } else if ((r = cli_placement_opt(CMD, argc, argv, &i, &place)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_opt(CMD, argc, argv, &i, "prepared-cache", &v)) != 0) {
            if (r < 0)
                return 2;
            opts.prepared_cache = v; /* the cache file a load with this option would read */
        } else if (cli_flag(argv, i, "json")) {
            json = true;
        } else if (cli_flag(argv, i, "no-fusion")) {
            opts.no_fusion = true; /* show the plan `--no-fusion` runs */
        } else if (cli_flag(argv, i, "matmul-fp32")) {
            opts.matmul_fp32 = true;
        } else if (cli_flag(argv, i, "help")) {
            usage();
            return 0;
        } else {
            return cli_fail(CMD, "unknown argument '%s'", argv[i]);
        }
    }
    if (!model)
        return cli_fail(CMD, "--model DIR is required");
    /* The binding a replica started with these options would have, and its default pool. */
    int prc = cli_place(CMD, &place);
    if (prc)
        return prc;

    eng_diag diag;
    eng_diag_init(&diag);
    eng_graph *g = NULL;
    eng_plan *plan = NULL;
    eng_genai_config cfg;
    eng_geometry geo;
    int rc = 1;
    if (eng_graph_load_model(model, &g, &cfg, &diag) != 0)
        goto out;
    eng_graph_geometry(g, &geo, &diag);
    if (eng_diag_failed(&diag))
        goto out;
    opts.prepared_cache = cli_prepared_cache(opts.prepared_cache);
    if (eng_plan_new(g, &opts, &plan, &diag) != 0)
        goto out;
    the_plan = plan;

    op_count ops[64];
    size_t n_ops = count_ops(g, ops, 64);
    uint64_t role_bytes[ENG_ROLE_COUNT] = {0}, total = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        role_bytes[eng_initializer_role(g, i)] += g->inits[i].nbytes;
        total += g->inits[i].nbytes;
    }
    if (json)
        rc = print_json(g, &geo, &cfg, ops, n_ops, role_bytes, total);
    else {
        print_text(g, &geo, &cfg, ops, n_ops, role_bytes, total);
        rc = 0;
    }
out:
    eng_diag_print(&diag, stderr, "qwen3d: " CMD);
    eng_diag_clear(&diag);
    eng_plan_free(plan);
    eng_graph_free(g);
    return rc;
}
