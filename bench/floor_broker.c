/* floor_broker: the least any broker can do in test (d), as a yardstick for the (d) bars.
 *
 * Test (d) times an event from the publisher's send to the subscriber's read. tidings logs and
 * fsyncs every event before it delivers it, so its (d) latency is the disk's fsync plus its path.
 * The bench measures the fsync alone (fsync_floor.py: write + fsync, in-process); what it cannot
 * measure that way is the loopback round trip around it: the publisher's send, the broker's
 * wake-up and read, its writes, the subscriber's wake-up and read. This program measures the
 * sum: the same (d) load, against a server that does nothing but what (d) needs.
 *
 * It speaks the MQTT 3.1.1 subset the bench's load clients use (CONNECT, SUBSCRIBE, PUBLISH at
 * QoS 0 and 1, PUBACK, PINGREQ, DISCONNECT), with one epoll loop on one thread. Each PUBLISH is
 * written to a file and made durable before anything else happens; then it is written to every
 * subscriber (one topic filter per connection, matched exactly, as the bench subscribes), and a
 * QoS 1 PUBLISH is acknowledged. There are no sessions, no queues, no matching structures, no
 * checks beyond framing: it is a measuring instrument, not a broker. A connection that sends what
 * it cannot frame is closed.
 *
 * Two ways to the disk, as fsync_floor.py measures them:
 *   append     write at the end of the file, then fsync: the floor's own pattern, so the margin
 *              above the floor is the round trip alone;
 *   prefilled  pwrite over zeros written and fsynced at the start, then fdatasync: the pattern of
 *              tidings' log (storage/files.py), which spares the file system's metadata commit.
 *
 *   cc -O2 -o floor_broker bench/floor_broker.c
 *   floor_broker PORT DATA_DIR append|prefilled   (listens on 127.0.0.1:PORT; writes DATA_DIR/log)
 *
 * bench/run.py builds and runs it as the brokers "floor" (append) and "floor-prefilled", tests
 * d-best and d-durable only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 1024
#define BUF_BYTES (1 << 20)
#define LOG_BYTES_MAX (64 << 20)  /* the log is cut back to empty past this: a yardstick keeps nothing */

struct conn {
    int fd;
    size_t have;
    unsigned char *buf;
    char topic[256];  /* the one filter this connection subscribed to; empty: none */
    int qos;
};

static struct conn *conns[MAX_CONNS];
static int log_fd = -1;
static int prefilled;
static off_t log_bytes;
static unsigned short next_id = 1;
static volatile sig_atomic_t stopping;

static void on_term(int sig) { (void)sig; stopping = 1; }

static int send_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { usleep(50); continue; }  /* a yardstick's subscribers keep up */
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void drop(int epfd, struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->buf);
    free(c);
}

/* the prefilled log: LOG_BYTES_MAX of zeros, written and fsynced once; records wrap around in it */
static void prefill(void) {
    static char zeros[1 << 20];
    for (off_t at = 0; at < LOG_BYTES_MAX; at += (off_t)sizeof zeros)
        if (pwrite(log_fd, zeros, sizeof zeros, at) != (ssize_t)sizeof zeros) { perror("prefill"); exit(1); }
    if (fsync(log_fd) != 0) { perror("prefill"); exit(1); }
}

static void log_publish(const unsigned char *p, size_t n) {
    if (log_bytes + (off_t)n > LOG_BYTES_MAX) {
        if (!prefilled && ftruncate(log_fd, 0) != 0) { perror("ftruncate"); exit(1); }
        log_bytes = 0;
    }
    int ok = prefilled ? pwrite(log_fd, p, n, log_bytes) == (ssize_t)n && fdatasync(log_fd) == 0
                       : write(log_fd, p, n) == (ssize_t)n && fsync(log_fd) == 0;
    if (!ok) { perror("log"); exit(1); }
    log_bytes += (off_t)n;
}

static int remaining_length(unsigned char *out, size_t n) {
    int k = 0;
    do {
        unsigned char d = n & 0x7F;
        n >>= 7;
        out[k++] = n ? (d | 0x80) : d;
    } while (n);
    return k;
}

/* one PUBLISH: log, deliver to each exact subscriber, then PUBACK at QoS 1 */
static int publish(struct conn *from, unsigned char flags, const unsigned char *body, size_t len) {
    if (len < 2) return -1;
    size_t tlen = (size_t)body[0] << 8 | body[1];
    int qos = (flags >> 1) & 3;
    size_t head = 2 + tlen + (qos ? 2 : 0);
    if (head > len || tlen >= sizeof from->topic) return -1;
    log_publish(body, len);
    const unsigned char *payload = body + head;
    size_t plen = len - head;
    for (int fd = 0; fd < MAX_CONNS; fd++) {
        struct conn *s = conns[fd];
        if (!s || !s->topic[0] || strlen(s->topic) != tlen || memcmp(s->topic, body + 2, tlen)) continue;
        unsigned char out[16 + 256 + 4096];
        size_t body_len = 2 + tlen + (s->qos ? 2 : 0) + plen;
        if (body_len > sizeof out - 8) continue;
        size_t k = 0;
        out[k++] = 0x30 | (s->qos ? 0x02 : 0);
        k += (size_t)remaining_length(out + k, body_len);
        memcpy(out + k, body, 2 + tlen);
        k += 2 + tlen;
        if (s->qos) {
            out[k++] = next_id >> 8;
            out[k++] = next_id & 0xFF;
            next_id = next_id == 0xFFFF ? 1 : next_id + 1;
        }
        memcpy(out + k, payload, plen);
        k += plen;
        send_all(s->fd, out, k);  /* a subscriber gone: its own read sees the close */
    }
    if (qos) {
        unsigned char ack[4] = {0x40, 0x02, body[2 + tlen], body[3 + tlen]};
        return send_all(from->fd, ack, 4);
    }
    return 0;
}

static int subscribe(struct conn *c, const unsigned char *body, size_t len) {
    if (len < 5) return -1;
    size_t tlen = (size_t)body[2] << 8 | body[3];
    if (4 + tlen + 1 > len || tlen >= sizeof c->topic) return -1;
    memcpy(c->topic, body + 4, tlen);
    c->topic[tlen] = 0;
    c->qos = body[4 + tlen] & 3 ? 1 : 0;
    unsigned char ack[5] = {0x90, 0x03, body[0], body[1], (unsigned char)c->qos};
    return send_all(c->fd, ack, 5);
}

/* every whole packet in the connection's buffer; -1 closes the connection */
static int packets(struct conn *c) {
    size_t pos = 0;
    while (c->have - pos >= 2) {
        size_t len = 0, k = 1;
        int shift = 0, whole = 0;
        while (pos + k < c->have) {
            unsigned char d = c->buf[pos + k++];
            len |= (size_t)(d & 0x7F) << shift;
            shift += 7;
            if (!(d & 0x80)) { whole = 1; break; }
            if (shift > 21) return -1;
        }
        if (!whole) break;  /* the remaining length is not all here yet */
        if (k + len > BUF_BYTES) return -1;
        if (pos + k + len > c->have) break;
        unsigned char type = c->buf[pos] >> 4, flags = c->buf[pos] & 0x0F;
        const unsigned char *body = c->buf + pos + k;
        int rc = 0;
        switch (type) {
        case 1: { static const unsigned char connack[4] = {0x20, 0x02, 0x00, 0x00}; rc = send_all(c->fd, connack, 4); break; }
        case 3: rc = publish(c, flags, body, len); break;
        case 4: break;  /* a subscriber's PUBACK */
        case 8: rc = subscribe(c, body, len); break;
        case 12: { static const unsigned char pong[2] = {0xD0, 0x00}; rc = send_all(c->fd, pong, 2); break; }
        case 14: return -1;  /* DISCONNECT */
        default: return -1;
        }
        if (rc != 0) return -1;
        pos += k + len;
    }
    memmove(c->buf, c->buf + pos, c->have - pos);
    c->have -= pos;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[3], "append") && strcmp(argv[3], "prefilled"))) {
        fprintf(stderr, "usage: floor_broker PORT DATA_DIR append|prefilled\n");
        return 2;
    }
    prefilled = !strcmp(argv[3], "prefilled");
    char path[4096];
    snprintf(path, sizeof path, "%s/log", argv[2]);
    log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (prefilled ? 0 : O_APPEND), 0644);
    if (log_fd < 0) { perror(path); return 1; }
    if (prefilled) prefill();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 128) != 0) { perror("listen"); return 1; }
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event ready[64];
    while (!stopping) {
        int n = epoll_wait(epfd, ready, 64, 500);
        for (int i = 0; i < n; i++) {
            int fd = ready[i].data.fd;
            if (fd == lfd) {
                int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                if (cfd < 0) continue;
                if (cfd >= MAX_CONNS) { close(cfd); continue; }
                setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                struct conn *c = calloc(1, sizeof *c);
                c->fd = cfd;
                c->buf = malloc(BUF_BYTES);
                conns[cfd] = c;
                struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &cev);
                continue;
            }
            struct conn *c = conns[fd];
            if (!c) continue;
            ssize_t r = read(fd, c->buf + c->have, BUF_BYTES - c->have);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) { drop(epfd, c); continue; }
            if (r < 0) continue;
            c->have += (size_t)r;
            if (packets(c) != 0) drop(epfd, c);
        }
    }
    for (int fd = 0; fd < MAX_CONNS; fd++)
        if (conns[fd]) drop(epfd, conns[fd]);
    close(log_fd);
    return 0;
}
