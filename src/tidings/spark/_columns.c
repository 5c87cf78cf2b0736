/* The compiled fast path of a Spark task's decoding (tidings/spark/arrow.py): event records, as a
 * bulk read delivers them, straight into the buffers of Arrow columns.
 *
 * Theory of operation. A read's records come either as a SPAN (whole log records: a 16-byte
 * header, then the body; storage/record.py; a batch record's body holds many events, cut out by its
 * table of ends) or as RECORDS (one msgpack array of bodies). A body is
 * the msgpack array [pubend, tick, channel, attributes, service, instance, payload], with `true` or
 * `false` after it when the source's authentication is stamped (absent: false). That is
 * `EventRecord` of core/event.py, the record's one definition; this file reads its fields in that
 * order with its own code, and tests/unit/test_spark_columns.py holds this list and the two
 * lengths below equal to it.
 * `decode` walks the bytes once and appends every field to a growable buffer: the ticks as int64,
 * the flags as a bitmap (Arrow's boolean layout), each string or
 * payload to its column's data with an int32 offset, each attribute value rendered as the string
 * the `attributes` map holds (arrow.render_attribute: a float as Python's repr of it, through the
 * same CPython routine). Python then wraps the buffers as Arrow arrays without copying them.
 *
 * It is a fast path, not an authority: it accepts only what the Python decoder accepts and renders
 * exactly as it does, and for anything else (a torn or out-of-order record, a failed checksum,
 * another pubend, a type or encoding outside the usual ones, a repeated attribute name, trailing
 * bytes) it answers None and decides nothing. The caller then runs the Python decoder on the same
 * bytes, which either decodes them (an unusual but valid record) or names the problem. So every
 * error message, and every rule on a peer's data, lives in one place, the Python decoder, and a
 * test holds the two equal on arbitrary input (tests/unit/test_spark_columns.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define HEADER_BYTES 16
#define KEYED 0x80000000u
#define BATCH 0x40000000u /* a batch record: count, the payloads' ends, the payloads (keyed: then the keys') */
#define LENGTH_MASK 0x3fffffffu
#define ATTRIBUTES_MAX 64 /* more in one event: deferred (the repeated-name check is quadratic) */
#define RECORD_FIELDS 7 /* an event body's elements without the authenticated flag (EventRecord) */
#define RECORD_FIELDS_FLAGGED 8 /* and with it */

enum { WANT_ATTRIBUTES = 1, WANT_SERVICE = 2, WANT_INSTANCE = 4, WANT_PAYLOAD = 8, WANT_AUTHENTICATED = 16 };
enum { DEFER = 0, OK = 1, FAILED = -1 }; /* FAILED: a Python exception is set (memory) */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_put(Buf *b, const void *bytes, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *data = PyMem_Realloc(b->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        b->data = data;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, bytes, n);
    b->len += n;
    return OK;
}

/* A variable-width column: int32 offsets (starting with 0) and the bytes they index. */
typedef struct {
    Buf offsets, data;
} Column;

static int column_start(Column *c) {
    int32_t zero = 0;
    return buf_put(&c->offsets, &zero, sizeof zero);
}

static int column_end_value(Column *c) {
    if (c->data.len > INT32_MAX) return DEFER; /* past 32-bit offsets: left to the Python decoder */
    int32_t end = (int32_t)c->data.len;
    return buf_put(&c->offsets, &end, sizeof end);
}

/* A value appended to `c`; none (only checked) when `c` is NULL: a column the read does not build. */
static int column_put(Column *c, const uint8_t *bytes, size_t n) {
    if (c == NULL) return OK;
    int r = buf_put(&c->data, bytes, n);
    return r == OK ? column_end_value(c) : r;
}

enum { CHANNEL, SERVICE, INSTANCE, KEYS, VALUES, PAYLOAD, ATTRIBUTE_OFFSETS, COLUMNS };

typedef struct {
    Buf ticks;
    Buf authenticated; /* one bit per event, least significant first */
    Column col[COLUMNS]; /* ATTRIBUTE_OFFSETS uses only .offsets: pairs per event */
    int32_t pairs;       /* attribute pairs so far */
    Py_ssize_t count;
    int64_t last;
    int want;
} Out;

static void out_free(Out *o) {
    PyMem_Free(o->ticks.data);
    PyMem_Free(o->authenticated.data);
    for (int i = 0; i < COLUMNS; i++) {
        PyMem_Free(o->col[i].offsets.data);
        PyMem_Free(o->col[i].data.data);
    }
}

/* ---- msgpack, big-endian, only the encodings an event's fields use ---- */

typedef struct {
    const uint8_t *p, *end;
} Reader;

static inline int has(const Reader *r, size_t n) { return (size_t)(r->end - r->p) >= n; }
static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static inline uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p + 4) << 32 | le32(p); }

/* A length-prefixed item: `fix` is the fixed-size form's tag and mask (0 when none), `tag8` the
 * first of its 8/16/32-bit forms. */
static int read_sized(Reader *r, uint8_t fix, uint8_t fix_mask, uint8_t tag8, const uint8_t **s, size_t *n) {
    if (!has(r, 1)) return DEFER;
    uint8_t t = r->p[0];
    size_t head;
    uint64_t len;
    if (fix_mask && (t & (uint8_t)~fix_mask) == fix) {
        len = t & fix_mask, head = 1;
    } else if (t == tag8) {
        if (!has(r, 2)) return DEFER;
        len = r->p[1], head = 2;
    } else if (t == tag8 + 1) {
        if (!has(r, 3)) return DEFER;
        len = be16(r->p + 1), head = 3;
    } else if (t == tag8 + 2) {
        if (!has(r, 5)) return DEFER;
        len = be32(r->p + 1), head = 5;
    } else {
        return DEFER;
    }
    if (!has(r, head + len)) return DEFER;
    *s = r->p + head;
    *n = (size_t)len;
    r->p += head + len;
    return OK;
}

/* Whether s[0:n] is well-formed UTF-8 as Python decodes it (no overlong form, surrogate, or code
 * point past U+10FFFF): msgpack's str, which the Python decoder turns into str or refuses. */
static int utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i += 1;
            continue;
        }
        size_t more;
        uint8_t low = 0x80, high = 0xbf; /* the bounds of the second byte */
        if (c >= 0xc2 && c <= 0xdf) more = 1;
        else if (c == 0xe0) more = 2, low = 0xa0;
        else if (c == 0xed) more = 2, high = 0x9f;
        else if (c >= 0xe1 && c <= 0xef) more = 2;
        else if (c == 0xf0) more = 3, low = 0x90;
        else if (c == 0xf4) more = 3, high = 0x8f;
        else if (c >= 0xf1 && c <= 0xf3) more = 3;
        else return 0;
        if (n - i - 1 < more || s[i + 1] < low || s[i + 1] > high) return 0;
        for (size_t j = 2; j <= more; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
        }
        i += more + 1;
    }
    return 1;
}

static int read_str(Reader *r, const uint8_t **s, size_t *n) {
    int ok = read_sized(r, 0xa0, 0x1f, 0xd9, s, n);
    return ok == OK && !utf8(*s, *n) ? DEFER : ok;
}
static int read_bin(Reader *r, const uint8_t **s, size_t *n) { return read_sized(r, 0, 0, 0xc4, s, n); }

/* An array (fix 0x90, 0xdc, 0xdd) or map (fix 0x80, 0xde, 0xdf) header: its element count. */
static int read_count(Reader *r, uint8_t fix, uint8_t tag16, uint32_t *n) {
    if (!has(r, 1)) return DEFER;
    uint8_t t = r->p[0];
    if ((t & 0xf0) == fix) {
        *n = t & 0x0f, r->p += 1;
    } else if (t == tag16 && has(r, 3)) {
        *n = be16(r->p + 1), r->p += 3;
    } else if (t == tag16 + 1 && has(r, 5)) {
        *n = be32(r->p + 1), r->p += 5;
    } else {
        return DEFER;
    }
    return OK;
}

/* An integer, as a sign and a magnitude in two's complement (`value` is the int64 when negative). */
static int read_int(Reader *r, int *negative, uint64_t *value) {
    static const uint8_t width[] = {1, 2, 4, 8};
    if (!has(r, 1)) return DEFER;
    uint8_t t = r->p[0];
    if (t <= 0x7f || t >= 0xe0) {
        *negative = t >= 0xe0;
        *value = *negative ? (uint64_t)(int64_t)(int8_t)t : t;
        r->p += 1;
        return OK;
    }
    if (t < 0xcc || t > 0xd3) return DEFER;
    int is_signed = t >= 0xd0;
    size_t w = width[(t - 0xcc) & 3];
    if (!has(r, 1 + w)) return DEFER;
    const uint8_t *p = r->p + 1;
    uint64_t u = w == 1 ? p[0] : w == 2 ? be16(p) : w == 4 ? be32(p) : be64(p);
    if (is_signed) { /* sign-extend from w bytes */
        int shift = 64 - 8 * (int)w;
        int64_t s = (int64_t)(u << shift) >> shift;
        *negative = s < 0;
        u = (uint64_t)s;
    } else {
        *negative = 0;
    }
    *value = u;
    r->p += 1 + w;
    return OK;
}

/* An attribute value, rendered into `c` as arrow.render_attribute would (NULL: only checked). */
static int put_value(Reader *r, Column *c) {
    if (!has(r, 1)) return DEFER;
    uint8_t t = r->p[0];
    const uint8_t *s;
    size_t n;
    if ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb)) {
        int ok = read_str(r, &s, &n);
        return ok == OK ? column_put(c, s, n) : ok;
    }
    if (t == 0xc2 || t == 0xc3) {
        r->p += 1;
        return t == 0xc3 ? column_put(c, (const uint8_t *)"true", 4) : column_put(c, (const uint8_t *)"false", 5);
    }
    if (t == 0xca || t == 0xcb) {
        double d;
        if (t == 0xca) {
            if (!has(r, 5)) return DEFER;
            uint32_t bits = be32(r->p + 1);
            float f;
            memcpy(&f, &bits, sizeof f);
            d = f, r->p += 5;
        } else {
            if (!has(r, 9)) return DEFER;
            uint64_t bits = be64(r->p + 1);
            memcpy(&d, &bits, sizeof d);
            r->p += 9;
        }
        if (c == NULL) return OK;
        char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* repr(float) */
        if (text == NULL) return FAILED;
        int ok = column_put(c, (const uint8_t *)text, strlen(text));
        PyMem_Free(text);
        return ok;
    }
    int negative;
    uint64_t v;
    int ok = read_int(r, &negative, &v);
    if (ok != OK || c == NULL) return ok;
    char text[24];
    int len = negative ? snprintf(text, sizeof text, "%lld", (long long)(int64_t)v)
                       : snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    return column_put(c, (const uint8_t *)text, (size_t)len);
}

static int put_attributes(Reader *r, Out *o) {
    uint32_t pairs;
    int ok = read_count(r, 0x80, 0xde, &pairs);
    if (ok != OK || pairs > ATTRIBUTES_MAX) return DEFER;
    if (!(o->want & WANT_ATTRIBUTES)) { /* checked as the Python decoder would, not kept */
        for (uint32_t i = 0; i < pairs; i++) {
            const uint8_t *s;
            size_t n;
            if ((ok = read_str(r, &s, &n)) != OK || (ok = put_value(r, NULL)) != OK) return ok;
        }
        return OK;
    }
    Column *keys = &o->col[KEYS];
    size_t first = keys->offsets.len / sizeof(int32_t) - 1; /* this event's first key */
    for (uint32_t i = 0; i < pairs; i++) {
        const uint8_t *s;
        size_t n;
        if ((ok = read_str(r, &s, &n)) != OK || (ok = column_put(keys, s, n)) != OK) return ok;
        const int32_t *offsets = (const int32_t *)keys->offsets.data + first;
        for (uint32_t j = 0; j < i; j++) { /* a dict keeps one value of a repeated name */
            if ((size_t)(offsets[j + 1] - offsets[j]) == n && memcmp(keys->data.data + offsets[j], s, n) == 0) {
                return DEFER;
            }
        }
        if ((ok = put_value(r, &o->col[VALUES])) != OK) return ok;
    }
    o->pairs += (int32_t)pairs;
    return buf_put(&o->col[ATTRIBUTE_OFFSETS].offsets, &o->pairs, sizeof o->pairs);
}

static int put_string(Reader *r, Column *c) {
    const uint8_t *s;
    size_t n;
    int ok = read_str(r, &s, &n);
    return ok != OK ? ok : column_put(c, s, n);
}

/* Column `which` of `o`, or NULL when the read does not build it (`bit` not wanted). */
static Column *built(Out *o, int which, int bit) { return o->want & bit ? &o->col[which] : NULL; }

/* The authenticated flag of event number `o->count`, the 8th element of a body that has one. */
static int put_flag(Out *o, Reader *r, uint32_t fields) {
    int flag = 0;
    if (fields == RECORD_FIELDS_FLAGGED) {
        if (!has(r, 1) || (r->p[0] != 0xc2 && r->p[0] != 0xc3)) return DEFER; /* false, true */
        flag = r->p[0] == 0xc3, r->p += 1;
    }
    if (!(o->want & WANT_AUTHENTICATED)) return OK;
    if (o->count % 8 == 0) {
        uint8_t zero = 0;
        if (buf_put(&o->authenticated, &zero, 1) != OK) return FAILED;
    }
    if (flag) o->authenticated.data[o->count / 8] |= (char)(1u << (o->count % 8));
    return OK;
}

/* One event body read from `r`: of `pubend`, its tick in (after, through] and above the
 * previous one. */
static int put_event(Out *o, Reader *r, const char *pubend, size_t pubend_len, int64_t after, int64_t through) {
    uint32_t fields;
    const uint8_t *s;
    size_t n;
    int negative, ok;
    uint64_t tick;
    if (read_count(r, 0x90, 0xdc, &fields) != OK || (fields != RECORD_FIELDS && fields != RECORD_FIELDS_FLAGGED)) {
        return DEFER;
    }
    if (read_str(r, &s, &n) != OK || n != pubend_len || memcmp(s, pubend, n) != 0) return DEFER;
    if (read_int(r, &negative, &tick) != OK || negative || tick > INT64_MAX) return DEFER;
    if ((int64_t)tick <= after || (int64_t)tick > through || (o->count && (int64_t)tick <= o->last)) return DEFER;
    if ((ok = put_string(r, &o->col[CHANNEL])) != OK) return ok;
    if ((ok = put_attributes(r, o)) != OK) return ok;
    if ((ok = put_string(r, built(o, SERVICE, WANT_SERVICE))) != OK) return ok;
    if ((ok = put_string(r, built(o, INSTANCE, WANT_INSTANCE))) != OK) return ok;
    if ((ok = read_bin(r, &s, &n)) != OK || (ok = column_put(built(o, PAYLOAD, WANT_PAYLOAD), s, n)) != OK) return ok;
    if ((ok = put_flag(o, r, fields)) != OK) return ok;
    int64_t t = (int64_t)tick;
    o->last = t, o->count += 1;
    return buf_put(&o->ticks, &t, sizeof t);
}

/* Whether the `count` u32 ends at `p` never fall (storage/record.py batch_table). */
static int rising(const uint8_t *p, uint64_t count) {
    for (uint64_t i = 1; i < count; i++) {
        if (le32(p + 4 * i) < le32(p + 4 * (i - 1))) return 0;
    }
    return 1;
}

/* The event count of the batch record at `p`, `body` bytes long (1 when too short to hold one). */
static uint64_t batch_count(const uint8_t *p, size_t body) {
    uint32_t count = body < 8 ? 1 : le32(p + HEADER_BYTES);
    return count ? count : 1;
}

/* The events of a checked batch record at `p` (storage/record.py): those of its ticks `first`, ...
 * with after < tick <= through. DEFER when its tables do not account for exactly its body. */
static int put_batch(Out *o, const uint8_t *p, size_t body, uint64_t first, int keyed, const char *pubend,
                     size_t pubend_len, int64_t after, int64_t through) {
    const uint8_t *b = p + HEADER_BYTES;
    if (body < 8) return DEFER;
    uint64_t count = le32(b);
    if (count == 0 || 4 + 4 * count > body || !rising(b + 4, count)) return DEFER;
    const uint8_t *data = b + 4 + 4 * count;
    uint64_t payloads = le32(b + 4 * count); /* the last end */
    if (!keyed) {
        if (4 + 4 * count + payloads != body) return DEFER;
    } else {
        uint64_t keys = 4 + 4 * count + payloads + 4 * count;
        if (keys > body || !rising(b + keys - 4 * count, count) || keys + le32(b + keys - 4) != body) return DEFER;
    }
    uint64_t start = (uint64_t)after + 1 > first ? (uint64_t)after + 1 - first : 0;
    uint64_t stop = (uint64_t)through + 1 - first < count ? (uint64_t)through + 1 - first : count;
    for (uint64_t i = start; i < stop; i++) {
        Reader r = {data + (i ? le32(b + 4 * i) : 0), data + le32(b + 4 + 4 * i)};
        int ok = put_event(o, &r, pubend, pubend_len, after, through);
        if (ok != OK) return ok;
        if (r.p != r.end) return DEFER;
    }
    return OK;
}

/* A span: whole log records (storage/record.py), the events with after < tick <= through decoded. */
static int put_span(Out *o, const uint8_t *p, size_t size, const char *pubend, size_t pubend_len, int64_t after,
                    int64_t through) {
    size_t pos = 0;
    uint64_t previous = 0;
    while (pos < size) {
        if (size - pos < HEADER_BYTES) return DEFER;
        uint32_t length = le32(p + pos), crc = le32(p + pos + 4);
        uint64_t tick = le64(p + pos + 8);
        size_t body = length & LENGTH_MASK, record_end = pos + HEADER_BYTES + body;
        if (body > size - pos - HEADER_BYTES || tick <= previous) return DEFER;
        uint64_t last = length & BATCH ? tick + batch_count(p + pos, body) - 1 : tick;
        if (last < tick) return DEFER; /* past 2**64: never logged */
        if (last > (uint64_t)after) {
            if (tick > (uint64_t)through) break;
            if (crc32(0L, p + pos + 8, (uInt)(record_end - pos - 8)) != crc) return DEFER;
            if (length & BATCH) {
                int ok = put_batch(o, p + pos, body, tick, (length & KEYED) != 0, pubend, pubend_len, after, through);
                if (ok != OK) return ok;
                if (last > (uint64_t)through) break;
                previous = last, pos = record_end;
                continue;
            }
            size_t body_end = record_end;
            if (length & KEYED) { /* the payload, then the key, then the key's u16 length */
                if (body < 2) return DEFER;
                size_t key = (size_t)p[record_end - 2] | (size_t)p[record_end - 1] << 8;
                if (key + 2 > body) return DEFER;
                body_end = record_end - 2 - key;
            }
            Reader r = {p + pos + HEADER_BYTES, p + body_end};
            int ok = put_event(o, &r, pubend, pubend_len, after, through);
            if (ok != OK) return ok;
            if (r.p != r.end) return DEFER;
        }
        previous = last, pos = record_end;
    }
    return OK;
}

/* RECORDS: one msgpack array of exactly `count` bodies, nothing after it. */
static int put_records(Out *o, const uint8_t *p, size_t size, Py_ssize_t count, const char *pubend,
                       size_t pubend_len, int64_t after, int64_t through) {
    Reader r = {p, p + size};
    uint32_t n;
    if (read_count(&r, 0x90, 0xdc, &n) != OK || count <= 0 || (Py_ssize_t)n != count) return DEFER;
    for (uint32_t i = 0; i < n; i++) {
        int ok = put_event(o, &r, pubend, pubend_len, after, through);
        if (ok != OK) return ok;
    }
    return r.p == r.end ? OK : DEFER;
}

static PyObject *as_bytes(const Buf *b) { return PyBytes_FromStringAndSize(b->len ? b->data : "", (Py_ssize_t)b->len); }

PyDoc_STRVAR(decode_doc,
"decode(buffer, count, pubend, after, through, want) -> tuple | None\n\n"
"The events of a SPAN (count < 0: whole log records, those with after < tick <= through) or of\n"
"RECORDS (a msgpack array of `count` event bodies, every tick in (after, through]) of `pubend`,\n"
"as column buffers: (count, last tick, ticks as int64, then offsets and data of channel, service,\n"
"instance, attribute names, attribute values and payload, then the attribute offsets, then the\n"
"authenticated flags as a bitmap). `want` says which of attributes (1), service (2), instance (4),\n"
"payload (8) and authenticated (16) to build. None: not the usual records; the Python decoder decides.");

static PyObject *decode(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    const char *pubend;
    Py_ssize_t pubend_len;
    long long after, through;
    int want;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*ns#LLi", &view, &count, &pubend, &pubend_len, &after, &through, &want)) {
        return NULL;
    }
    Out o;
    memset(&o, 0, sizeof o);
    o.want = want;
    int ok = OK;
    for (int i = 0; i < COLUMNS && ok == OK; i++) ok = column_start(&o.col[i]);
    if (ok == OK && after >= 0) {
        ok = count < 0 ? put_span(&o, view.buf, (size_t)view.len, pubend, (size_t)pubend_len, after, through)
                       : put_records(&o, view.buf, (size_t)view.len, count, pubend, (size_t)pubend_len, after, through);
    } else if (ok == OK) {
        ok = DEFER;
    }
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (ok == OK) { /* (count, last, ticks, then offsets and data of each column, attribute offsets, flags) */
        result = PyTuple_New(3 + 2 * ATTRIBUTE_OFFSETS + 2);
        PyObject **item = result ? &PyTuple_GET_ITEM(result, 0) : NULL;
        if (item != NULL) {
            item[0] = PyLong_FromSsize_t(o.count);
            item[1] = PyLong_FromLongLong(o.last);
            item[2] = as_bytes(&o.ticks);
            for (int i = 0; i < ATTRIBUTE_OFFSETS; i++) {
                item[3 + 2 * i] = as_bytes(&o.col[i].offsets);
                item[4 + 2 * i] = as_bytes(&o.col[i].data);
            }
            item[3 + 2 * ATTRIBUTE_OFFSETS] = as_bytes(&o.col[ATTRIBUTE_OFFSETS].offsets);
            item[4 + 2 * ATTRIBUTE_OFFSETS] = as_bytes(&o.authenticated);
            int missing = 0;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(result); i++) missing |= item[i] == NULL;
            if (missing) Py_CLEAR(result); /* (a tuple frees the items it has) */
        }
    } else if (ok == DEFER) {
        result = Py_NewRef(Py_None);
    }
    out_free(&o);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns", "Event records into Arrow column buffers (tidings/spark/arrow.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
