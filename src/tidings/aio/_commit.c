/* The log's commit made durable without the interpreter (tidings/aio/native_commit.py): a thread of
 * its own fsyncs the descriptors it is given and wakes the event loop through an eventfd.
 *
 * Theory of operation. The event loop writes the log's records itself (a pwrite); what is left is
 * the fsync, which takes the disk's time and, on a VM, some 60-170 us of the kernel's CPU. A
 * Python thread doing it must take the GIL before and after, and at 1,000 events/s each of those
 * hand-offs wakes a thread that then waits for the GIL the loop holds (docs/benchmarks.md, "(d)
 * above the disk's fsync"). This thread never takes the GIL: `submit` hands it one commit (a
 * token, the segment's descriptor and, when a segment was created or removed, the directory's),
 * under a mutex held only for a few assignments; the thread fsyncs them (or fdatasyncs the
 * segment), closes them (they are the committer's: the caller passes duplicates), notes the result
 * and the fsync's length, and adds 1 to the eventfd. The loop watches the eventfd (`add_reader`)
 * and calls `take`, which reads the eventfd and returns the finished commit.
 *
 * One commit at a time. The caller submits the next one only after taking the last (group commit
 * lives in the Python caller: whatever was appended meanwhile rides on the next fsync), so the
 * state is one slot: IDLE -> QUEUED (submit) -> RUNNING (the thread took it) -> DONE (synced or
 * failed, eventfd written) -> IDLE (take). `submit` while a commit is QUEUED, RUNNING or DONE
 * raises RuntimeError; so does anything after `close`.
 *
 * Signals are blocked in the thread, so Python's handlers keep running in the main thread. `close`
 * asks the thread to stop, waits for a commit in flight to finish (the GIL released meanwhile),
 * joins it and closes the eventfd; a commit finished but not taken is dropped, and its descriptors
 * were closed already. A committer collected without `close` does the same.
 *
 * Linux only (eventfd): where it does not build, the broker uses its Python writer thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum slot { IDLE, QUEUED, RUNNING, DONE };

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started;           /* the thread exists (joined by close) */
    int stopping;          /* close asked the thread to stop */
    int efd;               /* the eventfd the loop watches; -1 once closed */
    enum slot state;
    long long token;       /* the commit's token, as given */
    int fd, dir_fd;        /* the committer's descriptors for the commit in the slot (-1: none) */
    int datasync;          /* fdatasync the segment instead of fsync */
    int error;             /* errno of the first failing call, 0 when durable */
    long long sync_ns;     /* how long the fsync(s) took */
} Committer;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *run(void *arg) {
    Committer *c = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->state != QUEUED && !c->stopping) pthread_cond_wait(&c->cv, &c->mu);
        if (c->state != QUEUED) break; /* stopping, nothing queued */
        c->state = RUNNING;
        int fd = c->fd, dir_fd = c->dir_fd, datasync = c->datasync;
        pthread_mutex_unlock(&c->mu);

        long long began = now_ns();
        int error = 0;
        if ((datasync ? fdatasync(fd) : fsync(fd)) != 0) error = errno;
        if (error == 0 && dir_fd >= 0 && fsync(dir_fd) != 0) error = errno;
        long long took = now_ns() - began;
        close(fd);
        if (dir_fd >= 0) close(dir_fd);

        pthread_mutex_lock(&c->mu);
        c->fd = c->dir_fd = -1;
        c->error = error;
        c->sync_ns = took;
        c->state = DONE;
        pthread_mutex_unlock(&c->mu);
        /* the wake after the unlock: the loop it wakes takes the mutex at once (in `take`). A
         * `take` between the two finds DONE already and the wake then finds nothing: harmless. */
        uint64_t one = 1;
        ssize_t w;
        do {
            w = write(c->efd, &one, sizeof one);
        } while (w < 0 && errno == EINTR);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Stop the thread (a commit in flight finishes first) and close everything; with the GIL held on
 * entry, released while joining. Idempotent. */
static void shut(Committer *c) {
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(c->thread, NULL);
        Py_END_ALLOW_THREADS
        c->started = 0;
    }
    if (c->state == QUEUED) { /* never taken by the thread: its descriptors are still ours */
        close(c->fd);
        if (c->dir_fd >= 0) close(c->dir_fd);
        c->fd = c->dir_fd = -1;
    }
    c->state = IDLE;
    if (c->efd >= 0) {
        close(c->efd);
        c->efd = -1;
    }
}

static PyObject *Committer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Committer", kwlist)) return NULL;
    Committer *c = (Committer *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    c->efd = -1;
    c->fd = c->dir_fd = -1;
    c->state = IDLE;
    if (pthread_mutex_init(&c->mu, NULL) != 0 || pthread_cond_init(&c->cv, NULL) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot make the committer's mutex");
        Py_DECREF(c);
        return NULL;
    }
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    int err = pthread_create(&c->thread, NULL, run, c);
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    c->started = 1;
    return (PyObject *)c;
}

static void Committer_dealloc(Committer *c) {
    shut(c);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

PyDoc_STRVAR(submit_doc,
"submit(token, fd, dir_fd, datasync) -> None\n\n"
"Make `fd` durable (fdatasync with `datasync`, else fsync), then `dir_fd` unless it is -1, in the\n"
"committer's thread; both descriptors become the committer's, which closes them. RuntimeError when\n"
"a commit is in flight or not yet taken, or after close.");

static PyObject *Committer_submit(Committer *c, PyObject *args) {
    long long token;
    int fd, dir_fd, datasync;
    if (!PyArg_ParseTuple(args, "Liip:submit", &token, &fd, &dir_fd, &datasync)) return NULL;
    if (fd < 0 || dir_fd < -1) {
        PyErr_SetString(PyExc_ValueError, "submit: fd must be a descriptor, dir_fd one or -1");
        return NULL;
    }
    if (!c->started) {
        PyErr_SetString(PyExc_RuntimeError, "submit: the committer is closed");
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    if (c->state != IDLE) {
        pthread_mutex_unlock(&c->mu);
        PyErr_SetString(PyExc_RuntimeError, "submit: a commit is in flight or not taken yet");
        return NULL;
    }
    c->token = token;
    c->fd = fd;
    c->dir_fd = dir_fd;
    c->datasync = datasync;
    c->state = QUEUED;
    pthread_mutex_unlock(&c->mu);
    pthread_cond_signal(&c->cv); /* after the unlock: the thread it wakes takes the mutex at once */
    Py_RETURN_NONE;
}

PyDoc_STRVAR(take_doc,
"take() -> (token, errno, sync_ns) or None\n\n"
"The finished commit (errno 0: durable), the slot then free for the next; None while none is\n"
"finished. Reads the eventfd, so the loop's reader is quiet again until the next one.");

static PyObject *Committer_take(Committer *c, PyObject *Py_UNUSED(ignored)) {
    if (c->efd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "take: the committer is closed");
        return NULL;
    }
    uint64_t count;
    ssize_t r;
    do {
        r = read(c->efd, &count, sizeof count);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && errno != EAGAIN) return PyErr_SetFromErrno(PyExc_OSError);
    pthread_mutex_lock(&c->mu);
    if (c->state != DONE) {
        pthread_mutex_unlock(&c->mu);
        Py_RETURN_NONE;
    }
    long long token = c->token, sync_ns = c->sync_ns;
    int error = c->error;
    c->state = IDLE;
    pthread_mutex_unlock(&c->mu);
    return Py_BuildValue("(LiL)", token, error, sync_ns);
}

static PyObject *Committer_fileno(Committer *c, PyObject *Py_UNUSED(ignored)) {
    if (c->efd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "fileno: the committer is closed");
        return NULL;
    }
    return PyLong_FromLong(c->efd);
}

static PyObject *Committer_busy(Committer *c, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&c->mu);
    int busy = c->state != IDLE;
    pthread_mutex_unlock(&c->mu);
    return PyBool_FromLong(busy);
}

static PyObject *Committer_close(Committer *c, PyObject *Py_UNUSED(ignored)) {
    shut(c);
    Py_RETURN_NONE;
}

static PyMethodDef Committer_methods[] = {
    {"submit", (PyCFunction)Committer_submit, METH_VARARGS, submit_doc},
    {"take", (PyCFunction)Committer_take, METH_NOARGS, take_doc},
    {"fileno", (PyCFunction)Committer_fileno, METH_NOARGS, "fileno() -> the eventfd the loop watches."},
    {"busy", (PyCFunction)Committer_busy, METH_NOARGS, "busy() -> whether a commit is queued, running or not taken."},
    {"close", (PyCFunction)Committer_close, METH_NOARGS,
     "close() -> None: wait for a commit in flight, stop the thread, close the eventfd."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CommitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tidings.aio._commit.Committer",
    .tp_doc = "A thread outside the interpreter that fsyncs a commit and writes an eventfd (_commit.c).",
    .tp_basicsize = sizeof(Committer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Committer_new,
    .tp_dealloc = (destructor)Committer_dealloc,
    .tp_methods = Committer_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_commit", "The log's fsync in a thread that never takes the GIL (aio/native_commit.py).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__commit(void) {
    if (PyType_Ready(&CommitterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CommitterType);
    if (PyModule_AddObject(m, "Committer", (PyObject *)&CommitterType) < 0) {
        Py_DECREF(&CommitterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
