/*
 * cmd_synth: `qwen3d synth`, writes a synthetic model folder (engine/writer/synth.h).
 * Runs on the main thread of a short-lived process.
 */
#include "server/cli/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/writer/synth.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qwen3d synth --preset tiny|0.6b|4b --out DIR [--contract C] [--decomposed]\n"
            "                    [--carrier bf16|fp32|bf16-round] [--embedding f32|int4] [--seed N]\n"
            "                    [--layers N] [--weights bf16|f32] [--tokenizer DIR]\n"
            "\n"
            "Writes a Qwen3 model folder with deterministic random weights: model.onnx,\n"
            "model.onnx.data, genai_config.json and, with --tokenizer, tokenizer.json and\n"
            "tokenizer_config.json copied from DIR or DIR/models. Every contract holds the same\n"
            "weights (the same INT4 codes and scales in both INT4 forms).\n"
            "  --preset P      geometry: tiny (2 layers, hidden 256), 0.6b (28/1024), 4b (36/2560)\n"
            "  --out DIR       output folder, created with its parents if needed\n"
            "  --contract C    ort-int4 (default): the ONNX Runtime GenAI INT4 CPU form (MatMulNBits,\n"
            "                  GroupQueryAttention); int4-qdq: standard ONNX, UINT4 weights through\n"
            "                  DequantizeLinear, the embedding tied to the LM head, BF16 activations;\n"
            "                  float: BF16 weights and activations; float32: its FP32 twin\n"
            "  --decomposed    int4-qdq, float, float32: primitive ops (ReduceMean/Pow/Sqrt/Div, Slice/\n"
            "                  Neg/Concat/Mul/Add, MatMul/Softmax) instead of the opset 23 RMSNormalization,\n"
            "                  RotaryEmbedding and Attention\n"
            "  --carrier K     int4-qdq, float: bf16 (default), the contract itself; fp32, its BF16 values\n"
            "                  carried as FP32 (ONNX Runtime's reference); bf16-round, that with every\n"
            "                  node's output rounded to BF16 and back (the bound for the BF16 graph)\n"
            "  --embedding E   ort-int4: f32 (default), the embedding's own values; int4, the values of\n"
            "                  the INT4 tied weight the standard contracts look up (to compare the forms)\n"
            "  --seed N        weight seed, 0 .. 2^63-1 (default 1)\n"
            "  --layers N      override the preset's layer count, 1 .. 4096\n"
            "  --weights W     bf16 (default): weights are bfloat16 values, as in Qwen3's checkpoints,\n"
            "                  so every scale is too; f32: full fp32 values (scales that fit no 16-bit\n"
            "                  form; ort-int4 and float32 only)\n"
            "  --tokenizer DIR folder holding the Qwen3 tokenizer files\n");
}

int cmd_synth(int argc, char **argv)
{
    const char *preset = NULL, *out = NULL, *seed_s = NULL, *layers_s = NULL, *tokenizer = NULL, *weights = NULL;
    const char *contract = NULL, *carrier = NULL, *embedding = NULL;
    bool decomposed = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (cli_flag(argv, i, "help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = cli_opt("synth", argc, argv, &i, "preset", &v)) != 0) {
            if (r < 0)
                return 2;
            preset = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "out", &v)) != 0) {
            if (r < 0)
                return 2;
            out = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "seed", &v)) != 0) {
            if (r < 0)
                return 2;
            seed_s = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "layers", &v)) != 0) {
            if (r < 0)
                return 2;
            layers_s = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "weights", &v)) != 0) {
            if (r < 0)
                return 2;
            weights = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "contract", &v)) != 0) {
            if (r < 0)
                return 2;
            contract = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "carrier", &v)) != 0) {
            if (r < 0)
                return 2;
            carrier = v;
        } else if ((r = cli_opt("synth", argc, argv, &i, "embedding", &v)) != 0) {
            if (r < 0)
                return 2;
            embedding = v;
        } else if (cli_flag(argv, i, "decomposed")) {
            decomposed = true;
        } else if ((r = cli_opt("synth", argc, argv, &i, "tokenizer", &v)) != 0) {
            if (r < 0)
                return 2;
            tokenizer = v;
        } else if (argv[i][0] == '-') {
            return cli_fail("synth", "unknown option '%s' (try qwen3d synth --help)", argv[i]);
        } else {
            return cli_fail("synth", "unexpected argument '%s' (try qwen3d synth --help)", argv[i]);
        }
    }
    if (!preset)
        return cli_fail("synth", "--preset is required (tiny, 0.6b or 4b)");
    if (!out)
        return cli_fail("synth", "--out is required");
    if (!*out)
        return cli_fail("synth", "--out: empty folder name");
    eng_synth_geom g;
    if (eng_synth_preset(preset, &g))
        return cli_fail("synth", "--preset: unknown preset '%s' (tiny, 0.6b or 4b)", preset);
    int64_t seed = 1, layers = g.layers;
    if (seed_s && !cli_parse_i64(seed_s, 0, INT64_MAX, &seed))
        return cli_fail("synth", "--seed: '%s' is not an integer in [0, %" PRId64 "]", seed_s, INT64_MAX);
    if (layers_s && !cli_parse_i64(layers_s, 1, 4096, &layers))
        return cli_fail("synth", "--layers: '%s' is not an integer in [1, 4096]", layers_s);
    g.layers = layers;
    if (weights && strcmp(weights, "bf16") && strcmp(weights, "f32"))
        return cli_fail("synth", "--weights: '%s' is not bf16 or f32", weights);
    g.f32_weights = weights && !strcmp(weights, "f32");
    if (contract && eng_synth_contract_parse(contract, &g.contract))
        return cli_fail("synth", "--contract: '%s' is not ort-int4, int4-qdq, float or float32", contract);
    if (carrier && eng_synth_carrier_parse(carrier, &g.carrier))
        return cli_fail("synth", "--carrier: '%s' is not bf16, fp32 or bf16-round", carrier);
    if (embedding && strcmp(embedding, "f32") && strcmp(embedding, "int4"))
        return cli_fail("synth", "--embedding: '%s' is not f32 or int4", embedding);
    g.embed_int4 = embedding && !strcmp(embedding, "int4");
    g.decomposed = decomposed;
    if (g.decomposed && g.contract == ENG_SYNTH_ORT_INT4)
        return cli_fail("synth", "--decomposed: the ort-int4 contract has no decomposed form");
    if (g.carrier && g.contract != ENG_SYNTH_INT4_QDQ && g.contract != ENG_SYNTH_FLOAT)
        return cli_fail("synth", "--carrier: only int4-qdq and float have FP32 carrier variants");
    if (g.embed_int4 && g.contract != ENG_SYNTH_ORT_INT4)
        return cli_fail("synth", "--embedding: only the ort-int4 contract has a separate FP32 embedding");
    if (g.f32_weights && g.contract != ENG_SYNTH_ORT_INT4 && g.contract != ENG_SYNTH_FLOAT32)
        return cli_fail("synth", "--weights f32: the %s contract holds BF16 values", eng_synth_contract_name(g.contract));
    if (tokenizer && !*tokenizer)
        return cli_fail("synth", "--tokenizer: empty folder name");

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    eng_synth_result res;
    char err[1024], what[320];
    cli_progress progress;
    cli_progress_init(&progress, false);
    snprintf(what, sizeof what, "writing %s/model.onnx.data", out);
    progress.what = what;
    eng_synth_progress report = {cli_progress_cb, &progress};
    int failed = eng_synth_write_progress(out, &g, (uint64_t)seed, tokenizer, progress.on ? &report : NULL, &res, err,
                                          sizeof err);
    cli_progress_clear(&progress);
    if (failed) {
        fprintf(stderr, "qwen3d: synth: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s: preset %s, contract %s%s%s%s, %" PRId64 " layers, seed %" PRId64 ", %s weights, %zu nodes, "
           "%zu initializers, %" PRIu64 " bytes (model.onnx %" PRIu64 ", model.onnx.data %" PRIu64 "), %.2f s\n",
           out, g.preset, eng_synth_contract_name(g.contract), g.decomposed ? " (decomposed)" : "",
           g.carrier ? ", carrier " : "", g.carrier ? eng_synth_carrier_name(g.carrier) : "", g.layers, seed,
           g.f32_weights ? "f32" : "bf16", res.n_nodes, res.n_initializers,
           res.onnx_bytes + res.data_bytes,
           res.onnx_bytes, res.data_bytes, secs);
    return 0;
}
