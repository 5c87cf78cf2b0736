/* The compiled read of a run of MQTT PUBLISH packets (core/mqtt/codec.py `take_publishes`): the
 * plain ones at the head of what a connection holds, read in place into their fields.
 *
 * Theory of operation. A publisher sends PUBLISH after PUBLISH; the Python reader
 * (`publish_fields`) costs about 0.7 us a packet, most of an MQTT event's reading at the broker.
 * `take(buf, pos, packet_bytes_max, version, no_properties)` reads, from `pos`, each whole PUBLISH
 * packet the Python reader would read without a doubt:
 *
 *     fixed header: type 3, flags (DUP, QoS 0-2, RETAIN; DUP only with QoS > 0), the remaining
 *     length as a Variable Byte Integer in its shortest form, the packet within packet_bytes_max;
 *     topic: a two-byte length, UTF-8 as Python's strict decoder says, not empty, no U+0000, no
 *     '+' or '#'; a packet identifier other than 0 at QoS 1 and 2; in 5.0 a property length of 0
 *     (no properties); the rest is the payload
 *
 * and returns (fields, pos): one (topic, payload, qos, retain, dup, packet id or None,
 * no_properties) tuple per packet, as `publish_fields` returns them, and the position after the
 * last. It stops before any packet it does not read so (another type, one not whole, properties,
 * anything the Python reader refuses or reads another way): it decides nothing about that one, and
 * the caller's Python loop goes on from there, reading, stopping or leaving it to be refused as it
 * would have. So the run's fields are the Python reader's, whatever the bytes: a Hypothesis test
 * holds the two equal (tests/unit/test_mqtt_publishes_native.py), also built with AddressSanitizer
 * (make soak).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define PUBLISH_TYPE 3
#define MQTT_5 5
#define VBI_BYTES_MAX 4

/* One PUBLISH at `p` (`avail` bytes held from it): its fields appended to `out`, its size in
   `*size`; 0 if it is not read here (not a plain PUBLISH, not whole), -1 on a Python error. */
static int take_one(const unsigned char *p, Py_ssize_t avail, Py_ssize_t packet_bytes_max, long version,
                    PyObject *no_properties, PyObject *out, Py_ssize_t *size) {
    if (avail < 2 || (p[0] >> 4) != PUBLISH_TYPE) return 0;
    unsigned flags = p[0] & 0x0F;
    size_t length = 0;
    Py_ssize_t at = 1;
    for (int i = 0;; i++) {  /* the remaining length, shortest form, at most four bytes */
        if (i == VBI_BYTES_MAX || at >= avail) return 0;
        unsigned char b = p[at++];
        length |= (size_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            if (i && b == 0) return 0;
            break;
        }
    }
    if (length > (size_t)(avail - at) || (Py_ssize_t)length + at > packet_bytes_max) return 0;
    const unsigned char *body = p + at, *stop = body + length;
    unsigned qos = (flags >> 1) & 0x03;
    int dup = (flags & 0x08) != 0;
    if (qos == 3 || (dup && !qos) || length < 2) return 0;
    size_t topic_len = ((size_t)body[0] << 8) | body[1];
    const unsigned char *topic_at = body + 2, *q = topic_at + topic_len;
    if (topic_len == 0 || topic_len > (size_t)(stop - topic_at)) return 0;
    if (memchr(topic_at, 0, topic_len) || memchr(topic_at, '+', topic_len) || memchr(topic_at, '#', topic_len))
        return 0;
    long packet_id = 0;
    if (qos) {
        if (stop - q < 2) return 0;
        packet_id = ((long)q[0] << 8) | q[1];
        if (!packet_id) return 0;
        q += 2;
    }
    if (version == MQTT_5) {
        if (q >= stop || *q != 0) return 0;  /* properties: the Python reader's */
        q++;
    }
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)topic_at, (Py_ssize_t)topic_len, "strict");
    if (topic == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();  /* not UTF-8: the Python reader refuses it */
        return 0;
    }
    PyObject *payload = PyBytes_FromStringAndSize((const char *)q, stop - q);
    PyObject *pid = qos ? PyLong_FromLong(packet_id) : Py_NewRef(Py_None);
    PyObject *fields = NULL;
    PyObject *qos_obj = (payload && pid) ? PyLong_FromLong((long)qos) : NULL;
    if (qos_obj)
        fields = PyTuple_Pack(7, topic, payload, qos_obj, (flags & 0x01) ? Py_True : Py_False,
                              dup ? Py_True : Py_False, pid, no_properties);
    Py_DECREF(topic);
    Py_XDECREF(payload);
    Py_XDECREF(pid);
    Py_XDECREF(qos_obj);
    if (fields == NULL) return -1;
    int failed = PyList_Append(out, fields);
    Py_DECREF(fields);
    if (failed) return -1;
    *size = at + (Py_ssize_t)length;
    return 1;
}

PyDoc_STRVAR(take_doc,
"take(buf, pos, packet_bytes_max, version, no_properties) -> (fields, pos)\n\n"
"The plain PUBLISH packets of `buf` from `pos`, read as core/mqtt/decode.py `publish_fields` reads\n"
"them, and the position after the last; it stops before any other (module doc).");

static PyObject *take(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, packet_bytes_max;
    long version;
    PyObject *no_properties;
    if (!PyArg_ParseTuple(args, "y*nnlO", &view, &pos, &packet_bytes_max, &version, &no_properties)) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        if (out != NULL) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "pos is outside the buffer");
        }
        return NULL;
    }
    const unsigned char *buf = view.buf;
    for (;;) {
        Py_ssize_t size = 0;
        int got = take_one(buf + pos, view.len - pos, packet_bytes_max, version, no_properties, out, &size);
        if (got < 0) {
            PyBuffer_Release(&view);
            Py_DECREF(out);
            return NULL;
        }
        if (!got) break;
        pos += size;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", out, pos);
}

static PyMethodDef methods[] = {
    {"take", take, METH_VARARGS, take_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_publishes", "A run of MQTT PUBLISH packets read in place (core/mqtt/codec.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__publishes(void) { return PyModule_Create(&module); }
