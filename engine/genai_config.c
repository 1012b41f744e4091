/*
 * genai_config: reads genai_config.json with jansson (see genai_config.h).
 * Called once per model load on the loading thread.
 */
#include "engine/genai_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void copy_str(char *dst, size_t cap, json_t *obj, const char *key, const char *fallback)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    const char *s = json_is_string(v) ? json_string_value(v) : fallback;
    snprintf(dst, cap, "%s", s);
}

static int64_t get_int(json_t *obj, const char *key, int64_t fallback, const char *path, eng_diag *diag)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v)
        return fallback;
    if (!json_is_integer(v)) {
        eng_diag_add(diag, "%s: '%s' must be an integer", path, key);
        return fallback;
    }
    return json_integer_value(v);
}

/* An optional number: *has tells whether KEY was there. */
static double get_number(json_t *obj, const char *key, bool *has, const char *path, eng_diag *diag)
{
    json_t *v = json_object_get(obj, key);
    *has = false;
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        eng_diag_add(diag, "%s: 'search.%s' must be a number", path, key);
        return 0;
    }
    *has = true;
    return json_number_value(v);
}

static void read_search(json_t *search, eng_genai_search *s, const char *path, eng_diag *diag)
{
    if (!search)
        return;
    if (!json_is_object(search)) {
        eng_diag_add(diag, "%s: 'search' must be an object", path);
        return;
    }
    s->present = true;
    json_t *ds = json_object_get(search, "do_sample");
    if (ds && !json_is_boolean(ds))
        eng_diag_add(diag, "%s: 'search.do_sample' must be a boolean", path);
    s->has_do_sample = json_is_boolean(ds);
    s->do_sample = json_is_true(ds);
    s->temperature = get_number(search, "temperature", &s->has_temperature, path, diag);
    s->top_p = get_number(search, "top_p", &s->has_top_p, path, diag);
    s->repetition_penalty = get_number(search, "repetition_penalty", &s->has_repetition_penalty, path, diag);
    json_t *k = json_object_get(search, "top_k");
    if (k && !json_is_integer(k))
        eng_diag_add(diag, "%s: 'search.top_k' must be an integer", path);
    s->has_top_k = json_is_integer(k);
    s->top_k = json_integer_value(k);
}

static void set_defaults(eng_genai_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->bos_token_id = -1;
    cfg->pad_token_id = -1;
    snprintf(cfg->filename, sizeof cfg->filename, "model.onnx");
    snprintf(cfg->input_ids, sizeof cfg->input_ids, "input_ids");
    snprintf(cfg->attention_mask, sizeof cfg->attention_mask, "attention_mask");
    snprintf(cfg->past_key_names, sizeof cfg->past_key_names, "past_key_values.%%d.key");
    snprintf(cfg->past_value_names, sizeof cfg->past_value_names, "past_key_values.%%d.value");
    snprintf(cfg->logits, sizeof cfg->logits, "logits");
    snprintf(cfg->present_key_names, sizeof cfg->present_key_names, "present.%%d.key");
    snprintf(cfg->present_value_names, sizeof cfg->present_value_names, "present.%%d.value");
}

int eng_genai_config_load(const char *dir, eng_genai_config *cfg, eng_diag *diag)
{
    set_defaults(cfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        eng_diag_add(diag, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root) {
        eng_diag_add(diag, "%s: line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    size_t before = diag->n_total;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        eng_diag_add(diag, "%s: missing object 'model'", path);
        json_decref(root);
        return -1;
    }
    cfg->present = true;
    cfg->context_length = get_int(model, "context_length", 0, path, diag);
    cfg->bos_token_id = get_int(model, "bos_token_id", -1, path, diag);
    cfg->pad_token_id = get_int(model, "pad_token_id", -1, path, diag);
    cfg->vocab_size = get_int(model, "vocab_size", 0, path, diag);
    copy_str(cfg->type, sizeof cfg->type, model, "type", "");

    json_t *eos = json_object_get(model, "eos_token_id");
    if (json_is_integer(eos)) {
        cfg->eos_token_id[cfg->n_eos++] = json_integer_value(eos);
    } else if (json_is_array(eos)) {
        size_t i;
        json_t *e;
        json_array_foreach(eos, i, e) {
            if (!json_is_integer(e)) {
                eng_diag_add(diag, "%s: eos_token_id[%zu] must be an integer", path, i);
                continue;
            }
            if (cfg->n_eos < ENG_MAX_EOS)
                cfg->eos_token_id[cfg->n_eos++] = json_integer_value(e);
        }
    } else if (eos) {
        eng_diag_add(diag, "%s: eos_token_id must be an integer or an array", path);
    }

    json_t *dec = json_object_get(model, "decoder");
    if (dec && !json_is_object(dec))
        eng_diag_add(diag, "%s: 'model.decoder' must be an object", path);
    if (json_is_object(dec)) {
        cfg->head_size = get_int(dec, "head_size", 0, path, diag);
        cfg->hidden_size = get_int(dec, "hidden_size", 0, path, diag);
        cfg->num_attention_heads = get_int(dec, "num_attention_heads", 0, path, diag);
        cfg->num_key_value_heads = get_int(dec, "num_key_value_heads", 0, path, diag);
        cfg->num_hidden_layers = get_int(dec, "num_hidden_layers", 0, path, diag);
        copy_str(cfg->filename, sizeof cfg->filename, dec, "filename", "model.onnx");
        json_t *in = json_object_get(dec, "inputs");
        json_t *out = json_object_get(dec, "outputs");
        copy_str(cfg->input_ids, sizeof cfg->input_ids, in, "input_ids", "input_ids");
        copy_str(cfg->attention_mask, sizeof cfg->attention_mask, in, "attention_mask", "attention_mask");
        copy_str(cfg->past_key_names, sizeof cfg->past_key_names, in, "past_key_names", "past_key_values.%d.key");
        copy_str(cfg->past_value_names, sizeof cfg->past_value_names, in, "past_value_names", "past_key_values.%d.value");
        copy_str(cfg->logits, sizeof cfg->logits, out, "logits", "logits");
        copy_str(cfg->present_key_names, sizeof cfg->present_key_names, out, "present_key_names", "present.%d.key");
        copy_str(cfg->present_value_names, sizeof cfg->present_value_names, out, "present_value_names", "present.%d.value");
    }
    read_search(json_object_get(root, "search"), &cfg->search, path, diag);
    /* Tokens are counted in INT32 by the graph (total_sequence_length). */
    if (cfg->context_length < 0 || cfg->context_length > INT32_MAX)
        eng_diag_add(diag, "%s: model.context_length %lld is outside 0..%d", path, (long long)cfg->context_length,
                     INT32_MAX);
    /* The filename must stay inside the model folder. */
    if (cfg->filename[0] == '/' || strstr(cfg->filename, ".."))
        eng_diag_add(diag, "%s: decoder.filename '%s' must be a plain name inside the model folder", path, cfg->filename);
    json_decref(root);
    return diag->n_total > before ? -1 : 0;
}

int eng_graph_load_model(const char *path, eng_graph **g, eng_genai_config *cfg, eng_diag *diag)
{
    *g = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (eng_graph_load(path, g, diag) != 0)
            return -1;
        if (eng_genai_config_load((*g)->dir, cfg, diag) != 0) {
            eng_graph_free(*g);
            *g = NULL;
            return -1;
        }
        return 0;
    }
    if (eng_genai_config_load(path, cfg, diag) != 0)
        return -1;
    if (!strcmp(cfg->filename, "model.onnx"))
        return eng_graph_load(path, g, diag);
    char file[4096];
    int n = snprintf(file, sizeof file, "%s/%s", path, cfg->filename);
    if (n < 0 || (size_t)n >= sizeof file) {
        eng_diag_add(diag, "%s: the path of decoder.filename '%s' is too long", path, cfg->filename);
        return -1;
    }
    int e = stat(file, &st) != 0 ? errno : 0;
    if (e || !S_ISREG(st.st_mode)) {
        eng_diag_add(diag, "%s: genai_config.json names the graph '%s' (decoder.filename): %s", path, cfg->filename,
                     e ? strerror(e) : "not a regular file");
        return -1;
    }
    return eng_graph_load(file, g, diag);
}

int eng_genai_config_sampling(const eng_genai_config *cfg, eng_sampling *out, char *err, size_t errlen)
{
    eng_sampling_default(out);
    const eng_genai_search *s = &cfg->search;
    if (!s->present)
        return 0;
    if (s->has_top_k && (s->top_k < 0 || s->top_k > INT32_MAX)) {
        snprintf(err, errlen, "genai_config.json: search.top_k %lld is outside [0, %d]", (long long)s->top_k,
                 INT32_MAX);
        return -1;
    }
    if (s->has_temperature)
        out->temperature = (float)s->temperature;
    if (s->has_top_p)
        out->top_p = (float)s->top_p;
    if (s->has_top_k)
        out->top_k = (int32_t)s->top_k;
    if (s->has_repetition_penalty)
        out->repetition_penalty = (float)s->repetition_penalty;
    if (s->has_do_sample && !s->do_sample)
        out->temperature = 0.0f;
    eng_sampling_error se;
    if (eng_sampling_validate(out, &se) != 0) {
        snprintf(err, errlen, "genai_config.json: search.%s", se.message);
        return -1;
    }
    return 0;
}
