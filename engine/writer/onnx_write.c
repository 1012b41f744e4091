/*
 * onnx_write: ModelProto builder and external-data writer (see onnx_write.h).
 *
 * Every message, string and array hanging off the model is malloc'd and owned
 * by the model alone, exactly as protobuf-c's unpacker lays out a parsed
 * message, so one protobuf_c_message_free_unpacked() call releases it all.
 * External tensor bytes go through a write buffer straight into the data
 * file; only their descriptions stay in memory. Full buffers are handed to a
 * private writer thread, so the caller produces the next tensor bytes while
 * the kernel copies the previous ones (which on a busy machine costs as much
 * as producing them). The eng_ow itself is used by one thread only; the
 * writer thread touches nothing but the buffer handed to it.
 */
#include "config.h"

#include "engine/writer/onnx_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model.h"

#define WRITE_BUF_BYTES ((size_t)4 << 20)
#define DEFAULT_LOCATION "model.onnx.data"

struct eng_ow {
    Onnx__ModelProto *model;
    Onnx__GraphProto *graph;
    size_t cap_nodes, cap_inits, cap_inputs, cap_outputs, cap_vi;
    Onnx__NodeProto *last;      /* the node eng_ow_attr_* calls apply to */
    int fd;                     /* data file, -1 when none (dry run) */
    char *data_path;
    char *location;
    uint64_t data_off;          /* logical size of the data file, padding included */
    uint8_t *buf;               /* bytes being gathered, not yet handed to the writer */
    size_t buf_len;
    uint8_t *spare;             /* the other buffer, possibly being written by the thread */
    /* Writer thread: writes job[0..job_len) to fd; job is NULL when idle. */
    pthread_t thread;
    bool thread_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *job;
    size_t job_len;
    bool stop;
    int io_errno;               /* first write error of the thread, 0 if none */
    eng_ow_progress_fn progress; /* told the bytes handed to the data file, or NULL */
    void *progress_ctx;
    uint64_t progress_total;
    Onnx__TensorProto *cur;     /* external initializer being streamed, or NULL */
    uint64_t cur_expect, cur_written;
    bool failed;
    char err[512];
};

int eng_ow_fail(eng_ow *w, const char *fmt, ...)
{
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
        w->failed = true;
    }
    return -1;
}

static int oom(eng_ow *w, const char *what)
{
    return eng_ow_fail(w, "out of memory while adding %s", what);
}

static const char *nn(const char *s) { return s ? s : ""; }

static char *dup_str(const char *s)
{
    return strdup(s ? s : "");
}

/* Makes room for one more element in a pointer array with capacity *cap. */
static int grow(void *arrp, size_t n, size_t *cap)
{
    void ***arr = arrp;
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    void **p = realloc(*arr, ncap * sizeof *p);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static void writer_stop(eng_ow *w);

eng_ow *eng_ow_new(const char *graph_name)
{
    eng_ow *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = -1;
    w->model = malloc(sizeof *w->model);
    if (!w->model)
        goto fail;
    onnx__model_proto__init(w->model);
    w->graph = malloc(sizeof *w->graph);
    if (!w->graph)
        goto fail;
    onnx__graph_proto__init(w->graph);
    w->model->graph = w->graph;
    w->model->has_ir_version = 1;
    w->model->ir_version = 10;
    w->model->producer_name = strdup("qwen3d");
    w->model->producer_version = strdup(PACKAGE_VERSION);
    w->graph->name = dup_str(graph_name);
    if (!w->model->producer_name || !w->model->producer_version || !w->graph->name)
        goto fail;
    return w;
fail:
    eng_ow_free(w);
    return NULL;
}

void eng_ow_free(eng_ow *w)
{
    if (!w)
        return;
    if (w->model)
        protobuf_c_message_free_unpacked(&w->model->base, NULL);
    else
        free(w->graph);
    writer_stop(w);
    if (w->fd >= 0)
        close(w->fd);
    free(w->data_path);
    free(w->location);
    free(w->buf);
    free(w->spare);
    free(w);
}

const char *eng_ow_error(const eng_ow *w)
{
    return w && w->failed ? w->err : NULL;
}

int eng_ow_opset(eng_ow *w, const char *domain, int64_t version)
{
    if (w->failed)
        return -1;
    Onnx__ModelProto *m = w->model;
    Onnx__OperatorSetIdProto **p = realloc(m->opset_import, (m->n_opset_import + 1) * sizeof *p);
    if (!p)
        return oom(w, "an opset import");
    m->opset_import = p;
    Onnx__OperatorSetIdProto *o = malloc(sizeof *o);
    if (!o)
        return oom(w, "an opset import");
    onnx__operator_set_id_proto__init(o);
    o->domain = dup_str(domain);
    o->has_version = 1;
    o->version = version;
    p[m->n_opset_import++] = o;
    if (!o->domain)
        return oom(w, "an opset import");
    return 0;
}

/* ---- value infos ---- */

static Onnx__ValueInfoProto *value_info_new(eng_ow *w, const char *name, int32_t elem_type,
                                            size_t rank, const eng_ow_dim *dims)
{
    if (!name || !*name) {
        eng_ow_fail(w, "graph value with an empty name");
        return NULL;
    }
    if (!eng_dtype_size(elem_type)) {
        eng_ow_fail(w, "graph value '%s': unsupported element type %d", name, (int)elem_type);
        return NULL;
    }
    if (rank && !dims) {
        eng_ow_fail(w, "graph value '%s': rank %zu without dims", name, rank);
        return NULL;
    }
    for (size_t i = 0; i < rank; i++) {
        if (!dims[i].param && dims[i].value < 0) {
            eng_ow_fail(w, "graph value '%s': dim %zu is negative", name, i);
            return NULL;
        }
    }
    Onnx__ValueInfoProto *vi = malloc(sizeof *vi);
    if (!vi)
        goto oom;
    onnx__value_info_proto__init(vi);
    vi->name = dup_str(name);
    vi->type = malloc(sizeof *vi->type);
    if (!vi->name || !vi->type)
        goto oom_vi;
    onnx__type_proto__init(vi->type);
    Onnx__TypeProto__Tensor *tt = malloc(sizeof *tt);
    vi->type->tensor_type = tt;
    if (!tt)
        goto oom_vi;
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem_type;
    tt->shape = malloc(sizeof *tt->shape);
    if (!tt->shape)
        goto oom_vi;
    onnx__tensor_shape_proto__init(tt->shape);
    if (rank) {
        tt->shape->dim = calloc(rank, sizeof *tt->shape->dim);
        if (!tt->shape->dim)
            goto oom_vi;
    }
    for (size_t i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = malloc(sizeof *d);
        if (!d)
            goto oom_vi;
        onnx__tensor_shape_proto__dimension__init(d);
        tt->shape->dim[tt->shape->n_dim++] = d;
        if (dims[i].param) {
            d->dim_param = strdup(dims[i].param);
            if (!d->dim_param)
                goto oom_vi;
        } else {
            d->has_dim_value = 1;
            d->dim_value = dims[i].value;
        }
    }
    return vi;
oom_vi:
    protobuf_c_message_free_unpacked(&vi->base, NULL);
oom:
    oom(w, "a graph value");
    return NULL;
}

static int add_value_info(eng_ow *w, Onnx__ValueInfoProto ***arr, size_t *n, size_t *cap,
                          const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims)
{
    if (w->failed)
        return -1;
    if (grow(arr, *n, cap))
        return oom(w, "a graph value");
    Onnx__ValueInfoProto *vi = value_info_new(w, name, elem_type, rank, dims);
    if (!vi)
        return -1;
    (*arr)[(*n)++] = vi;
    return 0;
}

int eng_ow_input(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims)
{
    return add_value_info(w, &w->graph->input, &w->graph->n_input, &w->cap_inputs, name, elem_type, rank, dims);
}

int eng_ow_output(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims)
{
    return add_value_info(w, &w->graph->output, &w->graph->n_output, &w->cap_outputs, name, elem_type, rank, dims);
}

int eng_ow_value_info(eng_ow *w, const char *name, int32_t elem_type, size_t rank, const eng_ow_dim *dims)
{
    return add_value_info(w, &w->graph->value_info, &w->graph->n_value_info, &w->cap_vi, name, elem_type, rank, dims);
}

/* ---- nodes and attributes ---- */

static int copy_names(char ***dst, size_t *n_dst, size_t n, const char *const *src)
{
    if (!n)
        return 0;
    *dst = calloc(n, sizeof **dst);
    if (!*dst)
        return -1;
    for (size_t i = 0; i < n; i++) {
        (*dst)[i] = dup_str(src[i]);
        if (!(*dst)[i])
            return -1;
        *n_dst = i + 1;
    }
    return 0;
}

int eng_ow_node(eng_ow *w, const char *op_type, const char *domain, const char *name,
                size_t n_inputs, const char *const *inputs, size_t n_outputs, const char *const *outputs)
{
    w->last = NULL;
    if (w->failed)
        return -1;
    if (!op_type || !*op_type)
        return eng_ow_fail(w, "node '%s': empty op_type", nn(name));
    if ((n_inputs && !inputs) || (n_outputs && !outputs))
        return eng_ow_fail(w, "node '%s': input or output list missing", nn(name));
    for (size_t i = 0; i < n_inputs; i++)
        if (!inputs[i])
            return eng_ow_fail(w, "node '%s': input %zu is NULL (use \"\" for an absent input)", nn(name), i);
    for (size_t i = 0; i < n_outputs; i++)
        if (!outputs[i])
            return eng_ow_fail(w, "node '%s': output %zu is NULL (use \"\" for an absent output)", nn(name), i);
    Onnx__GraphProto *g = w->graph;
    if (grow(&g->node, g->n_node, &w->cap_nodes))
        return oom(w, "a node");
    Onnx__NodeProto *n = malloc(sizeof *n);
    if (!n)
        return oom(w, "a node");
    onnx__node_proto__init(n);
    g->node[g->n_node++] = n;
    n->op_type = strdup(op_type);
    n->name = dup_str(name);
    /* ai.onnx is written as an absent domain, which readers take as "". */
    if (domain && *domain && strcmp(domain, "ai.onnx") != 0)
        n->domain = strdup(domain);
    if (!n->op_type || !n->name || (domain && *domain && strcmp(domain, "ai.onnx") != 0 && !n->domain) ||
        copy_names(&n->input, &n->n_input, n_inputs, inputs) ||
        copy_names(&n->output, &n->n_output, n_outputs, outputs))
        return oom(w, "a node");
    w->last = n;
    return 0;
}

/* Appends a new attribute of TYPE to the last node; NULL after recording an error. */
static Onnx__AttributeProto *attr_new(eng_ow *w, const char *name, Onnx__AttributeProto__AttributeType type)
{
    if (w->failed)
        return NULL;
    if (!w->last) {
        eng_ow_fail(w, "attribute '%s' given before any node", nn(name));
        return NULL;
    }
    if (!name || !*name) {
        eng_ow_fail(w, "node '%s': attribute with an empty name", w->last->name);
        return NULL;
    }
    Onnx__NodeProto *n = w->last;
    Onnx__AttributeProto **p = realloc(n->attribute, (n->n_attribute + 1) * sizeof *p);
    if (!p) {
        oom(w, "an attribute");
        return NULL;
    }
    n->attribute = p;
    Onnx__AttributeProto *a = malloc(sizeof *a);
    if (!a) {
        oom(w, "an attribute");
        return NULL;
    }
    onnx__attribute_proto__init(a);
    p[n->n_attribute++] = a;
    a->name = strdup(name);
    if (!a->name) {
        oom(w, "an attribute");
        return NULL;
    }
    a->has_type = 1;
    a->type = type;
    return a;
}

int eng_ow_attr_int(eng_ow *w, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a)
        return -1;
    a->has_i = 1;
    a->i = v;
    return 0;
}

int eng_ow_attr_float(eng_ow *w, const char *name, float v)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a)
        return -1;
    a->has_f = 1;
    a->f = v;
    return 0;
}

int eng_ow_attr_ints(eng_ow *w, const char *name, size_t n, const int64_t *v)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a)
        return -1;
    if (!n)
        return 0;
    if (!v)
        return eng_ow_fail(w, "node '%s': attribute '%s' has no values", w->last->name, name);
    a->ints = malloc(n * sizeof *a->ints);
    if (!a->ints)
        return oom(w, "an attribute");
    memcpy(a->ints, v, n * sizeof *v);
    a->n_ints = n;
    return 0;
}

int eng_ow_attr_floats(eng_ow *w, const char *name, size_t n, const float *v)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    if (!a)
        return -1;
    if (!n)
        return 0;
    if (!v)
        return eng_ow_fail(w, "node '%s': attribute '%s' has no values", w->last->name, name);
    a->floats = malloc(n * sizeof *a->floats);
    if (!a->floats)
        return oom(w, "an attribute");
    memcpy(a->floats, v, n * sizeof *v);
    a->n_floats = n;
    return 0;
}

int eng_ow_attr_string(eng_ow *w, const char *name, const char *s)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a)
        return -1;
    size_t len = s ? strlen(s) : 0;
    /* One spare byte so an empty string still has a non-NULL buffer. */
    a->s.data = malloc(len + 1);
    if (!a->s.data)
        return oom(w, "an attribute");
    memcpy(a->s.data, s ? s : "", len);
    a->s.len = len;
    a->has_s = 1;
    return 0;
}

/* ---- tensors ---- */

/* A TensorProto with name, dtype and dims; *nbytes gets its payload size. */
static Onnx__TensorProto *tensor_new(eng_ow *w, const char *what, const char *name, int32_t dtype,
                                     size_t rank, const int64_t *dims, uint64_t *nbytes)
{
    if (!eng_dtype_bytes(dtype, 1)) {
        eng_ow_fail(w, "%s '%s': unsupported data type %d", what, nn(name), (int)dtype);
        return NULL;
    }
    if (rank > ENG_MAX_RANK || (rank && !dims)) {
        eng_ow_fail(w, "%s '%s': bad rank %zu", what, nn(name), rank);
        return NULL;
    }
    uint64_t count = 1;
    for (size_t i = 0; i < rank; i++) {
        if (dims[i] < 0) {
            eng_ow_fail(w, "%s '%s': dim %zu is negative", what, nn(name), i);
            return NULL;
        }
        if (dims[i] && count > UINT64_MAX / 16 / (uint64_t)dims[i]) {
            eng_ow_fail(w, "%s '%s': too many elements", what, nn(name));
            return NULL;
        }
        count *= (uint64_t)dims[i];
    }
    *nbytes = eng_dtype_bytes(dtype, count);
    Onnx__TensorProto *t = malloc(sizeof *t);
    if (!t) {
        oom(w, what);
        return NULL;
    }
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = dtype;
    if (name && !(t->name = strdup(name)))
        goto oom;
    if (rank) {
        t->dims = malloc(rank * sizeof *t->dims);
        if (!t->dims)
            goto oom;
        memcpy(t->dims, dims, rank * sizeof *dims);
        t->n_dims = rank;
    }
    return t;
oom:
    protobuf_c_message_free_unpacked(&t->base, NULL);
    oom(w, what);
    return NULL;
}

static int set_raw(eng_ow *w, Onnx__TensorProto *t, const char *what, const void *data, size_t nbytes,
                   uint64_t expect)
{
    if (nbytes != expect)
        return eng_ow_fail(w, "%s '%s': %zu bytes given, its dims need %" PRIu64, what, nn(t->name), nbytes, expect);
    if (nbytes && !data)
        return eng_ow_fail(w, "%s '%s': no data", what, nn(t->name));
    t->raw_data.data = malloc(nbytes ? nbytes : 1);
    if (!t->raw_data.data)
        return oom(w, what);
    if (nbytes)
        memcpy(t->raw_data.data, data, nbytes);
    t->raw_data.len = nbytes;
    t->has_raw_data = 1;
    return 0;
}

int eng_ow_attr_tensor(eng_ow *w, const char *name, const char *tname, int32_t dtype,
                       size_t rank, const int64_t *dims, const void *data, size_t nbytes)
{
    Onnx__AttributeProto *a = attr_new(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    if (!a)
        return -1;
    char what[256];
    snprintf(what, sizeof what, "node '%s' attribute '%s' tensor", w->last->name, name);
    uint64_t expect = 0;
    a->t = tensor_new(w, what, tname, dtype, rank, dims, &expect);
    if (!a->t)
        return -1;
    return set_raw(w, a->t, what, data, nbytes, expect);
}

int eng_ow_constant(eng_ow *w, const char *node_name, const char *output, int32_t dtype,
                    size_t rank, const int64_t *dims, const void *data, size_t nbytes)
{
    if (eng_ow_node(w, "Constant", "", node_name, 0, NULL, 1, &output))
        return -1;
    return eng_ow_attr_tensor(w, "value", output, dtype, rank, dims, data, nbytes);
}

static int add_initializer(eng_ow *w, Onnx__TensorProto *t)
{
    Onnx__GraphProto *g = w->graph;
    if (grow(&g->initializer, g->n_initializer, &w->cap_inits)) {
        protobuf_c_message_free_unpacked(&t->base, NULL);
        return oom(w, "an initializer");
    }
    g->initializer[g->n_initializer++] = t;
    return 0;
}

int eng_ow_init_inline(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims,
                       const void *data, size_t nbytes)
{
    if (w->failed)
        return -1;
    if (!name || !*name)
        return eng_ow_fail(w, "initializer with an empty name");
    uint64_t expect = 0;
    Onnx__TensorProto *t = tensor_new(w, "initializer", name, dtype, rank, dims, &expect);
    if (!t || add_initializer(w, t))
        return -1;
    return set_raw(w, t, "initializer", data, nbytes, expect);
}

/* ---- external data ---- */

/* Writes all of P or returns an errno (EIO when the file stops growing). */
static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    eng_ow *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->job && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->job)
            break;
        const uint8_t *p = w->job;
        size_t n = w->job_len;
        pthread_mutex_unlock(&w->mu);
        int e = w->io_errno ? 0 : write_all(w->fd, p, n);
        pthread_mutex_lock(&w->mu);
        if (e && !w->io_errno)
            w->io_errno = e;
        w->job = NULL;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits until the writer thread is idle; reports its error, if any. */
static int writer_wait(eng_ow *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->job)
        pthread_cond_wait(&w->cv, &w->mu);
    int e = w->io_errno;
    pthread_mutex_unlock(&w->mu);
    if (e)
        return eng_ow_fail(w, "%s: write failed: %s", w->data_path, strerror(e));
    return 0;
}

/* Hands the gathered bytes to the writer thread (or writes them here without one). */
static int data_flush(eng_ow *w)
{
    size_t n = w->buf_len;
    w->buf_len = 0;
    if (!n)
        return 0;
    if (w->progress)
        w->progress(w->progress_ctx, w->data_off, w->progress_total);
    if (!w->thread_on) {
        int e = write_all(w->fd, w->buf, n);
        return e ? eng_ow_fail(w, "%s: write failed: %s", w->data_path, strerror(e)) : 0;
    }
    if (writer_wait(w))
        return -1;
    pthread_mutex_lock(&w->mu);
    w->job = w->buf;
    w->job_len = n;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    uint8_t *t = w->buf;
    w->buf = w->spare;
    w->spare = t;
    return 0;
}

void eng_ow_set_progress(eng_ow *w, eng_ow_progress_fn fn, void *ctx, uint64_t total)
{
    w->progress = fn;
    w->progress_ctx = ctx;
    w->progress_total = total;
}

/* Appends N bytes (zeros when P is NULL) to the data file. */
static int data_put(eng_ow *w, const void *p, size_t n)
{
    w->data_off += n;
    if (w->fd < 0)
        return 0;
    const uint8_t *src = p;
    while (n) {
        size_t room = WRITE_BUF_BYTES - w->buf_len;
        size_t k = n < room ? n : room;
        if (src) {
            memcpy(w->buf + w->buf_len, src, k);
            src += k;
        } else {
            memset(w->buf + w->buf_len, 0, k);
        }
        w->buf_len += k;
        n -= k;
        if (w->buf_len == WRITE_BUF_BYTES && data_flush(w))
            return -1;
    }
    return 0;
}

static void writer_stop(eng_ow *w)
{
    if (!w->thread_on)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->thread_on = false;
}

static int data_close(eng_ow *w)
{
    if (w->fd < 0)
        return 0;
    int rc = data_flush(w);
    if (!rc && w->thread_on)
        rc = writer_wait(w);
    writer_stop(w);
    if (close(w->fd) && !rc)
        rc = eng_ow_fail(w, "%s: close failed: %s", w->data_path, strerror(errno));
    w->fd = -1;
    return rc;
}

int eng_ow_data_open(eng_ow *w, const char *path, const char *location)
{
    if (w->failed)
        return -1;
    if (w->fd >= 0 || w->data_off)
        return eng_ow_fail(w, "%s: a data file is already in use", nn(path));
    if (!path || !location || !*location || location[0] == '/' || strstr(location, ".."))
        return eng_ow_fail(w, "%s: the data location must be a plain relative name", nn(path));
    free(w->data_path);
    free(w->location);
    w->data_path = strdup(path);
    w->location = strdup(location);
    if (!w->data_path || !w->location)
        return oom(w, "the data file");
    if (!w->buf && !(w->buf = malloc(WRITE_BUF_BYTES)))
        return oom(w, "the data file");
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return eng_ow_fail(w, "%s: cannot create: %s", path, strerror(errno));
    /* Without a second buffer or thread the writes simply happen inline. */
    if (!w->spare)
        w->spare = malloc(WRITE_BUF_BYTES);
    if (w->spare && !pthread_mutex_init(&w->mu, NULL)) {
        if (!pthread_cond_init(&w->cv, NULL)) {
            w->stop = false;
            w->job = NULL;
            w->io_errno = 0;
            if (!pthread_create(&w->thread, NULL, writer_main, w)) {
                w->thread_on = true;
                return 0;
            }
            pthread_cond_destroy(&w->cv);
        }
        pthread_mutex_destroy(&w->mu);
    }
    return 0;
}

static Onnx__StringStringEntryProto *entry_new(const char *key, const char *value)
{
    Onnx__StringStringEntryProto *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = strdup(key);
    e->value = strdup(value);
    if (!e->key || !e->value) {
        protobuf_c_message_free_unpacked(&e->base, NULL);
        return NULL;
    }
    return e;
}

int eng_ow_init_begin(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims)
{
    if (w->failed)
        return -1;
    if (w->cur)
        return eng_ow_fail(w, "initializer '%s' begun while '%s' is still open", nn(name), nn(w->cur->name));
    if (!name || !*name)
        return eng_ow_fail(w, "initializer with an empty name");
    uint64_t nbytes = 0;
    Onnx__TensorProto *t = tensor_new(w, "initializer", name, dtype, rank, dims, &nbytes);
    if (!t || add_initializer(w, t))
        return -1;
    /* Large tensors start on an allocation-granularity boundary so a reader can map them directly. */
    if (nbytes > ENG_OW_ALIGN_THRESHOLD && w->data_off % ENG_OW_ALIGN) {
        if (data_put(w, NULL, ENG_OW_ALIGN - w->data_off % ENG_OW_ALIGN))
            return -1;
    }
    char off[32], len[32];
    snprintf(off, sizeof off, "%" PRIu64, w->data_off);
    snprintf(len, sizeof len, "%" PRIu64, nbytes);
    t->external_data = calloc(3, sizeof *t->external_data);
    if (!t->external_data)
        return oom(w, "an initializer");
    const char *keys[3] = {"location", "offset", "length"};
    const char *vals[3] = {w->location ? w->location : DEFAULT_LOCATION, off, len};
    for (int i = 0; i < 3; i++) {
        t->external_data[i] = entry_new(keys[i], vals[i]);
        if (!t->external_data[i])
            return oom(w, "an initializer");
        t->n_external_data = (size_t)i + 1;
    }
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    w->cur = t;
    w->cur_expect = nbytes;
    w->cur_written = 0;
    return 0;
}

int eng_ow_init_write(eng_ow *w, const void *data, size_t nbytes)
{
    if (w->failed)
        return -1;
    if (!w->cur)
        return eng_ow_fail(w, "initializer data written with no initializer open");
    if (nbytes > w->cur_expect - w->cur_written)
        return eng_ow_fail(w, "initializer '%s': more than its %" PRIu64 " bytes written", w->cur->name, w->cur_expect);
    if (nbytes && !data)
        return eng_ow_fail(w, "initializer '%s': no data", w->cur->name);
    w->cur_written += nbytes;
    return data_put(w, data, nbytes);
}

int eng_ow_init_end(eng_ow *w)
{
    if (w->failed)
        return -1;
    if (!w->cur)
        return eng_ow_fail(w, "initializer ended with none open");
    Onnx__TensorProto *t = w->cur;
    w->cur = NULL;
    if (w->fd < 0) {
        /* Dry run: account for the bytes that were not produced. */
        w->data_off += w->cur_expect - w->cur_written;
        return 0;
    }
    if (w->cur_written != w->cur_expect)
        return eng_ow_fail(w, "initializer '%s': %" PRIu64 " bytes written, its dims need %" PRIu64,
                    t->name, w->cur_written, w->cur_expect);
    return 0;
}

int eng_ow_init_external(eng_ow *w, const char *name, int32_t dtype, size_t rank, const int64_t *dims,
                         const void *data, size_t nbytes)
{
    if (eng_ow_init_begin(w, name, dtype, rank, dims) || eng_ow_init_write(w, data, nbytes))
        return -1;
    return eng_ow_init_end(w);
}

/* ---- output ---- */

int eng_ow_pack(eng_ow *w, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (w->failed)
        return -1;
    if (w->cur)
        return eng_ow_fail(w, "initializer '%s' is still open", nn(w->cur->name));
    size_t n = protobuf_c_message_get_packed_size(&w->model->base);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return oom(w, "the serialized model");
    if (protobuf_c_message_pack(&w->model->base, buf) != n) {
        free(buf);
        return eng_ow_fail(w, "model serialization came out at an unexpected size");
    }
    *out = buf;
    *len = n;
    return 0;
}

int eng_ow_save(eng_ow *w, const char *path)
{
    if (w->failed)
        return -1;
    if (w->cur)
        return eng_ow_fail(w, "%s: initializer '%s' is still open", path, nn(w->cur->name));
    if (data_close(w))
        return -1;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (eng_ow_pack(w, &buf, &len))
        return -1;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", path) < 0) {
        free(buf);
        return oom(w, "the model file name");
    }
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        eng_ow_fail(w, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t k = write(fd, buf + done, len - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            eng_ow_fail(w, "%s: write failed: %s", tmp, k < 0 ? strerror(errno) : "no progress");
            close(fd);
            unlink(tmp);
            goto out;
        }
        done += (size_t)k;
    }
    if (close(fd)) {
        eng_ow_fail(w, "%s: close failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path)) {
        eng_ow_fail(w, "%s: cannot rename into place: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    free(buf);
    return rc;
}

const Onnx__ModelProto *eng_ow_model(const eng_ow *w)
{
    return w->model;
}

size_t eng_ow_n_nodes(const eng_ow *w)
{
    return w->graph->n_node;
}

size_t eng_ow_n_initializers(const eng_ow *w)
{
    return w->graph->n_initializer;
}

uint64_t eng_ow_data_bytes(const eng_ow *w)
{
    return w->data_off;
}
