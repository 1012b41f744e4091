/*
 * model: loads and validates model.onnx and its external data (see model.h).
 *
 * The file is unpacked with protobuf-c against the subset schema in
 * engine/onnx.proto; unknown fields are skipped. External data files are
 * mapped read-only once each and tensors point into the mapping, so weights
 * are paged in on first use and never copied. Only small typed-field tensors
 * (Constant values, inline shapes) are decoded into owned buffers.
 *
 * Validation never stops at the first problem: every check that can still be
 * made is made, and each problem becomes one diag line naming the file and the
 * node or tensor. Called on the loading thread; the result is immutable.
 */
#include "engine/model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/onnx.pb-c.h"
#include "engine/op_registry.h"
#include "kernels/checked.h"
/* ai.onnx opsets whose semantics for the supported ops are the ones implemented. */
#define ONNX_OPSET_MIN 14
#define ONNX_OPSET_MAX 26
#define MS_OPSET 1
#define IR_VERSION_MIN 7
#define IR_VERSION_MAX 11

typedef struct mapped_file {
    char *location;
    int fd;              /* open while the graph lives: the small tensors are read through it */
    const uint8_t *addr;
    uint64_t size;
    bool failed;         /* already reported; don't report again per tensor */
} mapped_file;

/* A byte range of an external file claimed by one tensor, for overlap checks. */
typedef struct ext_range {
    size_t file;
    uint64_t begin, end;
    const char *tensor;
} ext_range;

struct eng_graph_priv {
    Onnx__ModelProto *proto;
    char *onnx_path;
    mapped_file *files;
    size_t n_files;
    ext_range *ranges;
    size_t n_ranges, cap_ranges;
    void **owned;        /* decoded tensor payloads, attribute tensors */
    size_t n_owned, cap_owned;
    int *hash;           /* open addressing over values, -1 = empty */
    size_t hash_cap;
};

/* Per-load context: the graph being built plus the problem list. */
typedef struct loader {
    eng_graph *g;
    eng_diag *diag;
    const char *file;    /* model.onnx path for messages */
} loader;

static const char *str_or_empty(const char *s) { return s ? s : ""; }

size_t eng_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case ENG_DT_FLOAT: case ENG_DT_INT32: case ENG_DT_UINT32: return 4;
    case ENG_DT_UINT8: case ENG_DT_INT8: case ENG_DT_BOOL: return 1;
    case ENG_DT_UINT16: case ENG_DT_INT16: case ENG_DT_FLOAT16: case ENG_DT_BFLOAT16: return 2;
    case ENG_DT_INT64: case ENG_DT_DOUBLE: case ENG_DT_UINT64: return 8;
    default: return 0;
    }
}

int eng_shape_size(const int64_t *dims, int rank, size_t esize, uint64_t *n_elems, uint64_t *nbytes)
{
    uint64_t n = 1, volume = esize ? esize : 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        uint64_t d = (uint64_t)dims[i];
        if (!ck_mul_u64(volume, d ? d : 1, &volume) || volume > ENG_MAX_TENSOR_BYTES)
            return -1;
        n *= d; /* cannot overflow: bounded by volume */
    }
    if (n_elems)
        *n_elems = n;
    if (nbytes)
        *nbytes = n * esize;
    return 0;
}

const char *eng_shape_str(const int64_t *dims, int rank, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

uint64_t eng_dtype_bytes(int32_t dtype, uint64_t count)
{
    if (dtype == ENG_DT_UINT4 || dtype == ENG_DT_INT4)
        return count / 2 + (count & 1);
    return count * eng_dtype_size(dtype);
}

const char *eng_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case ENG_DT_FLOAT: return "FLOAT";
    case ENG_DT_UINT8: return "UINT8";
    case ENG_DT_INT8: return "INT8";
    case ENG_DT_UINT16: return "UINT16";
    case ENG_DT_INT16: return "INT16";
    case ENG_DT_INT32: return "INT32";
    case ENG_DT_INT64: return "INT64";
    case ENG_DT_STRING: return "STRING";
    case ENG_DT_BOOL: return "BOOL";
    case ENG_DT_FLOAT16: return "FLOAT16";
    case ENG_DT_DOUBLE: return "DOUBLE";
    case ENG_DT_UINT32: return "UINT32";
    case ENG_DT_UINT64: return "UINT64";
    case ENG_DT_BFLOAT16: return "BFLOAT16";
    case ENG_DT_UINT4: return "UINT4";
    case ENG_DT_INT4: return "INT4";
    default: return "UNKNOWN";
    }
}

static void *own(eng_graph *g, void *p)
{
    struct eng_graph_priv *pv = g->priv;
    if (!p)
        return NULL;
    if (pv->n_owned == pv->cap_owned) {
        size_t cap = pv->cap_owned ? pv->cap_owned * 2 : 64;
        void **n = realloc(pv->owned, cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        pv->owned = n;
        pv->cap_owned = cap;
    }
    pv->owned[pv->n_owned++] = p;
    return p;
}

static void *own_alloc(eng_graph *g, size_t n)
{
    return own(g, calloc(1, n ? n : 1));
}

/* ---- value name table ---------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int eng_graph_value(const eng_graph *g, const char *name)
{
    const struct eng_graph_priv *pv = g->priv;
    if (!name || !pv->hash_cap)
        return -1;
    size_t mask = pv->hash_cap - 1;
    for (size_t i = hash_str(name) & mask;; i = (i + 1) & mask) {
        int v = pv->hash[i];
        if (v < 0)
            return -1;
        if (!strcmp(g->values[v].name, name))
            return v;
    }
}

/* Inserts value index v; returns the existing index if the name is taken. */
static int hash_insert(eng_graph *g, int v)
{
    struct eng_graph_priv *pv = g->priv;
    size_t mask = pv->hash_cap - 1;
    for (size_t i = hash_str(g->values[v].name) & mask;; i = (i + 1) & mask) {
        int cur = pv->hash[i];
        if (cur < 0) {
            pv->hash[i] = v;
            return v;
        }
        if (!strcmp(g->values[cur].name, g->values[v].name))
            return cur;
    }
}

static const char *value_kind_name(eng_value_kind k)
{
    switch (k) {
    case ENG_VALUE_INPUT: return "graph input";
    case ENG_VALUE_INITIALIZER: return "initializer";
    default: return "node output";
    }
}

/* Registers a named value; a duplicate name is a problem (SSA form). */
static int add_value(loader *L, const char *name, eng_value_kind kind, size_t index, size_t slot)
{
    eng_graph *g = L->g;
    int v = (int)g->n_values;
    g->values[v] = (eng_value){.name = name, .kind = kind, .index = index, .slot = slot};
    int got = hash_insert(g, v);
    if (got != v) {
        eng_diag_add(L->diag, "%s: value '%s' is defined twice (%s and %s)", L->file, name,
                     value_kind_name(g->values[got].kind), value_kind_name(kind));
        return -1;
    }
    g->n_values++;
    return v;
}

/* ---- external data ------------------------------------------------------- */

static bool location_is_safe(const char *loc)
{
    if (!loc || !*loc || loc[0] == '/')
        return false;
    /* Reject any ".." path component: data must stay inside the model folder. */
    for (const char *p = loc; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return false;
        if (!slash)
            break;
        p = slash + 1;
    }
    return true;
}

static mapped_file *map_external(loader *L, const char *location)
{
    struct eng_graph_priv *pv = L->g->priv;
    for (size_t i = 0; i < pv->n_files; i++)
        if (!strcmp(pv->files[i].location, location))
            return &pv->files[i];
    mapped_file *nf = realloc(pv->files, (pv->n_files + 1) * sizeof *nf);
    if (!nf)
        return NULL;
    pv->files = nf;
    mapped_file *mf = &pv->files[pv->n_files++];
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
    mf->location = strdup(location);

    char *path = NULL;
    if (asprintf(&path, "%s/%s", L->g->dir, location) < 0) {
        mf->failed = true;
        return mf;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        eng_diag_add(L->diag, "%s: external data file '%s': %s", L->file, path, strerror(errno));
        mf->failed = true;
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        eng_diag_add(L->diag, "%s: external data file '%s' is not a regular file", L->file, path);
        mf->failed = true;
    } else if (st.st_size > 0) {
        void *a = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (a == MAP_FAILED) {
            eng_diag_add(L->diag, "%s: cannot map external data file '%s': %s", L->file, path, strerror(errno));
            mf->failed = true;
        } else {
            mf->addr = a;
            mf->size = (uint64_t)st.st_size;
            L->g->data_file_bytes += mf->size;
        }
    }
    if (mf->addr)
        mf->fd = fd;
    else if (fd >= 0)
        close(fd);
    free(path);
    return mf;
}

/*
 * Tensors up to this size are read into owned memory instead of used in
 * place: norm weights and biases are read on every step, and a data file in
 * the page cache may come in 2 MiB folios that a read maps whole, so a few
 * kilobytes of norm weight per layer kept most of an ORT-form data file
 * resident once every layer had run (about 160 MB for 0.6b).
 */
#define SMALL_EXTERNAL_BYTES ((uint64_t)256 << 10)

/* T's LENGTH bytes at OFFSET of MF's file into memory the graph owns; false leaves T alone. */
static bool read_small_external(loader *L, const mapped_file *mf, uint64_t offset, uint64_t length, eng_tensor *t)
{
    if (mf->fd < 0 || length > SMALL_EXTERNAL_BYTES)
        return false;
    uint8_t *buf = malloc(length ? (size_t)length : 1);
    size_t got = 0;
    while (buf && got < length) {
        ssize_t r = pread(mf->fd, buf + got, (size_t)(length - got), (off_t)(offset + got));
        if (r <= 0 && !(r < 0 && errno == EINTR))
            break;
        got += r > 0 ? (size_t)r : 0;
    }
    if (got < length || !own(L->g, buf)) {
        if (got < length)
            free(buf);
        return false;
    }
    t->data = buf;
    return true;
}

/* Strict decimal parse of an external_data offset/length. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

static void record_range(loader *L, size_t file, uint64_t begin, uint64_t end, const char *tensor)
{
    struct eng_graph_priv *pv = L->g->priv;
    if (begin == end)
        return;
    if (pv->n_ranges == pv->cap_ranges) {
        size_t cap = pv->cap_ranges ? pv->cap_ranges * 2 : 256;
        ext_range *n = realloc(pv->ranges, cap * sizeof *n);
        if (!n)
            return;
        pv->ranges = n;
        pv->cap_ranges = cap;
    }
    pv->ranges[pv->n_ranges++] = (ext_range){file, begin, end, tensor};
}

static int cmp_range(const void *a, const void *b)
{
    const ext_range *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return 0;
}

/* Two tensors sharing bytes means the file is corrupt (writers never alias). */
static void check_overlaps(loader *L)
{
    struct eng_graph_priv *pv = L->g->priv;
    if (pv->n_ranges < 2)
        return;
    qsort(pv->ranges, pv->n_ranges, sizeof *pv->ranges, cmp_range);
    for (size_t i = 1; i < pv->n_ranges; i++) {
        const ext_range *a = &pv->ranges[i - 1], *b = &pv->ranges[i];
        if (a->file == b->file && b->begin < a->end)
            eng_diag_add(L->diag, "%s: tensors '%s' and '%s' overlap in '%s' (bytes %llu..%llu and %llu..%llu)",
                         L->file, a->tensor, b->tensor, pv->files[a->file].location,
                         (unsigned long long)a->begin, (unsigned long long)a->end,
                         (unsigned long long)b->begin, (unsigned long long)b->end);
    }
}

/* ---- tensors ------------------------------------------------------------- */

/* Shape, dtype and byte count; false (with a problem reported) if unusable. */
static bool tensor_header(loader *L, const Onnx__TensorProto *tp, const char *what, eng_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->name = str_or_empty(tp->name);
    t->dtype = tp->has_data_type ? tp->data_type : ENG_DT_UNDEFINED;
    bool ok = true;
    if (!eng_dtype_bytes(t->dtype, 1)) {
        eng_diag_add(L->diag, "%s: %s '%s': unsupported data type %d (%s)", L->file, what, t->name,
                     (int)t->dtype, eng_dtype_name(t->dtype));
        ok = false;
    }
    if (tp->n_dims > ENG_MAX_RANK) {
        eng_diag_add(L->diag, "%s: %s '%s': rank %zu exceeds the supported maximum %d", L->file, what,
                     t->name, tp->n_dims, ENG_MAX_RANK);
        return false;
    }
    t->rank = (int)tp->n_dims;
    for (size_t i = 0; i < tp->n_dims; i++) {
        t->dims[i] = tp->dims[i];
        if (tp->dims[i] < 0) {
            eng_diag_add(L->diag, "%s: %s '%s': negative dimension %lld at axis %zu", L->file, what,
                         t->name, (long long)tp->dims[i], i);
            ok = false;
        }
    }
    if (!ok)
        return false;
    if (eng_shape_size(t->dims, t->rank, eng_dtype_size(t->dtype), &t->n_elems, &t->nbytes) != 0) {
        char shape[200];
        eng_diag_add(L->diag, "%s: %s '%s': shape %s overflows the largest tensor (%llu bytes, zero dims counted as 1)",
                     L->file, what, t->name, eng_shape_str(t->dims, t->rank, shape, sizeof shape),
                     (unsigned long long)ENG_MAX_TENSOR_BYTES);
        return false;
    }
    /* 4-bit dtypes have no byte size above; n_elems <= 2^44, so this cannot overflow */
    t->nbytes = eng_dtype_bytes(t->dtype, t->n_elems);
    return true;
}

static bool tensor_external(loader *L, const Onnx__TensorProto *tp, const char *what, eng_tensor *t)
{
    const char *location = NULL, *offset_s = NULL, *length_s = NULL;
    bool ok = true;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const char *k = str_or_empty(tp->external_data[i]->key);
        const char *v = tp->external_data[i]->value;
        if (!strcmp(k, "location"))
            location = v;
        else if (!strcmp(k, "offset"))
            offset_s = v;
        else if (!strcmp(k, "length"))
            length_s = v;
        else if (strcmp(k, "checksum") && strcmp(k, "basepath")) {
            eng_diag_add(L->diag, "%s: %s '%s': unknown external_data key '%s'", L->file, what, t->name, k);
            ok = false;
        }
    }
    if (!location_is_safe(location)) {
        eng_diag_add(L->diag, "%s: %s '%s': external data location '%s' is missing or leaves the model folder",
                     L->file, what, t->name, str_or_empty(location));
        return false;
    }
    uint64_t offset = 0, length = 0;
    if (offset_s && !parse_u64(offset_s, &offset)) {
        eng_diag_add(L->diag, "%s: %s '%s': external data offset '%s' is not a non-negative integer",
                     L->file, what, t->name, offset_s);
        ok = false;
    }
    if (length_s && !parse_u64(length_s, &length)) {
        eng_diag_add(L->diag, "%s: %s '%s': external data length '%s' is not a non-negative integer",
                     L->file, what, t->name, length_s);
        ok = false;
    }
    if (!ok)
        return false;
    mapped_file *mf = map_external(L, location);
    if (!mf || mf->failed)
        return false;
    if (!length_s)
        length = offset <= mf->size ? mf->size - offset : 0;
    if (offset > mf->size || length > mf->size - offset) {
        eng_diag_add(L->diag, "%s: %s '%s': external range offset %llu + length %llu is past the end of '%s' (%llu bytes)",
                     L->file, what, t->name, (unsigned long long)offset, (unsigned long long)length,
                     location, (unsigned long long)mf->size);
        return false;
    }
    if (length != t->nbytes) {
        eng_diag_add(L->diag, "%s: %s '%s': external length %llu does not match %s%s of %llu elements (%llu bytes)",
                     L->file, what, t->name, (unsigned long long)length, eng_dtype_name(t->dtype),
                     "", (unsigned long long)t->n_elems, (unsigned long long)t->nbytes);
        return false;
    }
    struct eng_graph_priv *pv = L->g->priv;
    t->external = true;
    t->location = mf->location;
    t->offset = offset;
    if (!mf->addr || !read_small_external(L, mf, offset, length, t)) {
        t->mapped = true;
        t->data = mf->addr ? mf->addr + offset : NULL;
    }
    record_range(L, (size_t)(mf - pv->files), offset, offset + length, t->name);
    return true;
}

/* Converts the typed repeated fields (int32_data etc.) to the dtype's raw bytes. */
static bool tensor_typed(loader *L, const Onnx__TensorProto *tp, const char *what, eng_tensor *t)
{
    if (!eng_dtype_size(t->dtype)) {
        eng_diag_add(L->diag, "%s: %s '%s': %s data must be in raw_data or external data", L->file, what,
                     t->name, eng_dtype_name(t->dtype));
        return false;
    }
    size_t count = 0;
    const char *field = NULL;
    switch (t->dtype) {
    case ENG_DT_FLOAT: count = tp->n_float_data; field = "float_data"; break;
    case ENG_DT_DOUBLE: count = tp->n_double_data; field = "double_data"; break;
    case ENG_DT_INT64: count = tp->n_int64_data; field = "int64_data"; break;
    case ENG_DT_UINT32: case ENG_DT_UINT64: count = tp->n_uint64_data; field = "uint64_data"; break;
    default: count = tp->n_int32_data; field = "int32_data"; break;
    }
    if (count != t->n_elems) {
        eng_diag_add(L->diag, "%s: %s '%s': %s holds %zu values, shape needs %llu", L->file, what,
                     t->name, field, count, (unsigned long long)t->n_elems);
        return false;
    }
    uint8_t *buf = own_alloc(L->g, t->nbytes);
    if (!buf) {
        eng_diag_add(L->diag, "%s: %s '%s': out of memory", L->file, what, t->name);
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        switch (t->dtype) {
        case ENG_DT_FLOAT: ((float *)buf)[i] = tp->float_data[i]; break;
        case ENG_DT_DOUBLE: ((double *)buf)[i] = tp->double_data[i]; break;
        case ENG_DT_INT64: ((int64_t *)buf)[i] = tp->int64_data[i]; break;
        case ENG_DT_UINT64: ((uint64_t *)buf)[i] = tp->uint64_data[i]; break;
        case ENG_DT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)tp->uint64_data[i]; break;
        case ENG_DT_INT32: ((int32_t *)buf)[i] = tp->int32_data[i]; break;
        case ENG_DT_INT16: case ENG_DT_UINT16: case ENG_DT_FLOAT16: case ENG_DT_BFLOAT16:
            ((uint16_t *)buf)[i] = (uint16_t)tp->int32_data[i]; break;
        default: buf[i] = (uint8_t)tp->int32_data[i]; break;
        }
    }
    t->data = buf;
    return true;
}

static bool decode_tensor(loader *L, const Onnx__TensorProto *tp, const char *what, eng_tensor *t)
{
    if (!tensor_header(L, tp, what, t))
        return false;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return tensor_external(L, tp, what, t);
    if (tp->has_data_location && tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT) {
        eng_diag_add(L->diag, "%s: %s '%s': unknown data_location %d", L->file, what, t->name,
                     (int)tp->data_location);
        return false;
    }
    if (tp->n_external_data) {
        eng_diag_add(L->diag, "%s: %s '%s': external_data given but data_location is not EXTERNAL",
                     L->file, what, t->name);
        return false;
    }
    if (tp->has_raw_data) {
        if (tp->raw_data.len != t->nbytes) {
            eng_diag_add(L->diag, "%s: %s '%s': raw_data holds %zu bytes, %s of %llu elements needs %llu",
                         L->file, what, t->name, tp->raw_data.len, eng_dtype_name(t->dtype),
                         (unsigned long long)t->n_elems, (unsigned long long)t->nbytes);
            return false;
        }
        t->data = tp->raw_data.data;
        return true;
    }
    return tensor_typed(L, tp, what, t);
}

/* ---- value infos --------------------------------------------------------- */

static void decode_value_info(loader *L, const Onnx__ValueInfoProto *vp, const char *what, eng_value_info *vi)
{
    memset(vi, 0, sizeof *vi);
    vi->name = str_or_empty(vp->name);
    vi->rank = -1;
    if (!*vi->name) {
        eng_diag_add(L->diag, "%s: a graph %s has no name", L->file, what);
        return;
    }
    const Onnx__TypeProto__Tensor *tt = vp->type ? vp->type->tensor_type : NULL;
    if (!tt || !tt->has_elem_type) {
        eng_diag_add(L->diag, "%s: graph %s '%s' is not a tensor with an element type", L->file, what, vi->name);
        return;
    }
    vi->dtype = tt->elem_type;
    if (!eng_dtype_size(vi->dtype))
        eng_diag_add(L->diag, "%s: graph %s '%s': unsupported element type %d (%s)", L->file, what,
                     vi->name, (int)vi->dtype, eng_dtype_name(vi->dtype));
    if (!tt->shape)
        return;
    if (tt->shape->n_dim > ENG_MAX_RANK) {
        eng_diag_add(L->diag, "%s: graph %s '%s': rank %zu exceeds %d", L->file, what, vi->name,
                     tt->shape->n_dim, ENG_MAX_RANK);
        return;
    }
    vi->rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        vi->dims[i].value = -1;
        if (d->has_dim_value) {
            if (d->dim_value < 0)
                eng_diag_add(L->diag, "%s: graph %s '%s': negative dimension %lld", L->file, what,
                             vi->name, (long long)d->dim_value);
            else
                vi->dims[i].value = d->dim_value;
        } else if (d->dim_param && *d->dim_param) {
            vi->dims[i].param = d->dim_param;
        }
    }
}

/* ---- operator table: one row per op in engine/op_registry.h ---------------- */

static const char *attr_type_name(int t)
{
    static const char *names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH",
                                  "FLOATS", "INTS", "STRINGS", "TENSORS", "GRAPHS"};
    return t >= 0 && t <= 10 ? names[t] : "UNKNOWN";
}

/* ---- nodes --------------------------------------------------------------- */

static const char *node_label(const eng_node *n)
{
    return *n->name ? n->name : n->op_type;
}

static void decode_attrs(loader *L, const Onnx__NodeProto *np, eng_node *n, const op_def *spec)
{
    n->n_attrs = np->n_attribute;
    n->attrs = own_alloc(L->g, np->n_attribute * sizeof *n->attrs);
    if (!n->attrs) {
        n->n_attrs = 0;
        return;
    }
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        eng_attr *a = &n->attrs[i];
        a->name = str_or_empty(ap->name);
        a->type = ap->has_type ? (int)ap->type : 0;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(n->attrs[j].name, a->name))
                eng_diag_add(L->diag, "%s: node '%s': attribute '%s' given twice", L->file, node_label(n), a->name);
        const op_attr_spec *as = NULL;
        for (const op_attr_spec *s = spec ? spec->attrs : NULL; s && s->name; s++)
            if (!strcmp(s->name, a->name))
                as = s;
        if (spec && !as) {
            eng_diag_add(L->diag, "%s: node '%s' (%s): unsupported attribute '%s'", L->file, node_label(n),
                         n->op_type, a->name);
            continue;
        }
        if (as && as->type != a->type) {
            eng_diag_add(L->diag, "%s: node '%s' (%s): attribute '%s' must be %s, not %s", L->file,
                         node_label(n), n->op_type, a->name, attr_type_name(as->type), attr_type_name(a->type));
            continue;
        }
        switch (a->type) {
        case ENG_ATTR_FLOAT: a->f = ap->f; break;
        case ENG_ATTR_INT: a->i = ap->i; break;
        case ENG_ATTR_STRING: {
            char *s = own_alloc(L->g, ap->s.len + 1);
            if (s && ap->s.len)
                memcpy(s, ap->s.data, ap->s.len);
            a->s = s ? s : "";
            a->s_len = s ? ap->s.len : 0;
            break;
        }
        case ENG_ATTR_FLOATS: a->floats = ap->floats; a->n_floats = ap->n_floats; break;
        case ENG_ATTR_INTS: a->ints = ap->ints; a->n_ints = ap->n_ints; break;
        case ENG_ATTR_TENSOR: {
            eng_tensor *t = own_alloc(L->g, sizeof *t);
            char what[64];
            snprintf(what, sizeof what, "attribute tensor");
            if (!ap->t)
                eng_diag_add(L->diag, "%s: node '%s': attribute '%s' has no tensor", L->file, node_label(n), a->name);
            else if (t && decode_tensor(L, ap->t, what, t))
                a->t = t;
            break;
        }
        default:
            if (!spec)
                break;
            eng_diag_add(L->diag, "%s: node '%s': attribute '%s' has unsupported type %s", L->file,
                         node_label(n), a->name, attr_type_name(a->type));
        }
    }
    for (const op_attr_spec *s = spec ? spec->attrs : NULL; s && s->name; s++)
        if (s->required && !eng_node_attr(n, s->name))
            eng_diag_add(L->diag, "%s: node '%s' (%s): required attribute '%s' is missing", L->file,
                         node_label(n), n->op_type, s->name);
    if (spec && !strcmp(spec->op, "Constant") && n->n_attrs != 1)
        eng_diag_add(L->diag, "%s: node '%s' (Constant): needs exactly one value attribute", L->file, node_label(n));
}

static int64_t opset_for(const Onnx__ModelProto *m, const char *domain)
{
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const char *d = str_or_empty(m->opset_import[i]->domain);
        if (!strcmp(d, "ai.onnx"))
            d = "";
        if (!strcmp(d, domain))
            return m->opset_import[i]->has_version ? m->opset_import[i]->version : 0;
    }
    return -1;
}

static void decode_node(loader *L, const Onnx__NodeProto *np, size_t index, eng_node *n)
{
    const Onnx__ModelProto *m = L->g->priv->proto;
    n->name = str_or_empty(np->name);
    n->op_type = str_or_empty(np->op_type);
    n->domain = str_or_empty(np->domain);
    if (!strcmp(n->domain, "ai.onnx"))
        n->domain = "";
    n->file_index = index;
    n->n_inputs = np->n_input;
    n->inputs = (const char **)np->input;
    n->n_outputs = np->n_output;
    n->outputs = (const char **)np->output;
    n->input_values = own_alloc(L->g, np->n_input * sizeof(int));
    n->output_values = own_alloc(L->g, np->n_output * sizeof(int));
    for (size_t i = 0; i < np->n_input; i++) {
        if (!n->inputs[i])
            n->inputs[i] = "";
        if (n->input_values)
            n->input_values[i] = -1;
    }
    for (size_t i = 0; i < np->n_output; i++) {
        if (!n->outputs[i])
            n->outputs[i] = "";
        if (n->output_values)
            n->output_values[i] = -1;
    }

    if (!*n->op_type) {
        eng_diag_add(L->diag, "%s: node #%zu '%s' has no op_type", L->file, index, n->name);
        return;
    }
    n->opset = opset_for(m, n->domain);
    const op_def *spec = plan_op_find(n->domain, n->op_type);
    if (!spec) {
        eng_diag_add(L->diag, "%s: node '%s': unsupported op %s::%s", L->file, node_label(n),
                     *n->domain ? n->domain : "ai.onnx", n->op_type);
    } else if (n->opset < 0) {
        eng_diag_add(L->diag, "%s: node '%s' (%s): its domain '%s' is not imported by the model", L->file,
                     node_label(n), n->op_type, *n->domain ? n->domain : "ai.onnx");
    }
    decode_attrs(L, np, n, spec);
    if (!spec)
        return;
    /* Trailing "" inputs are the same as absent ones. */
    size_t n_in = n->n_inputs;
    while (n_in > 0 && !*n->inputs[n_in - 1])
        n_in--;
    if (n_in < spec->min_in || n_in > spec->max_in)
        eng_diag_add(L->diag, "%s: node '%s' (%s): %zu inputs given, %u to %u expected", L->file,
                     node_label(n), n->op_type, n_in, spec->min_in, spec->max_in);
    for (size_t i = 0; i < spec->min_in && i < n->n_inputs; i++)
        if (!*n->inputs[i] && !(spec->may_be_empty & (1u << i)))
            eng_diag_add(L->diag, "%s: node '%s' (%s): required input %zu is empty", L->file,
                         node_label(n), n->op_type, i);
    if (n->n_outputs < spec->min_out || n->n_outputs > spec->max_out)
        eng_diag_add(L->diag, "%s: node '%s' (%s): %zu outputs given, %u to %u expected", L->file,
                     node_label(n), n->op_type, n->n_outputs, spec->min_out, spec->max_out);
    else if (!*n->outputs[0])
        eng_diag_add(L->diag, "%s: node '%s' (%s): output 0 has no name", L->file, node_label(n), n->op_type);
}

static void heap_push(size_t *h, size_t *n, size_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n)
{
    size_t top = h[0], v = h[--*n], i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Kahn's algorithm over value dependencies; reports a cycle by naming its nodes. */
static void topo_sort(loader *L)
{
    eng_graph *g = L->g;
    size_t n = g->n_nodes;
    if (!n)
        return;
    size_t *indeg = calloc(n, sizeof *indeg);
    size_t *order = calloc(n, sizeof *order);
    /* consumers[] lists, for each node, the nodes reading one of its outputs (CSR). */
    size_t *cons_start = calloc(n + 1, sizeof *cons_start);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += g->nodes[i].n_inputs;
    size_t *cons = calloc(total + 1, sizeof *cons);
    eng_node *sorted = NULL;
    if (!indeg || !order || !cons_start || !cons)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const eng_node *nd = &g->nodes[i];
        for (size_t j = 0; j < nd->n_inputs; j++) {
            int v = nd->input_values ? nd->input_values[j] : -1;
            if (v >= 0 && g->values[v].kind == ENG_VALUE_NODE_OUTPUT) {
                cons_start[g->values[v].index + 1]++;
                indeg[i]++;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        cons_start[i + 1] += cons_start[i];
    size_t *fill = calloc(n, sizeof *fill);
    if (!fill)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const eng_node *nd = &g->nodes[i];
        for (size_t j = 0; j < nd->n_inputs; j++) {
            int v = nd->input_values ? nd->input_values[j] : -1;
            if (v >= 0 && g->values[v].kind == ENG_VALUE_NODE_OUTPUT) {
                size_t p = g->values[v].index;
                cons[cons_start[p] + fill[p]++] = i;
            }
        }
    }
    free(fill);
    /* Ready nodes leave in file order (a min-heap on the index), so a file
     * that is already sorted keeps its order and the plan reads like it. */
    size_t *heap = calloc(n, sizeof *heap);
    if (!heap)
        goto out;
    size_t hn = 0, tail = 0;
    for (size_t i = 0; i < n; i++)
        if (!indeg[i])
            heap_push(heap, &hn, i);
    while (hn) {
        size_t i = heap_pop(heap, &hn);
        order[tail++] = i;
        for (size_t c = cons_start[i]; c < cons_start[i + 1]; c++)
            if (--indeg[cons[c]] == 0)
                heap_push(heap, &hn, cons[c]);
    }
    free(heap);
    if (tail < n) {
        char names[512] = "";
        size_t listed = 0;
        for (size_t i = 0; i < n && listed < 4; i++)
            if (indeg[i]) {
                size_t len = strlen(names);
                snprintf(names + len, sizeof names - len, "%s'%s'", listed ? ", " : "", node_label(&g->nodes[i]));
                listed++;
            }
        eng_diag_add(L->diag, "%s: the graph has a cycle: %zu nodes never become ready, e.g. %s", L->file,
                     n - tail, names);
        goto out;
    }
    sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        goto out;
    /* new position of each node, to remap value producers */
    size_t *pos = indeg; /* reuse: all zero now */
    for (size_t k = 0; k < n; k++) {
        sorted[k] = g->nodes[order[k]];
        pos[order[k]] = k;
    }
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].kind == ENG_VALUE_NODE_OUTPUT)
            g->values[v].index = pos[g->values[v].index];
    memcpy(g->nodes, sorted, n * sizeof *sorted);
out:
    free(sorted);
    free(indeg);
    free(order);
    free(cons_start);
    free(cons);
}

/* ---- load ---------------------------------------------------------------- */

static Onnx__ModelProto *read_proto(loader *L, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        eng_diag_add(L->diag, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    Onnx__ModelProto *m = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        eng_diag_add(L->diag, "%s: not a regular file", path);
    } else if (st.st_size == 0) {
        eng_diag_add(L->diag, "%s: file is empty", path);
    } else {
        void *a = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (a == MAP_FAILED) {
            eng_diag_add(L->diag, "%s: cannot map: %s", path, strerror(errno));
        } else {
            m = onnx__model_proto__unpack(NULL, (size_t)st.st_size, a);
            if (!m)
                eng_diag_add(L->diag, "%s: not a valid ONNX model (protobuf truncated or corrupt)", path);
            L->g->onnx_file_bytes = (uint64_t)st.st_size;
            munmap(a, (size_t)st.st_size);
        }
    }
    close(fd);
    return m;
}

static void check_header(loader *L, const Onnx__ModelProto *m)
{
    eng_graph *g = L->g;
    g->ir_version = m->has_ir_version ? m->ir_version : 0;
    g->producer = str_or_empty(m->producer_name);
    if (g->ir_version < IR_VERSION_MIN || g->ir_version > IR_VERSION_MAX)
        eng_diag_add(L->diag, "%s: unsupported ir_version %lld (supported %d..%d)", L->file,
                     (long long)g->ir_version, IR_VERSION_MIN, IR_VERSION_MAX);
    g->opset_onnx = opset_for(m, "");
    g->opset_ms = opset_for(m, OP_MS);
    if (g->opset_onnx < 0)
        eng_diag_add(L->diag, "%s: the model imports no ai.onnx opset", L->file);
    else if (g->opset_onnx < ONNX_OPSET_MIN || g->opset_onnx > ONNX_OPSET_MAX)
        eng_diag_add(L->diag, "%s: unsupported ai.onnx opset %lld (supported %d..%d)", L->file,
                     (long long)g->opset_onnx, ONNX_OPSET_MIN, ONNX_OPSET_MAX);
    if (g->opset_ms >= 0 && g->opset_ms != MS_OPSET)
        eng_diag_add(L->diag, "%s: unsupported com.microsoft opset %lld (supported %d)", L->file,
                     (long long)g->opset_ms, MS_OPSET);
    if (g->opset_ms < 0)
        g->opset_ms = 0;
    if (!m->graph)
        eng_diag_add(L->diag, "%s: the model has no graph", L->file);
}

static void resolve_inputs(loader *L)
{
    eng_graph *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        eng_node *n = &g->nodes[i];
        if (!n->input_values)
            continue;
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (!*n->inputs[j])
                continue;
            int v = eng_graph_value(g, n->inputs[j]);
            n->input_values[j] = v;
            if (v < 0)
                eng_diag_add(L->diag, "%s: node '%s' (%s): input '%s' is not produced by any node, input or initializer",
                             L->file, node_label(n), n->op_type, n->inputs[j]);
        }
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const char *name = g->outputs[i].name;
        if (*name && eng_graph_value(g, name) < 0)
            eng_diag_add(L->diag, "%s: graph output '%s' is not produced by any node", L->file, name);
    }
}

static int build(loader *L)
{
    eng_graph *g = L->g;
    struct eng_graph_priv *pv = g->priv;
    const Onnx__GraphProto *gp = pv->proto->graph;

    check_header(L, pv->proto);
    if (!gp)
        return -1;
    if (!gp->n_input)
        eng_diag_add(L->diag, "%s: the graph declares no inputs", L->file);
    if (!gp->n_output)
        eng_diag_add(L->diag, "%s: the graph declares no outputs", L->file);

    size_t n_values_max = gp->n_input + gp->n_initializer;
    for (size_t i = 0; i < gp->n_node; i++)
        n_values_max += gp->node[i]->n_output;
    pv->hash_cap = 16;
    while (pv->hash_cap < 2 * n_values_max + 2)
        pv->hash_cap *= 2;
    pv->hash = malloc(pv->hash_cap * sizeof *pv->hash);
    g->values = calloc(n_values_max + 1, sizeof *g->values);
    g->inputs = calloc(gp->n_input + 1, sizeof *g->inputs);
    g->outputs = calloc(gp->n_output + 1, sizeof *g->outputs);
    g->inits = calloc(gp->n_initializer + 1, sizeof *g->inits);
    g->nodes = calloc(gp->n_node + 1, sizeof *g->nodes);
    if (!pv->hash || !g->values || !g->inputs || !g->outputs || !g->inits || !g->nodes) {
        eng_diag_add(L->diag, "%s: out of memory", L->file);
        return -1;
    }
    memset(pv->hash, 0xff, pv->hash_cap * sizeof *pv->hash);

    for (size_t i = 0; i < gp->n_input; i++) {
        decode_value_info(L, gp->input[i], "input", &g->inputs[i]);
        if (*g->inputs[i].name)
            add_value(L, g->inputs[i].name, ENG_VALUE_INPUT, i, 0);
    }
    g->n_inputs = gp->n_input;
    for (size_t i = 0; i < gp->n_output; i++)
        decode_value_info(L, gp->output[i], "output", &g->outputs[i]);
    g->n_outputs = gp->n_output;

    for (size_t i = 0; i < gp->n_initializer; i++) {
        eng_tensor *t = &g->inits[i];
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !*tp->name) {
            eng_diag_add(L->diag, "%s: initializer #%zu has no name", L->file, i);
            continue;
        }
        decode_tensor(L, tp, "initializer", t);
        t->name = tp->name;
        add_value(L, t->name, ENG_VALUE_INITIALIZER, i, 0);
    }
    g->n_inits = gp->n_initializer;
    check_overlaps(L);

    for (size_t i = 0; i < gp->n_node; i++) {
        eng_node *n = &g->nodes[i];
        decode_node(L, gp->node[i], i, n);
        for (size_t j = 0; j < n->n_outputs; j++)
            if (*n->outputs[j] && n->output_values)
                n->output_values[j] = add_value(L, n->outputs[j], ENG_VALUE_NODE_OUTPUT, i, j);
    }
    g->n_nodes = gp->n_node;
    resolve_inputs(L);
    if (!eng_diag_failed(L->diag))
        topo_sort(L);
    return eng_diag_failed(L->diag) ? -1 : 0;
}

int eng_graph_load(const char *path, eng_graph **out, eng_diag *diag)
{
    *out = NULL;
    eng_graph *g = calloc(1, sizeof *g);
    struct eng_graph_priv *pv = calloc(1, sizeof *pv);
    if (!g || !pv) {
        free(g);
        free(pv);
        eng_diag_add(diag, "%s: out of memory", path);
        return -1;
    }
    g->priv = pv;
    size_t before = diag->n_total;

    struct stat st;
    char *dir = NULL;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        pv->onnx_path = strdup(path);
    } else {
        dir = strdup(path);
        if (asprintf(&pv->onnx_path, "%s/model.onnx", path) < 0)
            pv->onnx_path = NULL;
    }
    g->dir = own(g, dir);
    if (!g->dir || !pv->onnx_path) {
        eng_diag_add(diag, "%s: out of memory", path);
        goto fail;
    }
    loader L = {.g = g, .diag = diag, .file = pv->onnx_path};
    pv->proto = read_proto(&L, pv->onnx_path);
    if (!pv->proto)
        goto fail;
    if (build(&L) != 0 || diag->n_total > before)
        goto fail;
    *out = g;
    return 0;
fail:
    eng_graph_free(g);
    return -1;
}

void eng_graph_free(eng_graph *g)
{
    if (!g)
        return;
    struct eng_graph_priv *pv = g->priv;
    if (pv) {
        for (size_t i = 0; i < pv->n_files; i++) {
            if (pv->files[i].addr)
                munmap((void *)pv->files[i].addr, pv->files[i].size);
            if (pv->files[i].fd >= 0)
                close(pv->files[i].fd);
            free(pv->files[i].location);
        }
        free(pv->files);
        free(pv->ranges);
        for (size_t i = 0; i < pv->n_owned; i++)
            free(pv->owned[i]);
        free(pv->owned);
        free(pv->hash);
        if (pv->proto)
            onnx__model_proto__free_unpacked(pv->proto, NULL);
        free(pv->onnx_path);
        free(pv);
    }
    free(g->nodes);
    free(g->inits);
    free(g->inputs);
    free(g->outputs);
    free(g->values);
    free(g);
}

const eng_tensor *eng_graph_initializer(const eng_graph *g, const char *name)
{
    int v = eng_graph_value(g, name);
    if (v < 0 || g->values[v].kind != ENG_VALUE_INITIALIZER)
        return NULL;
    return &g->inits[g->values[v].index];
}

int eng_graph_source(const eng_graph *g, size_t i, char *path, size_t cap)
{
    const struct eng_graph_priv *pv = g->priv;
    if (i > pv->n_files)
        return -1;
    int n = i == 0 ? snprintf(path, cap, "%s", pv->onnx_path)
                   : snprintf(path, cap, "%s/%s", g->dir, pv->files[i - 1].location);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

const eng_node *eng_graph_producer(const eng_graph *g, const char *name)
{
    int v = eng_graph_value(g, name);
    if (v < 0 || g->values[v].kind != ENG_VALUE_NODE_OUTPUT)
        return NULL;
    return &g->nodes[g->values[v].index];
}

const eng_tensor *eng_node_constant(const eng_node *n)
{
    if (!n || *n->domain || strcmp(n->op_type, "Constant") || n->n_attrs != 1 || !n->attrs[0].name ||
        strcmp(n->attrs[0].name, "value"))
        return NULL;
    return n->attrs[0].t;
}

const eng_attr *eng_node_attr(const eng_node *n, const char *name)
{
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && !strcmp(n->attrs[i].name, name))
            return &n->attrs[i];
    return NULL;
}

int64_t eng_node_attr_int(const eng_node *n, const char *name, int64_t fallback)
{
    const eng_attr *a = eng_node_attr(n, name);
    return a && a->type == ENG_ATTR_INT ? a->i : fallback;
}

float eng_node_attr_float(const eng_node *n, const char *name, float fallback)
{
    const eng_attr *a = eng_node_attr(n, name);
    return a && a->type == ENG_ATTR_FLOAT ? a->f : fallback;
}
