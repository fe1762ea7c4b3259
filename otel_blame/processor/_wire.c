/* Cutting an OTLP ExportTraceServiceRequest into one payload per trace id, at the wire level.
 *
 * The native half of otel_blame/processor/wire.py (split_traces). It walks the protobuf framing
 * of the request (ExportTraceServiceRequest -> ResourceSpans -> ScopeSpans -> Span), reads only
 * the ids and flags of each span, and writes, for each trace, an ExportTraceServiceRequest that
 * holds only that trace's spans: each span's bytes as received, under a copy of the fields of its
 * resource and scope. No Python object is made per span. The request has been parsed (validated)
 * by the caller already; anything this walk does not understand is an error all the same.
 *
 * split(body) -> (groups, rejected, first_rejected)
 *   groups: list of (trace_id, payload, spans, roots), in order of each trace's first span;
 *           roots: list of (resource index, scope index, span index, parentless) of the spans
 *           that may be the trace's root (no parent, or a remote parent);
 *   rejected: how many spans were left out for invalid ids;
 *   first_rejected: (trace_id, span_id, parent_span_id) of the first of those, or None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PARENT_IS_REMOTE 0x200u /* SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK */

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Slice;

static int read_varint(const uint8_t **at, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*at >= end) return -1;
        uint8_t byte = *(*at)++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* One field: its number, wire type, value (for length-delimited and fixed32) and whole encoding. */
typedef struct {
    uint32_t number;
    int wire;
    Slice value;
    uint64_t scalar;
    Slice whole;
} Field;

/* 1: a field read, 0: the end, -1: malformed. */
static int next_field(const uint8_t **at, const uint8_t *end, Field *field) {
    if (*at >= end) return 0;
    const uint8_t *start = *at;
    uint64_t key, length;
    if (read_varint(at, end, &key) < 0) return -1;
    field->number = (uint32_t)(key >> 3);
    field->wire = (int)(key & 7);
    field->value.p = *at;
    field->value.n = 0;
    field->scalar = 0;
    switch (field->wire) {
        case 0:
            if (read_varint(at, end, &field->scalar) < 0) return -1;
            break;
        case 1:
            if (end - *at < 8) return -1;
            *at += 8;
            break;
        case 2:
            if (read_varint(at, end, &length) < 0 || length > (uint64_t)(end - *at)) return -1;
            field->value.p = *at;
            field->value.n = (Py_ssize_t)length;
            *at += length;
            break;
        case 5:
            if (end - *at < 4) return -1;
            field->scalar = (uint64_t)(*at)[0] | (uint64_t)(*at)[1] << 8 | (uint64_t)(*at)[2] << 16 |
                            (uint64_t)(*at)[3] << 24;
            *at += 4;
            break;
        default: /* groups (3, 4) are not used by OTLP */
            return -1;
    }
    if (field->number == 0) return -1;
    field->whole.p = start;
    field->whole.n = *at - start;
    return 1;
}

static Py_ssize_t varint_size(uint64_t value) {
    Py_ssize_t size = 1;
    while (value > 0x7f) {
        value >>= 7;
        size++;
    }
    return size;
}

static uint8_t *write_varint(uint8_t *out, uint64_t value) {
    while (value > 0x7f) {
        *out++ = (uint8_t)((value & 0x7f) | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

/* Growable arrays. */
#define GROW(array, count, capacity, type)                                            \
    do {                                                                              \
        if ((count) == (capacity)) {                                                  \
            Py_ssize_t grown = (capacity) ? (capacity) * 2 : 16;                      \
            type *bigger = PyMem_Realloc((array), (size_t)grown * sizeof(type));      \
            if (bigger == NULL) goto no_memory;                                       \
            (array) = bigger;                                                         \
            (capacity) = grown;                                                       \
        }                                                                             \
    } while (0)

typedef struct {        /* a resource or scope: where its own fields (all but its children) are */
    Slice *fields;
    Py_ssize_t count, capacity;
} Header;

typedef struct {
    Py_ssize_t resource, scope; /* indices into the request's resources / scopes (scopes global) */
    Slice span;
} SpanRef;

typedef struct {
    uint8_t trace_id[16];
    SpanRef *spans;
    Py_ssize_t count, capacity;
    PyObject *roots; /* list */
} Group;

typedef struct {
    Group *groups;
    Py_ssize_t count, capacity;
    Py_ssize_t *table; /* open addressing: group index + 1, 0 = empty */
    Py_ssize_t table_size;
} Groups;

static void groups_free(Groups *all) {
    for (Py_ssize_t i = 0; i < all->count; i++) {
        PyMem_Free(all->groups[i].spans);
        Py_XDECREF(all->groups[i].roots);
    }
    PyMem_Free(all->groups);
    PyMem_Free(all->table);
}

static uint64_t hash_id(const uint8_t *id) {
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    return (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
}

static int table_grow(Groups *all) {
    Py_ssize_t size = all->table_size ? all->table_size * 2 : 64;
    Py_ssize_t *table = PyMem_Calloc((size_t)size, sizeof(Py_ssize_t));
    if (table == NULL) return -1;
    for (Py_ssize_t i = 0; i < all->count; i++) {
        uint64_t slot = hash_id(all->groups[i].trace_id) & (uint64_t)(size - 1);
        while (table[slot]) slot = (slot + 1) & (uint64_t)(size - 1);
        table[slot] = i + 1;
    }
    PyMem_Free(all->table);
    all->table = table;
    all->table_size = size;
    return 0;
}

/* The group of a trace id, made when new; NULL when out of memory. */
static Group *group_of(Groups *all, const uint8_t *trace_id) {
    if ((all->count + 1) * 2 > all->table_size && table_grow(all) < 0) return NULL;
    uint64_t mask = (uint64_t)(all->table_size - 1);
    uint64_t slot = hash_id(trace_id) & mask;
    while (all->table[slot]) {
        Group *found = &all->groups[all->table[slot] - 1];
        if (memcmp(found->trace_id, trace_id, 16) == 0) return found;
        slot = (slot + 1) & mask;
    }
    GROW(all->groups, all->count, all->capacity, Group);
    Group *group = &all->groups[all->count];
    memset(group, 0, sizeof(Group));
    memcpy(group->trace_id, trace_id, 16);
    group->roots = PyList_New(0);
    if (group->roots == NULL) return NULL;
    all->count++;
    all->table[slot] = all->count;
    return group;
no_memory:
    PyErr_NoMemory();
    return NULL;
}

static const uint8_t ZERO[16] = {0};

static int bad_ids(Slice trace_id, Slice span_id, Slice parent_id) {
    if (trace_id.n != 16 || memcmp(trace_id.p, ZERO, 16) == 0) return 1;
    if (span_id.n != 8 || memcmp(span_id.p, ZERO, 8) == 0) return 1;
    if (parent_id.n && (parent_id.n != 8 || memcmp(parent_id.p, ZERO, 8) == 0)) return 1;
    return 0;
}

static Py_ssize_t header_size(const Header *header) {
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < header->count; i++) size += header->fields[i].n;
    return size;
}

static uint8_t *write_header(uint8_t *out, const Header *header) {
    for (Py_ssize_t i = 0; i < header->count; i++) {
        memcpy(out, header->fields[i].p, (size_t)header->fields[i].n);
        out += header->fields[i].n;
    }
    return out;
}

/* The encoded size of a length-delimited field of `size` bytes (its tag is one byte). */
static Py_ssize_t framed(Py_ssize_t size) { return 1 + varint_size((uint64_t)size) + size; }

/* The run of a group's spans from `from` (before `limit`) under one scope: the size of its
 * ScopeSpans; *end is set past the run. */
static Py_ssize_t scope_run(const Group *group, Py_ssize_t from, Py_ssize_t limit, const Header *scopes,
                            Py_ssize_t *end) {
    Py_ssize_t scope = group->spans[from].scope;
    Py_ssize_t size = header_size(&scopes[scope]);
    Py_ssize_t i = from;
    for (; i < limit && group->spans[i].scope == scope; i++) size += framed(group->spans[i].span.n);
    *end = i;
    return size;
}

/* The run of a group's spans from `from` under one resource: the size of its ResourceSpans; *end is
 * set past the run. Spans are in request order, so runs of one resource / one scope are adjacent. */
static Py_ssize_t resource_run(const Group *group, Py_ssize_t from, const Header *resources, const Header *scopes,
                               Py_ssize_t *end) {
    Py_ssize_t resource = group->spans[from].resource;
    Py_ssize_t size = header_size(&resources[resource]);
    Py_ssize_t i = from;
    while (i < group->count && group->spans[i].resource == resource) {
        size += framed(scope_run(group, i, group->count, scopes, &i));
    }
    *end = i;
    return size;
}

/* The payload of one group: its spans under copies of their resources' and scopes' fields. */
static PyObject *group_payload(const Group *group, const Header *resources, const Header *scopes) {
    Py_ssize_t total = 0, end;
    for (Py_ssize_t i = 0; i < group->count; i = end) total += framed(resource_run(group, i, resources, scopes, &end));
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL) return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(payload);
    for (Py_ssize_t i = 0; i < group->count;) {
        Py_ssize_t resource_end;
        Py_ssize_t resource_size = resource_run(group, i, resources, scopes, &resource_end);
        *out++ = 0x0a; /* ExportTraceServiceRequest.resource_spans */
        out = write_varint(out, (uint64_t)resource_size);
        out = write_header(out, &resources[group->spans[i].resource]);
        while (i < resource_end) {
            Py_ssize_t scope_end;
            Py_ssize_t scope_size = scope_run(group, i, resource_end, scopes, &scope_end);
            *out++ = 0x12; /* ResourceSpans.scope_spans */
            out = write_varint(out, (uint64_t)scope_size);
            out = write_header(out, &scopes[group->spans[i].scope]);
            for (; i < scope_end; i++) {
                Py_ssize_t n = group->spans[i].span.n;
                *out++ = 0x12; /* ScopeSpans.spans */
                out = write_varint(out, (uint64_t)n);
                memcpy(out, group->spans[i].span.p, (size_t)n);
                out += n;
            }
        }
    }
    return payload;
}

static PyObject *malformed(const char *where) {
    PyErr_Format(PyExc_ValueError, "malformed protobuf in %s", where);
    return NULL;
}

static PyObject *split(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *body = view.buf, *body_end = body + view.len;
    Header *resources = NULL, *scopes = NULL;
    Py_ssize_t resource_count = 0, resource_capacity = 0, scope_count = 0, scope_capacity = 0;
    Groups all = {0};
    Py_ssize_t rejected = 0;
    PyObject *first_rejected = NULL, *result = NULL, *out = NULL;
    Field top, field, inner;
    int status;

    const uint8_t *at = body;
    Py_ssize_t resource_index = -1;
    while ((status = next_field(&at, body_end, &top)) == 1) {
        if (top.number != 1 || top.wire != 2) continue; /* not resource_spans: left out */
        resource_index++;
        GROW(resources, resource_count, resource_capacity, Header);
        Header *resource = &resources[resource_count++];
        memset(resource, 0, sizeof(Header));
        const uint8_t *r = top.value.p, *r_end = r + top.value.n;
        Py_ssize_t scope_in_resource = -1;
        while ((status = next_field(&r, r_end, &field)) == 1) {
            if (!(field.number == 2 && field.wire == 2)) { /* resource, schema_url, unknown: kept */
                GROW(resource->fields, resource->count, resource->capacity, Slice);
                resource->fields[resource->count++] = field.whole;
                continue;
            }
            scope_in_resource++;
            GROW(scopes, scope_count, scope_capacity, Header);
            Py_ssize_t scope_index = scope_count;
            Header *scope = &scopes[scope_count++];
            memset(scope, 0, sizeof(Header));
            const uint8_t *s = field.value.p, *s_end = s + field.value.n;
            Py_ssize_t span_in_scope = -1;
            while ((status = next_field(&s, s_end, &inner)) == 1) {
                if (!(inner.number == 2 && inner.wire == 2)) { /* scope, schema_url, unknown: kept */
                    scope = &scopes[scope_index];
                    GROW(scope->fields, scope->count, scope->capacity, Slice);
                    scope->fields[scope->count++] = inner.whole;
                    continue;
                }
                span_in_scope++;
                Slice trace_id = {NULL, 0}, span_id = {NULL, 0}, parent_id = {NULL, 0};
                uint32_t flags = 0;
                const uint8_t *f = inner.value.p, *f_end = f + inner.value.n;
                Field sf;
                while ((status = next_field(&f, f_end, &sf)) == 1) { /* the last of a field wins */
                    if (sf.wire == 2 && sf.number == 1) trace_id = sf.value;
                    else if (sf.wire == 2 && sf.number == 2) span_id = sf.value;
                    else if (sf.wire == 2 && sf.number == 4) parent_id = sf.value;
                    else if (sf.wire == 5 && sf.number == 16) flags = (uint32_t)sf.scalar;
                }
                if (status < 0) {
                    malformed("a span");
                    goto done;
                }
                if (bad_ids(trace_id, span_id, parent_id)) {
                    if (rejected++ == 0) {
                        first_rejected = Py_BuildValue(
                            "(y#y#y#)", trace_id.p ? (const char *)trace_id.p : "", trace_id.n,
                            span_id.p ? (const char *)span_id.p : "", span_id.n,
                            parent_id.p ? (const char *)parent_id.p : "", parent_id.n);
                        if (first_rejected == NULL) goto done;
                    }
                    continue;
                }
                Group *group = group_of(&all, trace_id.p);
                if (group == NULL) goto done;
                GROW(group->spans, group->count, group->capacity, SpanRef);
                group->spans[group->count++] = (SpanRef){resource_count - 1, scope_index, inner.value};
                if (parent_id.n == 0 || (flags & PARENT_IS_REMOTE)) {
                    PyObject *root = Py_BuildValue("(nnnO)", resource_index, scope_in_resource, span_in_scope,
                                                   parent_id.n == 0 ? Py_True : Py_False);
                    if (root == NULL || PyList_Append(group->roots, root) < 0) {
                        Py_XDECREF(root);
                        goto done;
                    }
                    Py_DECREF(root);
                }
            }
            if (status < 0) {
                malformed("a ScopeSpans");
                goto done;
            }
        }
        if (status < 0) {
            malformed("a ResourceSpans");
            goto done;
        }
    }
    if (status < 0) {
        malformed("the request");
        goto done;
    }
    out = PyList_New(all.count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < all.count; i++) {
        Group *group = &all.groups[i];
        PyObject *payload = group_payload(group, resources, scopes);
        if (payload == NULL) goto done;
        PyObject *entry = Py_BuildValue("(y#NnO)", (const char *)group->trace_id, (Py_ssize_t)16, payload,
                                        group->count, group->roots);
        if (entry == NULL) goto done;
        PyList_SET_ITEM(out, i, entry);
    }
    result = Py_BuildValue("(OnO)", out, rejected, first_rejected ? first_rejected : Py_None);
    goto done;
no_memory:
    PyErr_NoMemory();
done:
    Py_XDECREF(out);
    Py_XDECREF(first_rejected);
    for (Py_ssize_t i = 0; i < resource_count; i++) PyMem_Free(resources[i].fields);
    for (Py_ssize_t i = 0; i < scope_count; i++) PyMem_Free(scopes[i].fields);
    PyMem_Free(resources);
    PyMem_Free(scopes);
    groups_free(&all);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"split", split, METH_O, "Cut an ExportTraceServiceRequest into one payload per trace id."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
