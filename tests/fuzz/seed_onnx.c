/*
 * seed_onnx: writes the seed inputs of tests/fuzz/fuzz_onnx (header, then
 * model.onnx, then model.onnx.data) from small models of every graph
 * contract (the ORT GenAI form, int4-qdq, float, float32; opset 23 ops and
 * decomposed), made by the same writer as `qwen3d synth` at a few miniature
 * geometries, each with the three plan options fuzz_onnx reads from the
 * header. Generated at fuzz or test time so that no binary model has to be
 * checked in.
 *
 * Usage:
 *   seed_onnx OUTDIR            the seeds (OUTDIR must exist; a scratch
 *                               folder is made in it and removed again)
 *   seed_onnx --folder NAME DIR the model folder of geometry NAME (one of
 *                               the seeds' names, e.g. l1-d32) written to DIR,
 *                               for tests/fuzz/seed_forms.sh to rewrite
 *   seed_onnx --pack NAME MODELDIR OUTDIR
 *                               the three seeds synth-NAME-{fused,unfused,fp32}
 *                               of the model folder MODELDIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/writer/synth.h"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) &&
        fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        *len = (size_t)st.st_size;
    fclose(f);
    return buf;
}

static int write_seed(const char *path, uint32_t head, const uint8_t *onnx, size_t onnx_len, const uint8_t *data,
                      size_t data_len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint8_t h[4] = {(uint8_t)head, (uint8_t)(head >> 8), (uint8_t)(head >> 16), (uint8_t)(head >> 24)};
    int ok = fwrite(h, 1, 4, f) == 4 && fwrite(onnx, 1, onnx_len, f) == onnx_len &&
             fwrite(data, 1, data_len, f) == data_len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Every graph contract: the ORT GenAI form and the standard ones (opset 23 ops, decomposed). */
#define MINI1 "mini", 1, 32, 32, 2, 1, 16, 32, 16
#define MINI2 "mini", 2, 64, 96, 4, 2, 16, 48, 32
static const struct {
    const char *name;
    eng_synth_geom g;
} geoms[] = {
    {"l1-d32", {MINI1, .f32_weights = false}},
    {"l2-d64", {MINI2, .f32_weights = true}},
    {"l1-d32-qdq", {MINI1, .contract = ENG_SYNTH_INT4_QDQ}},
    {"l2-d64-qdq-dec", {MINI2, .contract = ENG_SYNTH_INT4_QDQ, .decomposed = true}},
    {"l1-d32-float", {MINI1, .contract = ENG_SYNTH_FLOAT}},
    {"l2-d64-f32-dec", {MINI2, .contract = ENG_SYNTH_FLOAT32, .decomposed = true}},
};
#undef MINI1
#undef MINI2

/* The three seeds of the model folder DIR: synth-NAME-{fused,unfused,fp32} in OUTDIR. */
static int pack_folder(const char *dir, const char *name, const char *outdir)
{
    static const struct {
        const char *name;
        uint32_t bits;
    } variants[] = {{"fused", 0}, {"unfused", 1u << 30}, {"fp32", 1u << 31}};
    char path[4200], data_path[4200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    snprintf(data_path, sizeof data_path, "%s/model.onnx.data", dir);
    size_t onnx_len = 0, data_len = 0;
    uint8_t *onnx = slurp(path, &onnx_len), *data = slurp(data_path, &data_len);
    int rc = 0;
    if (!onnx || !data || onnx_len >= (1u << 30)) {
        fprintf(stderr, "seed_onnx: cannot read a model of under 1 GiB from '%s'\n", dir);
        rc = 1;
    }
    for (size_t v = 0; v < sizeof variants / sizeof variants[0] && !rc; v++) {
        char out[4400];
        snprintf(out, sizeof out, "%s/synth-%s-%s", outdir, name, variants[v].name);
        if (write_seed(out, variants[v].bits | (uint32_t)onnx_len, onnx, onnx_len, data, data_len) != 0) {
            fprintf(stderr, "seed_onnx: cannot write '%s'\n", out);
            rc = 1;
        }
    }
    free(onnx);
    free(data);
    return rc;
}

static int write_folder(size_t i, const char *dir)
{
    char err[512];
    eng_synth_result res;
    if (eng_synth_write(dir, &geoms[i].g, 1 + i, NULL, &res, err, sizeof err) != 0) {
        fprintf(stderr, "seed_onnx: %s\n", err);
        return 1;
    }
    return 0;
}

static void remove_folder(const char *dir)
{
    static const char *const files[] = {"model.onnx", "model.onnx.data", "genai_config.json"};
    char path[4200];
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        unlink(path);
    }
    rmdir(dir);
}

static int usage(void)
{
    fprintf(stderr, "usage: seed_onnx OUTDIR | --folder NAME DIR | --pack NAME MODELDIR OUTDIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    const size_t n_geoms = sizeof geoms / sizeof geoms[0];
    if (argc == 4 && strcmp(argv[1], "--folder") == 0) {
        for (size_t i = 0; i < n_geoms; i++)
            if (strcmp(geoms[i].name, argv[2]) == 0)
                return write_folder(i, argv[3]);
        fprintf(stderr, "seed_onnx: no geometry named '%s'\n", argv[2]);
        return 2;
    }
    if (argc == 5 && strcmp(argv[1], "--pack") == 0)
        return pack_folder(argv[3], argv[2], argv[4]);
    if (argc != 2 || argv[1][0] == '-')
        return usage();
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s/.seed-onnx-scratch", argv[1]);
    int rc = 0;
    for (size_t i = 0; i < n_geoms && !rc; i++) {
        rc = write_folder(i, scratch);
        if (!rc)
            rc = pack_folder(scratch, geoms[i].name, argv[1]);
        remove_folder(scratch);
    }
    return rc;
}
