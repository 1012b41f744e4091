/*
 * genai_config: the fields of an ONNX Runtime GenAI genai_config.json that
 * qwen3d uses (context length, special token ids, tensor names, geometry,
 * the sampling defaults of the "search" section). Parsed once at load;
 * immutable afterwards.
 */
#ifndef QWEN3D_ENGINE_GENAI_CONFIG_H
#define QWEN3D_ENGINE_GENAI_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/model.h"
#include "engine/sampler.h"

#define ENG_MAX_EOS 8

/* The sampling fields of the "search" section; has_* tell which the file sets. */
typedef struct eng_genai_search {
    bool present;              /* the file has a "search" object */
    bool has_do_sample, has_temperature, has_top_k, has_top_p, has_repetition_penalty;
    bool do_sample;
    double temperature, top_p, repetition_penalty;
    int64_t top_k;
} eng_genai_search;

typedef struct eng_genai_config {
    bool present;              /* false when the folder has no genai_config.json */
    int64_t context_length;    /* 0 when absent */
    int64_t bos_token_id;      /* -1 when absent */
    int64_t pad_token_id;      /* -1 when absent */
    int n_eos;
    int64_t eos_token_id[ENG_MAX_EOS];
    int64_t vocab_size;        /* 0 when absent */
    int64_t head_size, hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers;
    char type[32];             /* "qwen3" */
    char filename[256];        /* decoder.filename, default "model.onnx" */
    char input_ids[128], attention_mask[128], past_key_names[128], past_value_names[128];
    char logits[128], present_key_names[128], present_value_names[128];
    eng_genai_search search;
} eng_genai_config;

/*
 * Reads DIR/genai_config.json. A missing file is not an error (present=false,
 * defaults filled); a malformed one adds problems to diag and returns -1.
 */
int eng_genai_config_load(const char *dir, eng_genai_config *cfg, eng_diag *diag);

/*
 * The model at PATH, as ONNX Runtime GenAI finds it: PATH is the model
 * folder, whose graph is the file its genai_config.json names in
 * decoder.filename (model.onnx without one), or the graph file itself (the
 * config then comes from its folder). Loads both; -1 with problems in diag
 * and *g NULL.
 */
int eng_graph_load_model(const char *path, eng_graph **g, eng_genai_config *cfg, eng_diag *diag);

/*
 * The model's own sampling defaults into *out: eng_sampling_default() with
 * the values the search section sets on top (temperature, top_k, top_p,
 * repetition_penalty); "do_sample": false, as in ONNX Runtime GenAI, means
 * greedy (temperature 0). Without a search section *out is
 * eng_sampling_default(). Returns 0, or -1 with ERR naming the field when a
 * value is outside the sampler's ranges.
 */
int eng_genai_config_sampling(const eng_genai_config *cfg, eng_sampling *out, char *err, size_t errlen);

#endif
