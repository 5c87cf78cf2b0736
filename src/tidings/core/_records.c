/* The compiled check of other brokers' event records at a subscriber's broker (core/event.py
 * `records_routing_fields`): a batch of records read in place, without an object per field.
 *
 * Theory of operation. A subscriber's broker checks every record a peer sends before delivering
 * it (peers are checked like clients; the client is sent the record's bytes as they are). The
 * common batch is thousands of records of one pubend, each in the layout every broker writes
 * (core/event.py `encode_records`, core/publish/_batch.c):
 *
 *     fixarray 7 or 8: pubend (as msgpack packs it: `prefix`), tick (an integer), channel (a str),
 *     the empty map, service (a str), instance (a str), payload (bin), then true or false if 8
 *
 * `routing(records, prefix)` reads each record so, byte by byte to its end: each string must be
 * UTF-8 as Python's strict decoder says, the channel is decoded once per run of records that share
 * it, the other strings are checked and not kept. It returns (routed, channels): one
 * (channel, {}) tuple per record, as the Python check returns them, and the channel strings it
 * decoded, for the caller to check as channel names (core/event.py `_valid_channel`).
 *
 * It is a fast path, not an authority: for any record outside that layout (attributes, nil, a
 * string or integer packed in a longer form than msgpack's, trailing bytes, not bytes at all) it
 * answers None and decides nothing, and the caller runs the Python check, which accepts or refuses.
 * What it accepts the Python check accepts with the same answer: a Hypothesis test holds the two
 * equal (tests/unit/test_records_routing.py), also built with AddressSanitizer (make soak).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef const unsigned char *cursor;

/* a big-endian length of `k` bytes (1, 2 or 4) at `*at`, before `end`, in `*len`, `*at` past it
   and past the `*len` bytes it counts being there; 0 if they are not */
static int take_len(cursor *at, cursor end, int k, size_t *len) {
    cursor p = *at;
    size_t v = 0;
    if (end - p < k) return 0;
    for (int i = 0; i < k; i++) v = (v << 8) | p[i];
    p += k;
    if ((size_t)(end - p) < v) return 0;
    *at = p;
    *len = v;
    return 1;
}

/* a msgpack string at `*at`, before `end`: its bytes in (*s, *n), `*at` past it; 0 if none */
static int take_str(cursor *at, cursor end, cursor *s, Py_ssize_t *n) {
    cursor p = *at;
    size_t len;
    if (p >= end) return 0;
    unsigned char h = *p++;
    if ((h & 0xe0) == 0xa0) {
        len = h & 0x1f;
        if ((size_t)(end - p) < len) return 0;
    } else if (h < 0xd9 || h > 0xdb || !take_len(&p, end, 1 << (h - 0xd9), &len))
        return 0;  /* (str 8, 16, 32: a length of 1, 2 or 4 bytes) */
    *s = p;
    *n = (Py_ssize_t)len;
    *at = p + len;
    return 1;
}

/* a msgpack bin at `*at`, before `end`, skipped; 0 if none */
static int skip_bin(cursor *at, cursor end) {
    cursor p = *at;
    size_t len;
    if (p >= end) return 0;
    unsigned char h = *p++;
    if (h < 0xc4 || h > 0xc6 || !take_len(&p, end, 1 << (h - 0xc4), &len)) return 0;  /* (bin 8, 16, 32) */
    *at = p + len;
    return 1;
}

/* a msgpack integer at `*at` (any of its forms: Python reads each as an int), skipped; 0 if none */
static int skip_int(cursor *at, cursor end) {
    cursor p = *at;
    size_t k;
    if (p >= end) return 0;
    unsigned char h = *p++;
    if (h < 0x80 || h >= 0xe0) k = 0;
    else if (h == 0xcc || h == 0xd0) k = 1;
    else if (h == 0xcd || h == 0xd1) k = 2;
    else if (h == 0xce || h == 0xd2) k = 4;
    else if (h == 0xcf || h == 0xd3) k = 8;
    else return 0;
    if ((size_t)(end - p) < k) return 0;
    *at = p + k;
    return 1;
}

/* 1 if (s, n) is UTF-8 as Python's strict decoder says, 0 if not, -1 on another error (raised) */
static int utf8_ok(cursor s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n && s[i] < 0x80) i++;
    if (i == n) return 1;
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (u != NULL) { Py_DECREF(u); return 1; }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* a string field that is checked, not kept: 1 if it is a valid one, 0 if not, -1 on error. `seen`
   and `seen_n` are the last one found valid (records of one source repeat theirs). */
static int checked_str(cursor *at, cursor end, cursor *seen, Py_ssize_t *seen_n) {
    cursor s;
    Py_ssize_t n;
    if (!take_str(at, end, &s, &n)) return 0;
    if (*seen != NULL && n == *seen_n && memcmp(s, *seen, (size_t)n) == 0) return 1;
    int ok = utf8_ok(s, n);
    if (ok == 1) { *seen = s; *seen_n = n; }
    return ok;
}

PyDoc_STRVAR(routing_doc,
"routing(records, prefix) -> (routed, channels) or None\n\n"
"Each of `records` (a list of bytes) read as a record of the pubend msgpack packs as `prefix`,\n"
"in the usual layout: (channel, {}) per record and the channels decoded; None when any is not.");

static PyObject *routing(PyObject *self, PyObject *args) {
    PyObject *records;
    const char *prefix;
    Py_ssize_t prefix_n;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y#", &PyList_Type, &records, &prefix, &prefix_n)) return NULL;
    /* its own references to the records, whose bytes the cursors below point into: an allocation
       may run the collector, and a finalizer could change the caller's list */
    PyObject *held = PyList_GetSlice(records, 0, PY_SSIZE_T_MAX);
    if (held == NULL) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(held);
    PyObject *result = NULL, *channel = NULL;
    PyObject *routed = PyList_New(count);
    PyObject *channels = PyList_New(0);
    cursor ch_at = NULL, svc_at = NULL, inst_at = NULL;
    Py_ssize_t ch_n = 0, svc_n = 0, inst_n = 0;
    if (routed == NULL || channels == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = PyList_GET_ITEM(held, i);
        if (!PyBytes_CheckExact(record)) goto none;
        cursor p = (cursor)PyBytes_AS_STRING(record), end = p + PyBytes_GET_SIZE(record), s;
        Py_ssize_t n;
        if (p >= end || (*p != 0x97 && *p != 0x98)) goto none;
        int flagged = *p++ == 0x98;
        if (end - p < prefix_n || memcmp(p, prefix, (size_t)prefix_n) != 0) goto none;
        p += prefix_n;
        if (!skip_int(&p, end) || !take_str(&p, end, &s, &n)) goto none;
        if (channel == NULL || n != ch_n || memcmp(s, ch_at, (size_t)n) != 0) {
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
            if (decoded == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
                PyErr_Clear();
                goto none;
            }
            Py_XSETREF(channel, decoded);
            if (PyList_Append(channels, channel) < 0) goto done;
            ch_at = s;
            ch_n = n;
        }
        if (p >= end || *p++ != 0x80) goto none; /* the empty map */
        for (int field = 0; field < 2; field++) { /* service, instance */
            int ok = field ? checked_str(&p, end, &inst_at, &inst_n) : checked_str(&p, end, &svc_at, &svc_n);
            if (ok < 0) goto done;
            if (ok == 0) goto none;
        }
        if (!skip_bin(&p, end)) goto none;
        if (flagged && (p >= end || (*p != 0xc2 && *p != 0xc3))) goto none;
        p += flagged;
        if (p != end) goto none;
        PyObject *attributes = PyDict_New();
        if (attributes == NULL) goto done;
        PyObject *pair = PyTuple_Pack(2, channel, attributes);
        Py_DECREF(attributes);
        if (pair == NULL) goto done;
        PyList_SET_ITEM(routed, i, pair);
    }
    result = PyTuple_Pack(2, routed, channels);
    goto done;
none:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_DECREF(held);
    Py_XDECREF(channel);
    Py_XDECREF(routed);
    Py_XDECREF(channels);
    return result;
}

static PyMethodDef methods[] = {
    {"routing", routing, METH_VARARGS, routing_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Peers' event records checked in place (core/event.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
