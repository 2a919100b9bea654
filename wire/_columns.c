/*
 * Columnar decoding and encoding of a RecordBatch v2's records section (uncompressed).
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
 *
 * encode_records(keys, values, headers, timestamps, base_timestamp) is the reverse for
 * producers: equal-length sequences of keys and values (bytes-like or None), headers
 * (None, or per record None or a sequence of (str, bytes-like or None) pairs) and
 * timestamps (ints), to (records section, largest timestamp). Wrong types raise
 * TypeError naming the record.
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

/* Zigzag varlong (Kafka's signed varint for int64), at most 10 bytes. */
static void put_varlong(growbuf *b, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v >= 0x80) { b->data[b->len++] = (uint8_t)(v | 0x80); v >>= 7; }
    b->data[b->len++] = (uint8_t)v;
}

static int varlong_size(int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* A key, value or header value: (pointer, length), length -1 for None. */
typedef struct { const char *p; Py_ssize_t n; PyObject *owner; } blob;

static int as_blob(PyObject *o, blob *out, Py_ssize_t record, const char *what) {
    out->owner = NULL;
    if (o == Py_None) { out->p = NULL; out->n = -1; return 0; }
    if (PyBytes_Check(o)) { out->p = PyBytes_AS_STRING(o); out->n = PyBytes_GET_SIZE(o); return 0; }
    if (PyByteArray_Check(o)) { out->p = PyByteArray_AS_STRING(o); out->n = PyByteArray_GET_SIZE(o); return 0; }
    if (PyObject_CheckBuffer(o)) {  /* memoryview and friends: copied once */
        out->owner = PyBytes_FromObject(o);
        if (!out->owner) return -1;
        out->p = PyBytes_AS_STRING(out->owner); out->n = PyBytes_GET_SIZE(out->owner);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "record %zd: %s must be bytes or None, not %s", record, what,
                 Py_TYPE(o)->tp_name);
    return -1;
}

static void put_blob(growbuf *b, const blob *x) {
    put_varlong(b, x->n);
    if (x->n > 0) { memcpy(b->data + b->len, x->p, x->n); b->len += x->n; }
}

static Py_ssize_t blob_size(const blob *x) { return varlong_size(x->n) + (x->n > 0 ? x->n : 0); }

/* The headers of one record, encoded into `out` (cleared first). */
static int encode_headers(PyObject *headers, growbuf *out, Py_ssize_t record) {
    out->len = 0;
    if (headers == Py_None) {
        if (grow_reserve(out, 1) < 0) return -1;
        put_varlong(out, 0);
        return 0;
    }
    PyObject *seq = PySequence_Fast(headers, "headers must be a sequence of (key, value) pairs");
    if (!seq) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    if (grow_reserve(out, 10) < 0) goto done;
    put_varlong(out, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
            PyErr_Format(PyExc_TypeError, "record %zd: a header is not a (key, value) pair", record);
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: a header is not a (key, value) pair", record);
            goto done;
        }
        PyObject *name = PySequence_Fast_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "record %zd: header key %R is not a str", record, name);
            goto done;
        }
        Py_ssize_t name_len;
        const char *name_p = PyUnicode_AsUTF8AndSize(name, &name_len);
        if (!name_p) goto done;
        blob value;
        if (as_blob(PySequence_Fast_GET_ITEM(pair, 1), &value, record, "a header value") < 0) goto done;
        blob key = {name_p, name_len, NULL};
        if (grow_reserve(out, blob_size(&key) + blob_size(&value)) == 0) {
            put_blob(out, &key);
            put_blob(out, &value);
        }
        Py_XDECREF(value.owner);
        if (PyErr_Occurred()) goto done;
    }
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static PyObject *encode_records(PyObject *self, PyObject *args) {
    PyObject *keys_in, *values_in, *headers_in, *timestamps_in;
    long long base_timestamp;
    if (!PyArg_ParseTuple(args, "OOOOL", &keys_in, &values_in, &headers_in, &timestamps_in,
                          &base_timestamp))
        return NULL;
    PyObject *keys = PySequence_Fast(keys_in, "keys must be a sequence");
    PyObject *values = keys ? PySequence_Fast(values_in, "values must be a sequence") : NULL;
    PyObject *timestamps = values ? PySequence_Fast(timestamps_in, "timestamps must be a sequence") : NULL;
    PyObject *headers = NULL;
    if (timestamps && headers_in != Py_None)
        headers = PySequence_Fast(headers_in, "headers must be a sequence or None");
    growbuf out = {0}, header_buf = {0};
    PyObject *result = NULL;
    if (!timestamps || (headers_in != Py_None && !headers)) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(values) != n || PySequence_Fast_GET_SIZE(timestamps) != n ||
        (headers && PySequence_Fast_GET_SIZE(headers) != n)) {
        PyErr_SetString(PyExc_ValueError, "keys, values, headers and timestamps differ in length");
        goto done;
    }
    int64_t max_timestamp = base_timestamp;
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow = 0;
        long long ts = PyLong_AsLongLongAndOverflow(PySequence_Fast_GET_ITEM(timestamps, i), &overflow);
        if (ts == -1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "record %zd: the timestamp is not an int", i);
            goto done;
        }
        if (overflow) { PyErr_Format(PyExc_ValueError, "record %zd: timestamp out of range", i); goto done; }
        if (ts > max_timestamp) max_timestamp = ts;
        blob key, value;
        if (as_blob(PySequence_Fast_GET_ITEM(keys, i), &key, i, "the key") < 0) goto done;
        if (as_blob(PySequence_Fast_GET_ITEM(values, i), &value, i, "the value") < 0) {
            Py_XDECREF(key.owner);
            goto done;
        }
        int bad = encode_headers(headers ? PySequence_Fast_GET_ITEM(headers, i) : Py_None, &header_buf, i);
        int64_t delta = 0;
        if (bad == 0 && __builtin_sub_overflow((int64_t)ts, (int64_t)base_timestamp, &delta)) {
            PyErr_Format(PyExc_ValueError, "record %zd: timestamp delta does not fit a varlong", i);
            bad = -1;
        }
        if (bad == 0) {
            Py_ssize_t body = 1 + varlong_size(delta) + varlong_size(i) + blob_size(&key) +
                              blob_size(&value) + header_buf.len;
            bad = grow_reserve(&out, varlong_size(body) + body);
            if (bad == 0) {
                put_varlong(&out, body);
                out.data[out.len++] = 0;  /* attributes */
                put_varlong(&out, delta);
                put_varlong(&out, i);
                put_blob(&out, &key);
                put_blob(&out, &value);
                memcpy(out.data + out.len, header_buf.data, header_buf.len);
                out.len += header_buf.len;
            }
        }
        Py_XDECREF(key.owner);
        Py_XDECREF(value.owner);
        if (bad) goto done;
    }
    PyObject *section = PyBytes_FromStringAndSize((const char *)out.data, out.len);
    if (section) {
        result = Py_BuildValue("(NL)", section, (long long)max_timestamp);
    }
done:
    PyMem_Free(out.data);
    PyMem_Free(header_buf.data);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(timestamps);
    Py_XDECREF(headers);
    return result;
}

static PyMethodDef methods[] = {
    {"murmur2_positive", murmur2_positive, METH_VARARGS,
     "murmur2_positive(key) -> Kafka's murmur2 hash of key, masked to 31 bits"},
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(data, count, base_offset, base_timestamp, with_headers) -> column buffers"},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(keys, values, headers, timestamps, base_timestamp) -> (section, max timestamp)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns",
                                    "Columnar decoding and encoding of Kafka record batches.", -1, methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
