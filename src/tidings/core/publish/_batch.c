/* The compiled fast path of the publish intake (tidings/core/publish/batch.py): a PUBLISH's events,
 * as msgpack decoded them (`encode`) or read in place from the frame's body (`scan`, then
 * `encode_frame`, below), checked and encoded into the records the log keeps, in one pass.
 *
 * Theory of operation. The intake's common PUBLISH is many well-formed events on channels it has
 * validated before, without attributes: each is the list [channel, {}, payload] with a channel
 * known to the intake (a key of its channel cache), an empty map, and a binary payload of at most
 * `size_max` bytes. `encode` checks that of every event and writes each one's record,
 *
 *     [pubend, tick, channel, attributes, service, instance, payload]   (then `true` when the
 *                                                                        source authenticated)
 *
 * byte for byte as msgpack's Packer writes that list (core/event.py `encode_records`: the smallest
 * encoding of each integer, str8 for strings of 32 to 255 bytes, bin for the payload), at ticks
 * `first`, `first + 1`, ... It returns (records, deliveries, size, channel, ticks, table): the records
 * (bytes, in tick order), the (tick, channel, attributes, record) tuples the pubend holds until the
 * batch is durable, the records' bytes in all, the channel when every event has the same one (else
 * None), the ticks (int objects, one per record: the ACK's and the columns' own), and the table of the
 * batch record the log keeps them in (storage/record.py: u32 count, then u32 where each record ends),
 * written as the records are, so the log writer only joins it with them and checksums the whole. A
 * batch on one channel gets no deliveries (None): the pubend holds its two columns instead
 * (core/publish/pubend.py PendingBatch), so its events cost no tuple at all; the Append carries the
 * same two columns and the table (batch.py RecordRun), with no (tick, record) pair per event.
 *
 * It is a fast path, not an authority: for any event outside that shape (attributes, a channel not
 * known yet, a wrong type, a payload too large, a string that is not UTF-8) it answers None and
 * decides nothing, and the intake runs its Python checks, which refuse or accept the event and say
 * why. The Python form of this function (batch.py `encode_python`) gives the same answer for every
 * input, and a Hypothesis test holds the two equal (tests/unit/test_publish_batch.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* msgpack's encoding of a string's header, of `n` bytes (use_bin_type: str8 exists) */
static Py_ssize_t str_header(unsigned char *at, Py_ssize_t n) {
    if (n < 32) { at[0] = (unsigned char)(0xa0 | n); return 1; }
    if (n < 0x100) { at[0] = 0xd9; at[1] = (unsigned char)n; return 2; }
    if (n < 0x10000) { at[0] = 0xda; at[1] = (unsigned char)(n >> 8); at[2] = (unsigned char)n; return 3; }
    at[0] = 0xdb;
    for (int i = 0; i < 4; i++) at[1 + i] = (unsigned char)((uint64_t)n >> (24 - 8 * i));
    return 5;
}

static Py_ssize_t str_header_bytes(Py_ssize_t n) { return n < 32 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5; }
static Py_ssize_t bin_header_bytes(Py_ssize_t n) { return n < 0x100 ? 2 : n < 0x10000 ? 3 : 5; }

static Py_ssize_t bin_header(unsigned char *at, Py_ssize_t n) {
    if (n < 0x100) { at[0] = 0xc4; at[1] = (unsigned char)n; return 2; }
    if (n < 0x10000) { at[0] = 0xc5; at[1] = (unsigned char)(n >> 8); at[2] = (unsigned char)n; return 3; }
    at[0] = 0xc6;
    for (int i = 0; i < 4; i++) at[1 + i] = (unsigned char)((uint64_t)n >> (24 - 8 * i));
    return 5;
}

/* a non-negative integer, as msgpack packs it: the smallest of fixint, uint8 ... uint64 */
static Py_ssize_t uint_packed(unsigned char *at, uint64_t v) {
    int n;
    if (v < 0x80) { at[0] = (unsigned char)v; return 1; }
    if (v < 0x100) { at[0] = 0xcc; n = 1; }
    else if (v < 0x10000) { at[0] = 0xcd; n = 2; }
    else if (v < 0x100000000ULL) { at[0] = 0xce; n = 4; }
    else { at[0] = 0xcf; n = 8; }
    for (int i = 0; i < n; i++) at[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    return 1 + n;
}

/* a str packed into `buf` (at most 5 + its UTF-8 bytes); -1 when it is not UTF-8 (error cleared) */
static Py_ssize_t str_packed(PyObject *s, unsigned char **buf) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) { PyErr_Clear(); return -1; }
    unsigned char *out = PyMem_Malloc((size_t)n + 5);
    if (out == NULL) { PyErr_NoMemory(); return -2; }
    Py_ssize_t h = str_header(out, n);
    memcpy(out + h, utf8, (size_t)n);
    *buf = out;
    return h + n;
}

/* What every record of a batch shares: its head (the array's header and the pubend) and its source
 * (service, instance), packed once. */
typedef struct {
    unsigned char *head, *source;
    Py_ssize_t head_n, source_n;
    int authenticated;
} Prefix;

static void prefix_free(Prefix *p) {
    PyMem_Free(p->head);
    PyMem_Free(p->source);
    p->head = p->source = NULL;
}

/* 1 packed; 0 a string is not UTF-8 (nothing kept, no error set); -1 an error */
static int prefix_make(Prefix *p, PyObject *pubend, PyObject *service, PyObject *instance, int authenticated) {
    unsigned char *pub = NULL, *svc = NULL, *inst = NULL;
    Py_ssize_t pub_n, svc_n = -1, inst_n = -1;
    int ok = 0;
    p->head = p->source = NULL;
    p->authenticated = authenticated;
    pub_n = str_packed(pubend, &pub);
    if (pub_n >= 0) svc_n = str_packed(service, &svc);
    if (svc_n >= 0) inst_n = str_packed(instance, &inst);
    if (pub_n == -2 || svc_n == -2 || inst_n == -2) { ok = -1; goto done; }
    if (inst_n < 0) goto done; /* not UTF-8 */
    p->head_n = 1 + pub_n;
    p->source_n = svc_n + inst_n;
    p->head = PyMem_Malloc((size_t)p->head_n);
    p->source = PyMem_Malloc((size_t)p->source_n);
    if (p->head == NULL || p->source == NULL) { prefix_free(p); PyErr_NoMemory(); ok = -1; goto done; }
    p->head[0] = authenticated ? 0x98 : 0x97; /* fixarray of 8 (with the flag) or 7 */
    memcpy(p->head + 1, pub, (size_t)pub_n);
    memcpy(p->source, svc, (size_t)svc_n);
    memcpy(p->source + svc_n, inst, (size_t)inst_n);
    ok = 1;
done:
    PyMem_Free(pub);
    PyMem_Free(svc);
    PyMem_Free(inst);
    return ok;
}

/* The batch being built: the records, the deliveries (NULL for a batch on one channel), the ticks
 * (int objects, the ACK's), the records' bytes in all, and the table of the batch record the log
 * keeps them in (storage/record.py: u32 count, then u32 where each record ends, little-endian),
 * written as the records are: NULL when the batch record's body would pass BATCH_BYTES_MAX. */
typedef struct {
    PyObject *records, *deliveries, *ticks, *table;
    Py_ssize_t size;
} Built;

#define BATCH_BYTES_MAX ((Py_ssize_t)((1 << 30) - 1)) /* storage/record.py BATCH_BYTES_MAX */

static void built_free(Built *b) {
    Py_CLEAR(b->records);
    Py_CLEAR(b->deliveries);
    Py_CLEAR(b->ticks);
    Py_CLEAR(b->table);
}

static void put_u32le(unsigned char *at, uint32_t v) {
    for (int i = 0; i < 4; i++) at[i] = (unsigned char)(v >> (8 * i));
}

static int built_make(Built *b, Py_ssize_t count, int uniform) {
    b->size = 0;
    b->records = PyList_New(count);
    b->ticks = PyList_New(count);
    b->deliveries = uniform ? NULL : PyList_New(count);
    b->table = count <= (BATCH_BYTES_MAX - 4) / 4 ? PyBytes_FromStringAndSize(NULL, 4 + 4 * count) : NULL;
    if (b->table != NULL) put_u32le((unsigned char *)PyBytes_AS_STRING(b->table), (uint32_t)count);
    return b->records == NULL || b->ticks == NULL || (!uniform && b->deliveries == NULL) || PyErr_Occurred() ? -1 : 0;
}

/* (records, deliveries or None, size, channel or None, ticks, table or None), the references of `b`
 * dropped; the table is None when the body (table and records) passes BATCH_BYTES_MAX */
static PyObject *built_result(Built *b, PyObject *channel) {
    int fits = b->table != NULL && PyBytes_GET_SIZE(b->table) + b->size <= BATCH_BYTES_MAX;
    PyObject *result = Py_BuildValue("(OOnOOO)", b->records, b->deliveries ? b->deliveries : Py_None, b->size,
                                     channel ? channel : Py_None, b->ticks, fits ? b->table : Py_None);
    built_free(b);
    return result;
}

/* One event's record at `tick`, written byte for byte as msgpack's Packer writes it, into slot `i`
 * of the batch: its record, its tick, its end in the table, and, when the batch keeps deliveries,
 * its (tick, channel, attributes, record) tuple (`ch` and `at` the event's channel and attributes).
 * 0, or -1 on error. */
static int emit(const Prefix *p, Built *b, Py_ssize_t i, uint64_t tick, const char *ch_utf8, Py_ssize_t ch_n,
                const char *pl, Py_ssize_t pl_n, PyObject *ch, PyObject *at) {
    unsigned char scratch[9];
    Py_ssize_t tick_n = uint_packed(scratch, tick);
    Py_ssize_t n = p->head_n + tick_n + str_header_bytes(ch_n) + ch_n + 1 + p->source_n + bin_header_bytes(pl_n) + pl_n
                   + (p->authenticated ? 1 : 0);
    PyObject *rec = PyBytes_FromStringAndSize(NULL, n);
    if (rec == NULL) return -1;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(rec);
    memcpy(w, p->head, (size_t)p->head_n); w += p->head_n;
    memcpy(w, scratch, (size_t)tick_n); w += tick_n;
    w += str_header(w, ch_n);
    memcpy(w, ch_utf8, (size_t)ch_n); w += ch_n;
    *w++ = 0x80; /* the empty map */
    memcpy(w, p->source, (size_t)p->source_n); w += p->source_n;
    w += bin_header(w, pl_n);
    memcpy(w, pl, (size_t)pl_n); w += pl_n;
    if (p->authenticated) *w++ = 0xc3;
    assert(w - (unsigned char *)PyBytes_AS_STRING(rec) == n);
    b->size += n;
    if (b->table != NULL && b->size <= BATCH_BYTES_MAX) /* (past it the table is not used: built_result) */
        put_u32le((unsigned char *)PyBytes_AS_STRING(b->table) + 4 + 4 * i, (uint32_t)b->size);
    PyObject *t = PyLong_FromUnsignedLongLong(tick);
    if (t == NULL) { Py_DECREF(rec); return -1; }
    PyList_SET_ITEM(b->records, i, rec); /* (the lists hold the references made here) */
    PyList_SET_ITEM(b->ticks, i, t);
    if (b->deliveries != NULL) {
        PyObject *delivery = PyTuple_Pack(4, t, ch, at, rec);
        if (delivery == NULL) return -1;
        /* It cannot be in a reference cycle (a tick, bytes, a str and an empty map that the
           collector does not track): untracked, as the collector would leave it after its first
           look, so the young collections do not walk the thousands a batch keeps until durable. */
        if (!PyObject_IS_GC(at) || !PyObject_GC_IsTracked(at)) PyObject_GC_UnTrack(delivery);
        PyList_SET_ITEM(b->deliveries, i, delivery);
    }
    return 0;
}

PyDoc_STRVAR(encode_doc,
"encode(events, known, size_max, pubend, first, service, instance, authenticated)\n"
"-> (records, deliveries, size, channel, ticks, table) or None (see batch.py encode_python).");

static PyObject *encode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *events, *known, *pubend, *service, *instance;
    Py_ssize_t size_max;
    unsigned long long first;
    int authenticated;
    if (!PyArg_ParseTuple(args, "O!O!nUKUUp", &PyList_Type, &events, &PyDict_Type, &known, &size_max,
                          &pubend, &first, &service, &instance, &authenticated))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(events);
    if (count == 0) Py_RETURN_NONE;
    if (first > (unsigned long long)INT64_MAX - (unsigned long long)count) Py_RETURN_NONE;
    /* the checks, all of them before anything is built: one event off the path sends the whole
       PUBLISH to the Python checks */
    PyObject *same = NULL; /* the first event's channel */
    int uniform = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        if (!PyList_CheckExact(ev) || PyList_GET_SIZE(ev) != 3) Py_RETURN_NONE;
        PyObject *ch = PyList_GET_ITEM(ev, 0), *at = PyList_GET_ITEM(ev, 1), *pl = PyList_GET_ITEM(ev, 2);
        if (!PyUnicode_CheckExact(ch) || !PyDict_CheckExact(at) || PyDict_GET_SIZE(at) != 0
                || !PyBytes_CheckExact(pl) || PyBytes_GET_SIZE(pl) > size_max || PyBytes_GET_SIZE(pl) > 0xffffffffLL)
            Py_RETURN_NONE;
        int found = PyDict_Contains(known, ch);
        if (found < 0) return NULL;
        if (!found) Py_RETURN_NONE;
        if (same == NULL) same = ch;
        else if (uniform && ch != same) {
            int eq = PyUnicode_Compare(ch, same) == 0;
            if (PyErr_Occurred()) return NULL;
            uniform = eq;
        }
    }
    Prefix p;
    int made = prefix_make(&p, pubend, service, instance, authenticated);
    if (made <= 0) {
        if (made < 0) return NULL;
        Py_RETURN_NONE;
    }
    Built b = {NULL, NULL, NULL, NULL, 0};
    if (built_make(&b, count, uniform) < 0) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        PyObject *ch = PyList_GET_ITEM(ev, 0), *at = PyList_GET_ITEM(ev, 1), *pl = PyList_GET_ITEM(ev, 2);
        Py_ssize_t ch_n;
        const char *ch_utf8 = PyUnicode_AsUTF8AndSize(ch, &ch_n);
        if (ch_utf8 == NULL) { /* not UTF-8: the Python checks say so */
            PyErr_Clear();
            built_free(&b);
            prefix_free(&p);
            Py_RETURN_NONE;
        }
        if (emit(&p, &b, i, (uint64_t)first + (uint64_t)i, ch_utf8, ch_n, PyBytes_AS_STRING(pl), PyBytes_GET_SIZE(pl),
                 ch, at) < 0)
            goto fail;
    }
    prefix_free(&p);
    return built_result(&b, uniform ? same : NULL);
fail:
    built_free(&b);
    prefix_free(&p);
    return NULL;
}

/* ---- a PUBLISH frame's body read in place ------------------------------------------------------
 *
 * The common PUBLISH, as the client library packs it, is the msgpack array
 *
 *     [2, seq, [[channel, {}, payload], ...]]          (fixarray 3; PUBLISH is type 2)
 *
 * `scan` says whether a frame body is exactly that, read with no Python object made: an unsigned
 * seq (fixint or uint 8-64), at least one event, each a fixarray of 3 holding a str of ASCII bytes,
 * the empty fixmap and a bin, and nothing after the last. msgpack decodes such a body without error to the list of the
 * same values, so a message the decoder answers from `scan` (core/wire/decoders.py) is the message
 * msgpack would give; any other body, valid or not, is left to msgpack and the Python checks.
 * `encode_frame` then does for those events what `encode` does for the decoded list, reading them
 * from the body, with the same checks (a known channel, a payload within `size_max`). */

typedef struct {
    const unsigned char *p, *end;
} Reader;

/* `n` bytes big-endian at the reader, as an unsigned integer; 0 when they are not there */
static int take_be(Reader *r, int n, uint64_t *v) {
    if (r->end - r->p < n) return 0;
    uint64_t x = 0;
    for (int i = 0; i < n; i++) x = (x << 8) | r->p[i];
    r->p += n;
    *v = x;
    return 1;
}

static int take_uint(Reader *r, uint64_t *v) {
    if (r->p >= r->end) return 0;
    unsigned char b = *r->p++;
    if (b < 0x80) { *v = b; return 1; }
    if (b >= 0xcc && b <= 0xcf) return take_be(r, 1 << (b - 0xcc), v);
    return 0;
}

static int take_array(Reader *r, uint64_t *n) {
    if (r->p >= r->end) return 0;
    unsigned char b = *r->p++;
    if ((b & 0xf0) == 0x90) { *n = b & 0x0f; return 1; }
    if (b == 0xdc) return take_be(r, 2, n);
    if (b == 0xdd) return take_be(r, 4, n);
    return 0;
}

/* a str or a bin (`str` says which) of `*n` bytes at `*at`, the reader past it */
static int take_span(Reader *r, int str, const unsigned char **at, Py_ssize_t *n) {
    if (r->p >= r->end) return 0;
    unsigned char b = *r->p++;
    unsigned char sized = str ? 0xd9 : 0xc4; /* str8 / bin8, then the 16- and 32-bit lengths */
    uint64_t len;
    if (str && (b & 0xe0) == 0xa0) len = b & 0x1f;
    else if (b < sized || b > sized + 2 || !take_be(r, 1 << (b - sized), &len)) return 0;
    if (len > (uint64_t)(r->end - r->p)) return 0;
    *at = r->p;
    *n = (Py_ssize_t)len;
    r->p += len;
    return 1;
}

/* one event [channel, {}, payload]: 1, the reader past it; 0 when it is anything else */
static int take_event(Reader *r, const unsigned char **ch, Py_ssize_t *ch_n, const unsigned char **pl,
                      Py_ssize_t *pl_n) {
    if (r->p >= r->end || *r->p++ != 0x93 || !take_span(r, 1, ch, ch_n)) return 0;
    for (Py_ssize_t i = 0; i < *ch_n; i++)
        if ((*ch)[i] & 0x80) return 0; /* ASCII only: any str is UTF-8 checked by msgpack */
    if (r->p >= r->end || *r->p++ != 0x80) return 0;
    return take_span(r, 0, pl, pl_n);
}

PyDoc_STRVAR(scan_doc,
"scan(body, kind) -> (seq, at, count) or None: whether `body` (bytes) is [kind, seq, [[channel, {}, payload], ...]]\n"
"(ASCII channels, at least one event, nothing after it), with its seq, where its events start and how many.");

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *body;
    int kind;
    if (!PyArg_ParseTuple(args, "Oi", &body, &kind)) return NULL;
    /* bytes only: the Publish keeps the body, which must not change under it (not a view of a buffer) */
    if (!PyBytes_CheckExact(body) || kind < 0 || kind >= 0x80) Py_RETURN_NONE;
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(body);
    Reader r = {start, start + PyBytes_GET_SIZE(body)};
    uint64_t seq, count;
    if (r.end - r.p < 2 || r.p[0] != 0x93 || r.p[1] != kind) Py_RETURN_NONE;
    r.p += 2;
    if (!take_uint(&r, &seq) || !take_array(&r, &count) || count == 0) Py_RETURN_NONE;
    Py_ssize_t at = r.p - start;
    for (uint64_t i = 0; i < count; i++) {
        const unsigned char *ch, *pl;
        Py_ssize_t ch_n, pl_n;
        if (!take_event(&r, &ch, &ch_n, &pl, &pl_n)) Py_RETURN_NONE;
    }
    if (r.p != r.end) Py_RETURN_NONE;
    return Py_BuildValue("(Knn)", (unsigned long long)seq, at, (Py_ssize_t)count);
}

PyDoc_STRVAR(encode_frame_doc,
"encode_frame(body, at, count, known, size_max, pubend, first, service, instance, authenticated)\n"
"-> (records, deliveries, size, channel, ticks, table) or None: `encode` of the `count` events at `at` of a body `scan` took.");

static PyObject *encode_frame(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer body;
    PyObject *known, *pubend, *service, *instance;
    Py_ssize_t at, count, size_max;
    unsigned long long first;
    int authenticated;
    if (!PyArg_ParseTuple(args, "y*nnO!nUKUUp", &body, &at, &count, &PyDict_Type, &known, &size_max, &pubend, &first,
                          &service, &instance, &authenticated))
        return NULL;
    const unsigned char *start = (const unsigned char *)body.buf, *end = start + body.len, *ch, *pl, *last = NULL;
    Py_ssize_t ch_n, pl_n, last_n = -1;
    PyObject *result = NULL, *same = NULL, *name = NULL;
    Prefix p = {NULL, NULL, 0, 0, 0};
    Built b = {NULL, NULL, NULL, NULL, 0};
    Reader r = {start, end};
    int uniform = 1, made;
    if (count <= 0 || at < 0 || at > body.len) goto none;
    if (first > (unsigned long long)INT64_MAX - (unsigned long long)count) goto none;
    /* the checks, all of them before anything is built: each run of events on one channel looks
       its channel up once (`same` is the first event's) */
    r.p = start + at;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!take_event(&r, &ch, &ch_n, &pl, &pl_n)) goto none;
        if (pl_n > size_max || pl_n > 0xffffffffLL) goto none;
        if (ch_n == last_n && memcmp(ch, last, (size_t)ch_n) == 0) continue;
        name = PyUnicode_DecodeASCII((const char *)ch, ch_n, NULL);
        if (name == NULL) goto fail;
        int found = PyDict_Contains(known, name);
        if (found <= 0) { if (found < 0) goto fail; goto none; }
        if (same == NULL) same = name;
        else { uniform = 0; Py_DECREF(name); }
        name = NULL;
        last = ch;
        last_n = ch_n;
    }
    if (r.p != end) goto none;
    made = prefix_make(&p, pubend, service, instance, authenticated);
    if (made <= 0) { if (made < 0) goto fail; goto none; }
    if (built_make(&b, count, uniform) < 0) goto fail;
    r.p = start + at;
    last_n = -1; /* `name`: the channel of the run being built, `last` its bytes */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!take_event(&r, &ch, &ch_n, &pl, &pl_n)) { /* (read above: bytes do not change) */
            PyErr_SetString(PyExc_SystemError, "a PUBLISH body changed while it was read");
            goto fail;
        }
        PyObject *attributes = NULL;
        if (!uniform) { /* the deliveries hold each event's channel, and a map of its own as msgpack's */
            if (ch_n != last_n || memcmp(ch, last, (size_t)ch_n) != 0) {
                Py_XSETREF(name, PyUnicode_DecodeASCII((const char *)ch, ch_n, NULL));
                if (name == NULL) goto fail;
                last = ch;
                last_n = ch_n;
            }
            attributes = PyDict_New();
            if (attributes == NULL) goto fail;
        }
        int e = emit(&p, &b, i, (uint64_t)first + (uint64_t)i, (const char *)ch, ch_n, (const char *)pl, pl_n,
                     uniform ? same : name, attributes);
        Py_XDECREF(attributes);
        if (e < 0) goto fail;
    }
    result = built_result(&b, uniform ? same : NULL); /* (b emptied) */
    goto fail;
none:
    result = Py_None;
    Py_INCREF(result);
fail: /* result NULL: an error is set */
    built_free(&b);
    Py_XDECREF(name);
    Py_XDECREF(same);
    prefix_free(&p);
    PyBuffer_Release(&body);
    return result;
}

/* ---- the ACK of a run ---------------------------------------------------------------------------
 *
 * A PUBLISH logged whole is acknowledged with its consecutive ticks: the frame (a u32 big-endian
 * length, then the msgpack array [ACK, seq, pubend, [first, first + 1, ...]]) written byte for byte as
 * core/wire/messages.py `ack` writes it (msgpack's smallest integer forms, str8 for a pubend of 32 to
 * 255 bytes), without an int object per tick or msgpack's pass over them. */

PyDoc_STRVAR(ack_run_doc,
"ack_run(kind, seq, pubend, first, count) -> bytes: the ACK frame [kind, seq, pubend, [first, ..., first + count - 1]]\n"
"as messages.ack packs it (kind < 128, seq, first and count unsigned, first + count within 2**64).");

static PyObject *ack_run(PyObject *self, PyObject *args) {
    (void)self;
    int kind;
    unsigned long long seq, first;
    Py_ssize_t count;
    PyObject *pubend;
    if (!PyArg_ParseTuple(args, "iKUKn", &kind, &seq, &pubend, &first, &count)) return NULL;
    if (kind < 0 || kind >= 0x80 || count < 0 || count > 0xffffffffLL
            || (count > 0 && first > UINT64_MAX - (unsigned long long)(count - 1))) {
        PyErr_SetString(PyExc_ValueError, "ack_run: out of range");
        return NULL;
    }
    Py_ssize_t pub_n;
    const char *pub = PyUnicode_AsUTF8AndSize(pubend, &pub_n);
    if (pub == NULL) return NULL;
    unsigned char head[32];
    Py_ssize_t h = 0;
    head[h++] = 0x94;
    head[h++] = (unsigned char)kind;
    h += uint_packed(head + h, seq);
    Py_ssize_t pub_h = str_header_bytes(pub_n);
    Py_ssize_t array_h = count < 16 ? 1 : count < 0x10000 ? 3 : 5;
    /* the ticks' widths: only the last tick's can be wider than the first's, ticks rising */
    Py_ssize_t ticks_n = 0;
    if (count > 0) {
        unsigned char scratch[9];
        uint64_t last = (uint64_t)first + (uint64_t)(count - 1);
        Py_ssize_t w_first = uint_packed(scratch, first), w_last = uint_packed(scratch, last);
        if (w_first == w_last) ticks_n = w_first * count;
        else for (Py_ssize_t i = 0; i < count; i++) ticks_n += uint_packed(scratch, (uint64_t)first + (uint64_t)i);
    }
    Py_ssize_t body = h + pub_h + pub_n + array_h + ticks_n;
    if (body > 0xffffffffLL) { PyErr_SetString(PyExc_ValueError, "ack_run: too large"); return NULL; }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + body);
    if (out == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (int i = 0; i < 4; i++) *w++ = (unsigned char)((uint64_t)body >> (24 - 8 * i));
    memcpy(w, head, (size_t)h); w += h;
    w += str_header(w, pub_n);
    memcpy(w, pub, (size_t)pub_n); w += pub_n;
    if (count < 16) *w++ = (unsigned char)(0x90 | count);
    else if (count < 0x10000) { *w++ = 0xdc; *w++ = (unsigned char)(count >> 8); *w++ = (unsigned char)count; }
    else { *w++ = 0xdd; for (int i = 0; i < 4; i++) *w++ = (unsigned char)((uint64_t)count >> (24 - 8 * i)); }
    for (Py_ssize_t i = 0; i < count; i++) w += uint_packed(w, (uint64_t)first + (uint64_t)i);
    assert(w - (unsigned char *)PyBytes_AS_STRING(out) == 4 + body);
    return out;
}

static PyMethodDef methods[] = {
    {"ack_run", ack_run, METH_VARARGS, ack_run_doc},
    {"encode", encode, METH_VARARGS, encode_doc},
    {"scan", scan, METH_VARARGS, scan_doc},
    {"encode_frame", encode_frame, METH_VARARGS, encode_frame_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batch", "A PUBLISH's events checked and encoded as records (core/publish/batch.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module); }
