/* The compiled fast path of the publish intake (tidings/core/publish/batch.py): a PUBLISH's events,
 * as msgpack decoded them, checked and encoded into the records the log keeps, in one pass.
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
 * `first`, `first + 1`, ... It returns (records, deliveries, size, channel): the (tick, record)
 * pairs the Append carries, the (tick, channel, attributes, record) tuples the pubend holds until
 * the batch is durable, the records' bytes in all, and the channel when every event has the same
 * one (else None). A batch on one channel gets no deliveries (None): the pubend holds its records
 * instead (core/publish/pubend.py PendingBatch), so its events cost no tuple but the Append's.
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

PyDoc_STRVAR(encode_doc,
"encode(events, known, size_max, pubend, first, service, instance, authenticated)\n"
"-> (records, deliveries, size, channel) or None (see batch.py encode_python).");

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
    unsigned char *head = NULL, *source = NULL, *svc = NULL, *inst = NULL;
    Py_ssize_t head_n = -1, svc_n = -1, inst_n = -1;
    PyObject *records = NULL, *deliveries = NULL, *result = NULL;
    unsigned char *pub = NULL;
    Py_ssize_t pub_n = str_packed(pubend, &pub);
    if (pub_n < 0) goto fail_or_none;
    svc_n = str_packed(service, &svc);
    if (svc_n < 0) goto fail_or_none;
    inst_n = str_packed(instance, &inst);
    if (inst_n < 0) goto fail_or_none;
    head_n = 1 + pub_n;
    head = PyMem_Malloc((size_t)head_n);
    source = PyMem_Malloc((size_t)(svc_n + inst_n));
    if (head == NULL || source == NULL) { PyErr_NoMemory(); goto done; }
    head[0] = authenticated ? 0x98 : 0x97; /* fixarray of 8 (with the flag) or 7 */
    memcpy(head + 1, pub, (size_t)pub_n);
    memcpy(source, svc, (size_t)svc_n);
    memcpy(source + svc_n, inst, (size_t)inst_n);
    records = PyList_New(count);
    deliveries = uniform ? NULL : PyList_New(count);
    if (records == NULL || (!uniform && deliveries == NULL)) goto done;
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        PyObject *ch = PyList_GET_ITEM(ev, 0), *at = PyList_GET_ITEM(ev, 1), *pl = PyList_GET_ITEM(ev, 2);
        Py_ssize_t ch_n;
        const char *ch_utf8 = PyUnicode_AsUTF8AndSize(ch, &ch_n);
        if (ch_utf8 == NULL) { PyErr_Clear(); goto fail_or_none; }
        Py_ssize_t pl_n = PyBytes_GET_SIZE(pl);
        uint64_t tick = (uint64_t)first + (uint64_t)i;
        unsigned char scratch[9];
        Py_ssize_t tick_n = uint_packed(scratch, tick);
        Py_ssize_t n = head_n + tick_n + str_header_bytes(ch_n) + ch_n + 1 + svc_n + inst_n + bin_header_bytes(pl_n)
                       + pl_n + (authenticated ? 1 : 0);
        PyObject *rec = PyBytes_FromStringAndSize(NULL, n);
        if (rec == NULL) goto done;
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(rec);
        memcpy(w, head, (size_t)head_n); w += head_n;
        memcpy(w, scratch, (size_t)tick_n); w += tick_n;
        w += str_header(w, ch_n);
        memcpy(w, ch_utf8, (size_t)ch_n); w += ch_n;
        *w++ = 0x80; /* the empty map */
        memcpy(w, source, (size_t)(svc_n + inst_n)); w += svc_n + inst_n;
        w += bin_header(w, pl_n);
        memcpy(w, PyBytes_AS_STRING(pl), (size_t)pl_n); w += pl_n;
        if (authenticated) *w++ = 0xc3;
        assert(w - (unsigned char *)PyBytes_AS_STRING(rec) == n);
        size += n;
        PyObject *t = PyLong_FromUnsignedLongLong(tick);
        if (t == NULL) { Py_DECREF(rec); goto done; }
        PyObject *pair = PyTuple_Pack(2, t, rec);
        PyObject *delivery = pair == NULL || uniform ? NULL : PyTuple_Pack(4, t, ch, at, rec);
        Py_DECREF(t);
        Py_DECREF(rec);
        if (pair == NULL || (!uniform && delivery == NULL)) { Py_XDECREF(pair); goto done; }
        /* Neither can be in a reference cycle (a tick, bytes, a str and an empty map that the
           collector does not track): untracked, as the collector would leave them after its first
           look, so the young collections do not walk the thousands a batch keeps until durable. */
        PyObject_GC_UnTrack(pair);
        PyList_SET_ITEM(records, i, pair);
        if (!uniform) {
            if (!PyObject_IS_GC(at) || !PyObject_GC_IsTracked(at)) PyObject_GC_UnTrack(delivery);
            PyList_SET_ITEM(deliveries, i, delivery);
        }
    }
    result = Py_BuildValue("(OOnO)", records, uniform ? Py_None : deliveries, size, uniform ? same : Py_None);
    goto done;
fail_or_none:
    if (!PyErr_Occurred()) { result = Py_None; Py_INCREF(result); }
done:
    Py_XDECREF(records);
    Py_XDECREF(deliveries);
    PyMem_Free(head);
    PyMem_Free(source);
    PyMem_Free(pub);
    PyMem_Free(svc);
    PyMem_Free(inst);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, encode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batch", "A PUBLISH's events checked and encoded as records (core/publish/batch.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module); }
