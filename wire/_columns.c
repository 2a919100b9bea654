/*
 * Columnar decoding of a RecordBatch v2's records section (already decompressed).
 *
 * decode_columns(data, count, base_offset, base_timestamp, with_headers) returns the
 * records as column buffers in Arrow's layouts, so that a reader can build Arrow
 * arrays without creating a Python object per record:
 *   (offsets int64[n], timestamps_us int64[n],
 *    key_offsets int32[n+1], key_data, key_validity bitmap,
 *    value_offsets int32[n+1], value_data, value_validity bitmap,
 *    header_offsets int32[n+1], header_key_offsets int32[h+1], header_key_data,
 *    header_value_offsets int32[h+1], header_value_data, header_value_validity bitmap)
 * The header buffers are empty unless with_headers is true. Bitmaps are LSB-first, a
 * set bit meaning "not null". Malformed input raises ValueError; nothing is read
 * outside `data`, and no allocation exceeds a small multiple of len(data).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cursor;

typedef struct {
    uint8_t *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} growbuf;

static int grow_reserve(growbuf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *data = PyMem_Realloc(b->data, cap);
    if (!data) { PyErr_NoMemory(); return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int grow_append(growbuf *b, const void *src, Py_ssize_t n) {
    if (grow_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int fail(const char *what) {
    PyErr_Format(PyExc_ValueError, "malformed record: %s", what);
    return -1;
}

/* Unsigned LEB128 of at most max_bytes bytes. */
static int read_uvarint(cursor *c, int max_bytes, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end) return fail("truncated varint");
        uint8_t byte = *c->p++;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) { *out = result; return 0; }
        shift += 7;
    }
    return fail("varint too long");
}

static int read_varint(cursor *c, int64_t *out) {
    uint64_t n;
    if (read_uvarint(c, 5, &n) < 0) return -1;
    if (n > 0xFFFFFFFFULL) return fail("varint exceeds 32 bits");
    *out = (int64_t)((int32_t)((uint32_t)(n >> 1) ^ (uint32_t)(-(int32_t)(n & 1))));
    return 0;
}

static int read_varlong(cursor *c, int64_t *out) {
    uint64_t n;
    if (read_uvarint(c, 10, &n) < 0) return -1;
    *out = (int64_t)((n >> 1) ^ (uint64_t)(-(int64_t)(n & 1)));
    return 0;
}

/* A length-prefixed byte field: appends it to data and its end to offsets. */
static int read_field(cursor *c, growbuf *offsets, growbuf *data, growbuf *validity,
                      Py_ssize_t index, int nullable) {
    int64_t len;
    if (read_varint(c, &len) < 0) return -1;
    if (len < 0) {
        if (!nullable || len != -1) return fail("negative length");
    } else {
        if (len > c->end - c->p) return fail("field longer than its record");
        if (len > INT32_MAX - data->len) return fail("column larger than 2 GiB");
        if (grow_append(data, c->p, (Py_ssize_t)len) < 0) return -1;
        c->p += len;
        if (validity) validity->data[index >> 3] |= (uint8_t)(1u << (index & 7));
    }
    int32_t end = (int32_t)data->len;
    return grow_append(offsets, &end, sizeof end);
}

static int bitmap_slot(growbuf *bitmap, Py_ssize_t index) {
    Py_ssize_t need = (index >> 3) + 1;
    if (need > bitmap->len) {
        if (grow_reserve(bitmap, need - bitmap->len) < 0) return -1;
        memset(bitmap->data + bitmap->len, 0, need - bitmap->len);
        bitmap->len = need;
    }
    return 0;
}

static PyObject *as_bytes(growbuf *b) {
    return PyBytes_FromStringAndSize((const char *)(b->data ? b->data : (uint8_t *)""), b->len);
}

enum { OFFSETS, TIMESTAMPS, KEY_OFF, KEY_DATA, KEY_VALID, VAL_OFF, VAL_DATA, VAL_VALID,
       HDR_OFF, HK_OFF, HK_DATA, HV_OFF, HV_DATA, HV_VALID, NBUF };

static PyObject *decode_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_timestamp;
    int with_headers;
    if (!PyArg_ParseTuple(args, "y*nLLp", &view, &count, &base_offset, &base_timestamp, &with_headers))
        return NULL;
    growbuf b[NBUF];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    cursor c = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    int32_t zero = 0;
    Py_ssize_t headers_seen = 0;
    /* every record takes at least 7 bytes, so a count beyond len/7 is forged */
    if (count < 0 || count > view.len / 7 + 1) { fail("record count exceeds the data"); goto done; }
    if (grow_append(&b[KEY_OFF], &zero, 4) < 0 || grow_append(&b[VAL_OFF], &zero, 4) < 0 ||
        grow_append(&b[HDR_OFF], &zero, 4) < 0 || grow_append(&b[HK_OFF], &zero, 4) < 0 ||
        grow_append(&b[HV_OFF], &zero, 4) < 0)
        goto done;
    if (count && (bitmap_slot(&b[KEY_VALID], count - 1) < 0 || bitmap_slot(&b[VAL_VALID], count - 1) < 0))
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, header_count;
        if (read_varint(&c, &length) < 0) goto done;
        if (length < 0 || length > c.end - c.p) { fail("record length outside the data"); goto done; }
        cursor r = {c.p, c.p + length};
        c.p += length;
        if (r.p >= r.end) { fail("empty record"); goto done; }
        r.p++; /* attributes */
        if (read_varlong(&r, &ts_delta) < 0 || read_varint(&r, &off_delta) < 0) goto done;
        int64_t offset = base_offset + off_delta;
        int64_t timestamp_us = (base_timestamp + ts_delta) * 1000;
        if (grow_append(&b[OFFSETS], &offset, 8) < 0 || grow_append(&b[TIMESTAMPS], &timestamp_us, 8) < 0)
            goto done;
        if (read_field(&r, &b[KEY_OFF], &b[KEY_DATA], &b[KEY_VALID], i, 1) < 0 ||
            read_field(&r, &b[VAL_OFF], &b[VAL_DATA], &b[VAL_VALID], i, 1) < 0)
            goto done;
        if (read_varint(&r, &header_count) < 0) goto done;
        if (header_count < 0 || header_count > r.end - r.p) { fail("header count outside the record"); goto done; }
        for (int64_t h = 0; h < header_count; h++) {
            if (with_headers) {
                if (bitmap_slot(&b[HV_VALID], headers_seen) < 0) goto done;
                if (read_field(&r, &b[HK_OFF], &b[HK_DATA], NULL, headers_seen, 0) < 0 ||
                    read_field(&r, &b[HV_OFF], &b[HV_DATA], &b[HV_VALID], headers_seen, 1) < 0)
                    goto done;
                headers_seen++;
            } else {
                int64_t len;
                for (int part = 0; part < 2; part++) {
                    if (read_varint(&r, &len) < 0) goto done;
                    if (len < -1 || (part == 0 && len < 0) || len > r.end - r.p) { fail("header length"); goto done; }
                    if (len > 0) r.p += len;
                }
            }
        }
        if (with_headers) {
            int32_t end = (int32_t)headers_seen;
            if (grow_append(&b[HDR_OFF], &end, 4) < 0) goto done;
        }
        if (r.p != r.end) { fail("record has trailing bytes"); goto done; }
    }
    if (c.p != c.end) { fail("bytes after the last record"); goto done; }
    result = PyTuple_New(NBUF);
    if (!result) goto done;
    for (int k = 0; k < NBUF; k++) {
        PyObject *item = as_bytes(&b[k]);
        if (!item) { Py_CLEAR(result); goto done; }
        PyTuple_SET_ITEM(result, k, item);
    }
done:
    for (int k = 0; k < NBUF; k++) PyMem_Free(b[k].data);
    PyBuffer_Release(&view);
    return result;
}

/* Kafka's murmur2 (the default partitioner's hash), made positive as Kafka does. */
static PyObject *murmur2_positive(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    Py_ssize_t i = 0;
    for (; i + 4 <= length; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m; k ^= k >> 24; k *= m;
        h *= m; h ^= k;
    }
    switch (length - i) {
        case 3: h ^= (uint32_t)data[i + 2] << 16; /* fall through */
        case 2: h ^= (uint32_t)data[i + 1] << 8;  /* fall through */
        case 1: h ^= (uint32_t)data[i]; h *= m;
    }
    h ^= h >> 13; h *= m; h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(h & 0x7fffffff);
}

static PyMethodDef methods[] = {
    {"murmur2_positive", murmur2_positive, METH_VARARGS,
     "murmur2_positive(key) -> Kafka's murmur2 hash of key, masked to 31 bits"},
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(data, count, base_offset, base_timestamp, with_headers) -> column buffers"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns",
                                    "Columnar decoding of Kafka record batches.", -1, methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
