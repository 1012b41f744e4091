/*
 * krn: CPU probe (with the QWEN3D_CPU_HIDE test hook), level choice, the
 * dispatch tables, and the plan-time argument checks and scratch sizes of the
 * kernel layer.
 *
 * The active table is the only global mutable state of the kernels. It starts
 * as the ref level (so a forgotten krn_init() is slow, never wrong) and is
 * written only by krn_init(), which the main thread calls once before the
 * compute workers start; afterwards it is read-only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KRN_X86 1
#else
#define KRN_X86 0
#endif

#include "kernels/krn_internal.h"

const char *krn_strerror(int err)
{
    switch (err) {
#define KRN_ERR_CASE(name, value, msg) case value: return msg;
        KRN_ERRORS(KRN_ERR_CASE)
#undef KRN_ERR_CASE
    }
    return "unknown kernel error";
}

/* ------------------------------------------------------------------------- */
/* CPU features                                                               */

/*
 * The features krn_describe() prints and QWEN3D_CPU_HIDE may name, by their
 * /proc/cpuinfo-like names.
 */
#define KRN_FEATURES(X)                                                        \
    X(avx2) X(fma) X(f16c) X(avx512f) X(avx512bw) X(avx512vl) X(avx512vnni)    \
    X(avxvnni)

/*
 * QWEN3D_CPU_HIDE (a test hook, like QWEN3D_KERNELS): a comma-separated list
 * of features the probe reports absent, so one machine runs the tables and the
 * level choice of a smaller CPU (an AVX-512 CPU without VNNI, an AVX2-only
 * one). It can only take features away, never claim one the CPU lacks.
 * Returns false, with the first unknown name in bad, when a name is unknown
 * (the known ones are still hidden).
 */
static bool apply_hide(krn_cpu_features *f, char *bad, size_t bad_len)
{
    const char *spec = getenv("QWEN3D_CPU_HIDE");
    bool ok = true;
    if (bad_len)
        bad[0] = '\0';
    while (spec && *spec) {
        size_t len = strcspn(spec, ", ");
        bool known = len == 0;
#define KRN_HIDE(feat)                                                         \
        if (len == sizeof #feat - 1 && strncmp(spec, #feat, len) == 0)         \
            f->feat = false, known = true;
        KRN_FEATURES(KRN_HIDE)
#undef KRN_HIDE
        if (!known && ok) {
            ok = false;
            snprintf(bad, bad_len, "%.*s", (int)(len < 20 ? len : 20), spec);
        }
        spec += len + (spec[len] != '\0');
    }
    f->avx512vnni = f->avx512vnni && f->avx512f; /* EVEX VNNI needs the AVX-512 foundation */
    return ok;
}

#if KRN_X86
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

krn_cpu_features krn_cpu_detect(void)
{
    krn_cpu_features f;
    memset(&f, 0, sizeof f);
#if KRN_X86
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 1)
        return f;
    __cpuid(1, a, b, c, d);
    bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    bool fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return f;
    /* The OS must save XMM and YMM state (XCR0 bits 1, 2) for any VEX code. */
    uint64_t xcr0 = read_xcr0();
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    /* ...and opmask plus both ZMM halves (bits 5, 6, 7) for EVEX code. */
    bool zmm_os = ymm_os && (xcr0 & 0xE0) == 0xE0;
    if (!ymm_os || max_leaf < 7)
        return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.fma = fma;
    f.f16c = f16c;
    if (zmm_os) {
        f.avx512f = b & (1u << 16);
        f.avx512bw = b & (1u << 30);
        f.avx512vl = b & (1u << 31);
        f.avx512vnni = f.avx512f && (c & (1u << 11));
    }
    unsigned max_sub = a;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avxvnni = a & (1u << 4);
    }
#endif
#ifdef KRN_EMULATED_AVX512
    /* A test build whose avx512 kernels run over an emulation compiled for AVX2. */
    if (f.avx2 && f.fma && f.f16c)
        f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = true;
#endif
    apply_hide(&f, NULL, 0);
    return f;
}

static bool level_supported(krn_level level, const krn_cpu_features *f)
{
    switch (level) {
    case KRN_LEVEL_REF:
        return true;
    case KRN_LEVEL_AVX2:
        return f->avx2 && f->fma && f->f16c;
    case KRN_LEVEL_AVX512:
        return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl;
    default:
        return false;
    }
}

krn_level krn_cpu_best_level(void)
{
    krn_cpu_features f = krn_cpu_detect();
    krn_level best = KRN_LEVEL_REF;
    for (int l = KRN_LEVEL_REF; l < KRN_LEVEL_COUNT; l++)
        if (level_supported((krn_level)l, &f))
            best = (krn_level)l;
    return best;
}

static const char *const level_names[KRN_LEVEL_COUNT] = {"ref", "avx2", "avx512"};

const char *krn_level_name(krn_level level)
{
    return (unsigned)level < KRN_LEVEL_COUNT ? level_names[level] : "?";
}

int krn_level_parse(const char *s, krn_level *out)
{
    for (int l = 0; s && l < KRN_LEVEL_COUNT; l++)
        if (strcmp(s, level_names[l]) == 0) {
            *out = (krn_level)l;
            return KRN_OK;
        }
    return KRN_EINVAL;
}

/* ------------------------------------------------------------------------- */
/* Tables                                                                      */

#define SET(t, op, lvl) ((t)->op.fn = krn_##lvl##_##op, (t)->op.name = #op "." #lvl)
#define ENTRY(op, lvl) .op = {krn_##lvl##_##op, #op "." #lvl}

/* A constant initializer, so the active table below is valid before krn_init(). */
#define REF_TABLE_INIT                                                                \
    {                                                                                 \
        .level = KRN_LEVEL_REF, .level_name = "ref", ENTRY(quant_a8, ref),            \
        ENTRY(mmnb_f32, ref), ENTRY(mmnb_i8, ref), ENTRY(mm_f, ref), ENTRY(rmsnorm, ref), \
        .mmnb8_f32 = {krn_ref_mmnb_f32, "mmnb8_f32.ref"}, .mmnb8_i8 = {krn_ref_mmnb_i8, "mmnb8_i8.ref"}, \
        ENTRY(skip_rmsnorm, ref), ENTRY(rotary, ref), ENTRY(kv_store, ref),           \
        ENTRY(gqa, ref),                                                              \
        ENTRY(sigmoid, ref), ENTRY(mul, ref), ENTRY(add, ref), ENTRY(silu_mul, ref),  \
        ENTRY(gather, ref),                                                           \
    }

static const krn_table ref_table = REF_TABLE_INIT;

static void fill_ref(krn_table *t)
{
    *t = ref_table;
}

/* The avx2 table; its int8 matmul uses AVX-VNNI where the CPU has it (the same bits). */
static void fill_avx2(krn_table *t, bool avxvnni)
{
    fill_ref(t);
    t->level = KRN_LEVEL_AVX2;
    t->level_name = "avx2";
    t->q4_packed = true;
    SET(t, quant_a8, avx2);
    SET(t, mmnb_f32, avx2);
    SET(t, mmnb_i8, avx2);
    SET(t, mmnb8_i8, avx2); /* mmnb8_f32 stays the reference's: 8-bit exports run accuracy_level 4 */
    SET(t, mm_f, avx2);
    SET(t, rmsnorm, avx2);
    SET(t, skip_rmsnorm, avx2);
    SET(t, gqa, avx2);
    SET(t, rotary, avx2);
    SET(t, kv_store, avx2);
    SET(t, gather, avx2);
    SET(t, sigmoid, avx2);
    SET(t, mul, avx2);
    SET(t, add, avx2);
    SET(t, silu_mul, avx2);
    if (avxvnni) {
        t->mmnb_i8.fn = krn_avx2_mmnb_i8_avxvnni;
        t->mmnb_i8.name = "mmnb_i8.avxvnni";
        t->mmnb8_i8.fn = krn_avx2_mmnb8_i8_avxvnni;
        t->mmnb8_i8.name = "mmnb8_i8.avxvnni";
    }
}

/*
 * AVX-512 pays off for the weight-streaming matmuls and the prompt's
 * attention; the rest, including the activation quantizer (O(K) per row),
 * reuses AVX2.
 */
void krn_table_avx512(krn_table *t, krn_mmnb_fn mmnb_f32, krn_mmnb_fn mmnb_i8, krn_mmnb_fn mmnb8_i8, bool vnni,
                      krn_gqa_fn gqa)
{
    fill_avx2(t, false);
    t->level = KRN_LEVEL_AVX512;
    t->level_name = "avx512";
    t->q4_packed = true; /* mmnb_i8 reads the packed copy (else the ONNX layout), as AVX2 does */
    t->mmnb_f32.fn = mmnb_f32;
    t->mmnb_f32.name = "mmnb_f32.avx512";
    t->mmnb_i8.fn = mmnb_i8;
    t->mmnb_i8.name = vnni ? "mmnb_i8.avx512vnni" : "mmnb_i8.avx512";
    if (mmnb8_i8) {
        t->q8_packed = true; /* the VNNI kernel reads the 8-bit packed copy too */
        t->mmnb8_i8.fn = mmnb8_i8;
        t->mmnb8_i8.name = "mmnb8_i8.avx512vnni";
    }
    t->gqa.fn = gqa;
    t->gqa.name = vnni ? "gqa.avx512vnni" : "gqa.avx512";
}

static void fill_avx512(krn_table *t, const krn_cpu_features *f)
{
    krn_table_avx512(t, krn_avx512_mmnb_f32, f->avx512vnni ? krn_avx512_mmnb_i8_vnni : krn_avx512_mmnb_i8,
                     f->avx512vnni ? krn_avx512_mmnb8_i8_vnni : NULL,
                     f->avx512vnni, f->avx512vnni ? krn_avx512_gqa_vnni : krn_avx512_gqa);
}

int krn_table_for_level(krn_level level, krn_table *out)
{
    krn_cpu_features f = krn_cpu_detect();
    if (!level_supported(level, &f))
        return KRN_ENOTSUP;
    switch (level) {
    case KRN_LEVEL_REF:
        fill_ref(out);
        break;
    case KRN_LEVEL_AVX2:
        fill_avx2(out, f.avxvnni);
        break;
    case KRN_LEVEL_AVX512:
        fill_avx512(out, &f);
        break;
    default:
        return KRN_ENOTSUP;
    }
    return KRN_OK;
}

/* ------------------------------------------------------------------------- */
/* The active table                                                            */

static krn_table active = REF_TABLE_INIT;
static char active_note[160];
#define KRN_CPU_LIST_LEN 128
/* The line's fixed text, the longest level and prefetch names and the emulation mark fit in 96 bytes. */
_Static_assert(KRN_DESCRIBE_LEN >= KRN_CPU_LIST_LEN + sizeof active_note + 96, "krn_describe's line may not fit");
static unsigned active_prefetch = KRN_PF_DEFAULT;

unsigned krn_stream_prefetch(void)
{
    return active_prefetch;
}

static const struct { const char *name; unsigned bits; } prefetch_names[] = {
    {"l1+l2", KRN_PF_L1 | KRN_PF_L2}, {"l2", KRN_PF_L2}, {"none", 0}
};

static bool prefetch_parse(const char *name, unsigned *bits)
{
    for (size_t i = 0; i < sizeof prefetch_names / sizeof prefetch_names[0]; i++)
        if (strcmp(name, prefetch_names[i].name) == 0) {
            *bits = prefetch_names[i].bits;
            return true;
        }
    return false;
}

static const char *prefetch_name(unsigned bits)
{
    for (size_t i = 0; i < sizeof prefetch_names / sizeof prefetch_names[0]; i++)
        if (prefetch_names[i].bits == bits)
            return prefetch_names[i].name;
    return "?";
}

/* Appends the formatted text to active_note, after ", " when it holds some. */
static void note_add(const char *fmt, const char *arg)
{
    size_t used = strlen(active_note);
    if (used + 2 >= sizeof active_note)
        return;
    if (used) {
        memcpy(active_note + used, ", ", 3);
        used += 2;
    }
    snprintf(active_note + used, sizeof active_note - used, fmt, arg);
}

const krn_table *krn_active(void)
{
    return &active;
}

int krn_init(void)
{
    int rc = KRN_OK;
    krn_level best = krn_cpu_best_level(), chosen = best;
    const char *env = getenv("QWEN3D_KERNELS");
    active_note[0] = '\0';
    if (env && *env) {
        krn_level want;
        if (krn_level_parse(env, &want) != KRN_OK) {
            rc = KRN_EENV;
            snprintf(active_note, sizeof active_note, "QWEN3D_KERNELS=%.20s ignored", env);
        } else if (want > best) {
            snprintf(active_note, sizeof active_note, "QWEN3D_KERNELS=%s capped to %s",
                     krn_level_name(want), krn_level_name(best));
        } else {
            chosen = want;
            snprintf(active_note, sizeof active_note, "QWEN3D_KERNELS=%s", krn_level_name(want));
        }
    }
    const char *hide = getenv("QWEN3D_CPU_HIDE");
    if (hide && *hide) {
        krn_cpu_features f = krn_cpu_detect();
        char bad[24];
        if (!apply_hide(&f, bad, sizeof bad)) {
            rc = KRN_EENV;
            note_add("QWEN3D_CPU_HIDE: unknown %s ignored", bad);
        } else {
            note_add("QWEN3D_CPU_HIDE=%.40s", hide);
        }
    }
    active_prefetch = KRN_PF_DEFAULT;
    const char *pf = getenv("QWEN3D_PREFETCH");
    if (pf && *pf) {
        unsigned want;
        if (prefetch_parse(pf, &want)) {
            active_prefetch = want;
            note_add("QWEN3D_PREFETCH=%s", pf);
        } else {
            rc = KRN_EENV;
            note_add("QWEN3D_PREFETCH=%.20s ignored", pf);
        }
    }
    krn_table_for_level(chosen, &active); /* chosen <= best, so it is supported */
    return rc;
}

int krn_describe(char *buf, size_t len)
{
    krn_cpu_features f = krn_cpu_detect();
    const krn_table *t = krn_active();
    char cpu[KRN_CPU_LIST_LEN] = "";
    size_t used = 0;
    struct { bool on; const char *name; } feats[] = {
#define KRN_FEAT_ENTRY(feat) {f.feat, #feat},
        KRN_FEATURES(KRN_FEAT_ENTRY)
#undef KRN_FEAT_ENTRY
    };
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
        if (feats[i].on && used < sizeof cpu)
            used += (size_t)snprintf(cpu + used, sizeof cpu - used, "%s%s", used ? " " : "",
                                     feats[i].name);
#ifdef KRN_EMULATED_AVX512
    const char *emulated = ", avx512 emulated";
#else
    const char *emulated = "";
#endif
    return snprintf(buf, len, "kernels %s (cpu: %s%s%s%s), weight prefetch %s", t->level_name,
                    used ? cpu : "no simd", emulated, active_note[0] ? "; " : "", active_note,
                    prefetch_name(active_prefetch));
}

/* ------------------------------------------------------------------------- */
/* Plan-time checks and sizes                                                  */

void krn_q4_weights_set_blocks(krn_q4_weights *w)
{
    w->k_blocks = w->block_size ? (w->k + w->block_size - 1) / w->block_size : 0;
}

size_t krn_q4_pack_size(const krn_q4_weights *w)
{
    size_t groups = krn_q4p_groups(w);
    if (!groups || (w->zero_pts && !w->packed_zp) || !w->n || w->k_blocks != (w->k + w->block_size - 1) / w->block_size)
        return 0;
    size_t tile = w->bits8 ? w->k_blocks * krn_q8p_block_bytes(groups, w->packed_bf16, w->packed_zp)
                           : krn_q4p_tile_bytes(w->k_blocks, groups, w->packed_bf16, w->packed_zp);
    return (w->n + KRN_Q4_PACK_TILE - 1) / KRN_Q4_PACK_TILE * tile;
}

krn_q4_weights krn_q4_columns(const krn_q4_weights *w, size_t off, size_t n)
{
    krn_q4_weights s = *w;
    s.n = n;
    if (w->b_data)
        s.b_data = w->b_data + off * w->k_blocks * (w->bits8 ? w->block_size : w->block_size / 2);
    if (w->scales)
        s.scales = w->scales + off * w->k_blocks;
    if (w->zero_pts)
        s.zero_pts = w->zero_pts + off * (w->bits8 ? w->k_blocks : (w->k_blocks + 1) / 2);
    if (w->bias)
        s.bias = w->bias + off;
    if (w->packed) /* tiles of KRN_Q4_PACK_TILE columns follow each other */
        s.packed = w->bits8 ? krn_q8p_tile(w->packed, off, w->k_blocks, krn_q4p_groups(w), w->packed_bf16, w->packed_zp)
                            : krn_q4p_half(w->packed, off, w->k_blocks, krn_q4p_groups(w), w->packed_bf16, w->packed_zp);
    return s;
}

bool krn_q4_scales_fit_bf16(const float *scales, size_t count)
{
    /* One OR over the low halves: a plain loop the compiler vectorizes. */
    uint32_t low = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        memcpy(&u, &scales[i], sizeof u);
        low |= u & 0xFFFFu;
    }
    return low == 0;
}

/* krn_q4_pack for 8-bit codes (krn_q8p_tile): every record of every tile, the padding columns included. */
static void q8_pack(const krn_q4_weights *w, void *dst)
{
    size_t kb = w->k_blocks, groups = krn_q4p_groups(w), bs = w->block_size;
    size_t rec = krn_q8p_block_bytes(groups, w->packed_bf16, w->packed_zp), so = krn_q8p_scales_offset(groups);
    size_t zo = krn_q8p_zp_offset(groups, w->packed_bf16);
    size_t padded = (w->n + KRN_Q4_PACK_TILE - 1) / KRN_Q4_PACK_TILE * KRN_Q4_PACK_TILE;
    for (size_t n0 = 0; n0 < padded; n0 += KRN_Q4_PACK_TILE)
        for (size_t b = 0; b < kb; b++) {
            uint8_t *out = (uint8_t *)krn_q8p_tile(dst, n0, kb, groups, w->packed_bf16, w->packed_zp) + b * rec;
            memset(out, 0, rec);
            for (size_t c = 0; c < KRN_Q4_PACK_TILE && n0 + c < w->n; c++) {
                size_t n = n0 + c;
                for (size_t t = 0; t < bs && b * bs + t < w->k; t++) {
                    size_t s = krn_qa_slot(t, bs);
                    out[KRN_Q8P_WEIGHT_BYTES * (s / 32) + krn_q8p_code_at(c, s % 32)] = w->b_data[(n * kb + b) * bs + t];
                }
                uint32_t u;
                memcpy(&u, &w->scales[n * kb + b], sizeof u);
                if (w->packed_bf16) {
                    uint16_t hi = (uint16_t)(u >> 16);
                    memcpy(out + so + 2 * c, &hi, sizeof hi);
                } else {
                    memcpy(out + so + 4 * c, &u, sizeof u);
                }
                if (w->packed_zp)
                    out[zo + c] = w->zero_pts[n * kb + b];
            }
        }
}

int krn_q4_pack(const krn_q4_weights *w, void *dst)
{
    size_t bytes = krn_q4_pack_size(w);
    if (!bytes || !w->b_data || !w->scales || !dst)
        return KRN_EINVAL;
    if (w->packed_bf16 && !krn_q4_scales_fit_bf16(w->scales, w->n * w->k_blocks))
        return KRN_EINVAL;
    if (w->packed_zp && !w->zero_pts)
        return KRN_EINVAL;
    if (w->bits8) {
        q8_pack(w, dst);
        return KRN_OK;
    }
    size_t kb = w->k_blocks, groups = krn_q4p_groups(w), blob = w->block_size / 2;
    size_t rec = krn_q4p_block_bytes(groups, w->packed_bf16, w->packed_zp), so = krn_q4p_scales_offset(groups);
    size_t padded = (w->n + KRN_Q4_PACK_TILE - 1) / KRN_Q4_PACK_TILE * KRN_Q4_PACK_TILE;
    /* Every record of every tile, the padding half of a last one included. */
    for (size_t n0 = 0; n0 < padded; n0 += KRN_Q4P_NR)
        for (size_t b = 0; b < kb; b++) {
            uint8_t *out = (uint8_t *)krn_q4p_half(dst, n0, kb, groups, w->packed_bf16, w->packed_zp) + 2 * b * rec;
            uint32_t sc[KRN_Q4P_NR];
            for (size_t c = 0; c < KRN_Q4P_NR; c++) {
                size_t n = n0 + c;
                for (size_t g = 0; g < groups; g++)
                    for (size_t h = 0; h < 4; h++) {
                        uint8_t *lane = out + KRN_Q4P_WEIGHT_BYTES * g + 32 * h + 4 * c;
                        if (n < w->n)
                            memcpy(lane, w->b_data + (n * kb + b) * blob + 16 * g + 4 * h, 4);
                        else
                            memset(lane, 0, 4);
                    }
                sc[c] = 0; /* the bits of +0.0f */
                if (n < w->n)
                    memcpy(&sc[c], &w->scales[n * kb + b], sizeof sc[c]);
            }
            if (w->packed_bf16)
                for (size_t c = 0; c < KRN_Q4P_NR; c++) {
                    uint16_t hi = (uint16_t)(sc[c] >> 16);
                    memcpy(out + so + 2 * c, &hi, sizeof hi);
                }
            else
                memcpy(out + so, sc, sizeof sc);
            if (w->packed_zp)
                for (size_t c = 0; c < KRN_Q4P_NR; c++)
                    out[krn_q4p_zp_offset(groups, w->packed_bf16) + c] =
                        (uint8_t)(n0 + c < w->n ? krn_q4_zp(w, n0 + c, b) : 0);
        }
    return KRN_OK;
}

/* Scale C of a packed record's scales at P: fp32, or a bfloat16 upper half (BF16). */
static float packed_scale(const uint8_t *p, size_t c, bool bf16)
{
    float sc;
    if (bf16) {
        uint16_t h;
        memcpy(&h, p + 2 * c, sizeof h);
        return krn_bf16_to_f32(h);
    }
    memcpy(&sc, p + 4 * c, sizeof sc);
    return sc;
}

void krn_q4_dequant_row(const krn_q4_weights *w, size_t n, float *out)
{
    size_t kb = w->k_blocks, bs = w->block_size;
    if (w->bits8 && krn_q4_reads_packed(w)) {
        size_t groups = krn_q4p_groups(w), c = n % KRN_Q4_PACK_TILE;
        size_t rec = krn_q8p_block_bytes(groups, w->packed_bf16, w->packed_zp), so = krn_q8p_scales_offset(groups);
        const uint8_t *tile = krn_q8p_tile(w->packed, n - c, kb, groups, w->packed_bf16, w->packed_zp);
        for (size_t b = 0; b < kb; b++) {
            const uint8_t *r = tile + b * rec;
            float sc = packed_scale(r + so, c, w->packed_bf16);
            int zp = w->packed_zp ? r[krn_q8p_zp_offset(groups, w->packed_bf16) + c] : 128;
            for (size_t t = 0; t < bs && b * bs + t < w->k; t++) {
                size_t s = krn_qa_slot(t, bs);
                out[b * bs + t] = (float)((int)r[KRN_Q8P_WEIGHT_BYTES * (s / 32) + krn_q8p_code_at(c, s % 32)] - zp) * sc;
            }
        }
        return;
    }
    if (krn_q4_reads_packed(w)) {
        /* record (tile, block): G groups of four 32-byte vectors whose lane c holds 4 weight bytes of
         * column c, then scales (and zero points) */
        size_t groups = krn_q4p_groups(w), so = krn_q4p_scales_offset(groups), c = n % KRN_Q4P_NR;
        size_t rec = krn_q4p_block_bytes(groups, w->packed_bf16, w->packed_zp);
        const uint8_t *half = krn_q4p_half(w->packed, n - c, kb, groups, w->packed_bf16, w->packed_zp);
        for (size_t b = 0; b < kb; b++) {
            const uint8_t *r = half + 2 * b * rec;
            float sc = packed_scale(r + so, c, w->packed_bf16);
            int zp = w->packed_zp ? r[krn_q4p_zp_offset(groups, w->packed_bf16) + c] : 8;
            for (size_t j = 0; j < bs / 2 && b * bs + 2 * j < w->k; j++) {
                uint8_t byte = r[KRN_Q4P_WEIGHT_BYTES * (j / 16) + 32 * (j % 16 / 4) + 4 * c + j % 4];
                size_t k = b * bs + 2 * j;
                out[k] = (float)((int)(byte & 15) - zp) * sc;
                if (k + 1 < w->k)
                    out[k + 1] = (float)((int)(byte >> 4) - zp) * sc;
            }
        }
        return;
    }
    for (size_t k = 0; k < w->k; k++)
        out[k] = (float)((int)krn_q4_get(w, n, k) - krn_q4_zp(w, n, k / bs)) * w->scales[n * kb + k / bs];
}

size_t krn_quant_a8_size(size_t m, size_t k, size_t block_size)
{
    if (!block_size)
        return 0;
    return m * krn_qa_row_bytes((k + block_size - 1) / block_size, block_size);
}

int krn_mmnb_check(const krn_mmnb_args *a, bool int8_mode)
{
    const krn_q4_weights *w = &a->w;
    size_t bs = w->block_size;
    if (bs < 16 || (bs & (bs - 1)) != 0)
        return KRN_EINVAL;
    if (w->n == 0 || w->k == 0 || w->k_blocks != (w->k + bs - 1) / bs)
        return KRN_EINVAL;
    if (!w->b_data || !w->scales || !a->y || (a->m > 1 && a->y_ld < w->n))
        return KRN_EINVAL;
    if (int8_mode ? !a->qa : (!a->a || (a->m > 1 && a->a_ld < w->k)))
        return KRN_EINVAL;
    return KRN_OK;
}

int krn_gqa_check(const krn_gqa_args *a)
{
    if (!a->n_heads || !a->n_kv_heads || a->n_heads % a->n_kv_heads != 0)
        return KRN_EINVAL;
    if (!a->head_dim || a->head_dim > KRN_MAX_HEAD_DIM)
        return KRN_EINVAL;
    if (!a->q || !a->k_cache || !a->v_cache || !a->out)
        return KRN_EINVAL;
    size_t width = a->n_heads * a->head_dim;
    size_t row = krn_kv_row_elems(a->kv_type, a->head_dim);
    if (!krn_kv_type_known(a->kv_type))
        return KRN_EINVAL;
    if ((a->seq > 1 && (a->q_ld < width || a->out_ld < width)) || a->kv_tok_stride < row)
        return KRN_EINVAL;
    if (a->n_kv_heads > 1 && a->kv_head_stride < row)
        return KRN_EINVAL;
    return KRN_OK;
}

void krn_kv_row_from_f32(krn_kv_type t, const float *x, size_t n, void *row)
{
    if (t == KRN_KV_Q8)
        krn_q8_row(x, n, row);
    else if (t == KRN_KV_F16)
        for (size_t d = 0; d < n; d++)
            ((uint16_t *)row)[d] = krn_f32_to_f16(x[d]);
    else
        memcpy(row, x, n * sizeof(float));
}

float krn_kv_row_value(krn_kv_type t, const void *row, size_t n, size_t d)
{
    if (t == KRN_KV_Q8)
        return (float)((const int8_t *)row)[d] * krn_q8_scale(row, n);
    if (t == KRN_KV_F16)
        return krn_f16_to_f32(((const uint16_t *)row)[d]);
    return ((const float *)row)[d];
}

uint16_t krn_f16_from_f32(float f)
{
    return krn_f32_to_f16(f);
}
