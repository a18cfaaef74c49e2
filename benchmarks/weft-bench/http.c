/*
 * This file contains weft-bench's HTTP/1.1 server handler and client (see
 * http.h): the loopback server's fixed page, request parsing, URL parsing,
 * the GET with its response parser, and the keep-alive pool.
 *
 * Framing, both ways, is what RFC 9112 asks of a client and server that
 * know only Content-Length: a response is complete after Content-Length
 * bytes of body (or, without that header, at the end of the stream); a
 * connection persists by default in HTTP/1.1 and only with "Connection:
 * keep-alive" in HTTP/1.0; "Connection: close" from either side ends it
 * after the response. A client that asked for close reads on to the end of
 * the stream, so that the server closes first: the TIME_WAIT then lands on
 * the server's side, and a run of many short connections cannot use up the
 * client's local ports (it also checks that the server honoured "close").
 */
#define _GNU_SOURCE 1 /* sched_getcpu */
#include "http.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench.h"

/* The longest request head the server accepts, and the client's buffer for a response's head. */
#define REQ_HEAD_MAX 8192
#define RESP_BUF     16384

/* "\r\n\r\n" in b[from..n): the offset just past it, or 0 when absent. */
static size_t head_end(const char *b, size_t from, size_t n) {
  for (size_t i = from; i + 3 < n; i++)
    if (b[i] == '\r' && b[i + 1] == '\n' && b[i + 2] == '\r' && b[i + 3] == '\n') return i + 4;
  return 0;
}

/* The next line of b[*pos..end) (without its CRLF): false when there is no complete line. */
static bool next_line(const char *b, size_t end, size_t *pos, const char **line, size_t *len) {
  for (size_t i = *pos; i + 1 < end; i++) {
    if (b[i] == '\r' && b[i + 1] == '\n') {
      *line = b + *pos;
      *len = i - *pos;
      *pos = i + 2;
      return true;
    }
  }
  return false;
}

/* A header line "Name: value": true with the value trimmed of blanks when the name matches. */
static bool header_is(const char *line, size_t len, const char *name, const char **val, size_t *vlen) {
  size_t nl = strlen(name);
  if (len <= nl || line[nl] != ':' || strncasecmp(line, name, nl) != 0) return false;
  const char *v = line + nl + 1, *e = line + len;
  while (v < e && (*v == ' ' || *v == '\t')) v++;
  while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
  *val = v;
  *vlen = (size_t)(e - v);
  return true;
}

/* Whether a comma-separated header value lists token (case-insensitive), as Connection does. */
static bool has_token(const char *v, size_t n, const char *token) {
  size_t tl = strlen(token);
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',') i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e - s == tl && strncasecmp(v + s, token, tl) == 0) return true;
  }
  return false;
}

/* A Content-Length value: digits only, no overflow. */
static bool parse_length(const char *v, size_t n, size_t *out) {
  if (n == 0) return false;
  size_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return false;
    size_t d = (size_t)(v[i] - '0');
    if (x > (SIZE_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  *out = x;
  return true;
}

/* ------------------------------------------------------------------------ */
/* The page                                                                  */
/* ------------------------------------------------------------------------ */

int wb_http_page_init(wb_http_page *p, size_t body_len, uint64_t seed, int64_t timeout_ns) {
  memset(p, 0, sizeof *p);
  p->body_len = body_len;
  p->timeout_ns = timeout_ns;
  char *body = malloc(body_len ? body_len : 1);
  if (!body) return -ENOMEM;
  /* Lines of letters from xorshift64* (the kernels' generator): fixed by the seed, printable, cheap. */
  uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < body_len; i++) {
    uint64_t r = wb_xorshift64s(&s);
    body[i] = (i % 64 == 63) ? '\n' : (char)('a' + (r >> 59) % 26);
  }
  static const char pre[] = "<!DOCTYPE html>\n<html><head><title>weft-bench</title></head><body><pre>\n";
  static const char post[] = "\n</pre></body></html>\n";
  if (body_len >= sizeof pre + sizeof post) {
    memcpy(body, pre, sizeof pre - 1);
    memcpy(body + body_len - (sizeof post - 1), post, sizeof post - 1);
  }
  p->body_sum = wb_fnv1a(WB_FNV_INIT, body, body_len);
  int rc = 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nServer: weft-bench\r\nContent-Type: text/html; charset=us-ascii\r\n"
                      "Content-Length: %zu\r\nConnection: %s\r\n\r\n",
                      body_len, k ? "keep-alive" : "close");
    p->resp[k] = malloc((size_t)hl + body_len);
    if (!p->resp[k]) {
      rc = -ENOMEM;
      break;
    }
    memcpy(p->resp[k], head, (size_t)hl);
    memcpy(p->resp[k] + hl, body, body_len);
    p->head_len[k] = (size_t)hl;
    p->resp_len[k] = (size_t)hl + body_len;
  }
  free(body);
  if (rc < 0) wb_http_page_fini(p);
  return rc;
}

void wb_http_page_fini(wb_http_page *p) {
  free(p->resp[0]);
  free(p->resp[1]);
  p->resp[0] = p->resp[1] = NULL;
}

/* ------------------------------------------------------------------------ */
/* The server's handler                                                      */
/* ------------------------------------------------------------------------ */

static const char resp_400[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
static const char resp_405[] =
    "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
static const char resp_431[] =
    "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
static const char resp_505[] =
    "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/* Answer a request the server refuses, then end the connection (an error for the run's counts). */
static int refuse(int fd, wb_io io, const char *resp, size_t len, int64_t deadline, int err) {
  int rc = wb_net_write_all(io, fd, resp, len, deadline);
  return rc < 0 ? rc : err;
}

int wb_http_serve(void *ctx, int fd, wb_io io) {
  const wb_http_page *p = ctx;
  char buf[REQ_HEAD_MAX];
  size_t have = 0;
  for (;;) {
    /* Read until the request's head is complete (it may already be, after a pipelined one). */
    size_t end = head_end(buf, 0, have);
    while (!end) {
      if (have == sizeof buf)
        return refuse(fd, io, resp_431, sizeof resp_431 - 1, wb_net_deadline(p->timeout_ns), -EMSGSIZE);
      ssize_t n = wb_net_read(io, fd, buf + have, sizeof buf - have, wb_net_deadline(p->timeout_ns));
      /* Between requests, the client closing (or an idle keep-alive timing out) is the normal end. */
      if (n == 0 || (n == -ETIMEDOUT && have == 0)) return have == 0 ? 0 : -EPROTO;
      if (n < 0) return (int)n;
      size_t from = have > 3 ? have - 3 : 0;
      have += (size_t)n;
      end = head_end(buf, from, have);
    }
    int64_t deadline = wb_net_deadline(p->timeout_ns);
    size_t pos = 0, len = 0;
    const char *line = buf;
    next_line(buf, end, &pos, &line, &len);
    /* The request line: METHOD SP target SP HTTP/1.x */
    const char *sp1 = memchr(line, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp1 || !sp2 || sp2 == sp1 + 1)
      return refuse(fd, io, resp_400, sizeof resp_400 - 1, deadline, -EPROTO);
    const char *ver = sp2 + 1;
    size_t vlen = len - (size_t)(ver - line);
    if (vlen != 8 || strncmp(ver, "HTTP/1.", 7) != 0 || (ver[7] != '0' && ver[7] != '1'))
      return refuse(fd, io, resp_505, sizeof resp_505 - 1, deadline, -EPROTO);
    int minor = ver[7] - '0';
    size_t mlen = (size_t)(sp1 - line);
    bool head = mlen == 4 && strncmp(line, "HEAD", 4) == 0;
    if (!head && !(mlen == 3 && strncmp(line, "GET", 3) == 0))
      return refuse(fd, io, resp_405, sizeof resp_405 - 1, deadline, -EPROTO);
    bool conn_close = false, conn_keep = false;
    while (next_line(buf, end, &pos, &line, &len) && len > 0) {
      const char *v;
      size_t vl;
      size_t cl;
      if (!memchr(line, ':', len)) return refuse(fd, io, resp_400, sizeof resp_400 - 1, deadline, -EPROTO);
      if (header_is(line, len, "Connection", &v, &vl)) {
        conn_close |= has_token(v, vl, "close");
        conn_keep |= has_token(v, vl, "keep-alive");
      } else if (header_is(line, len, "Transfer-Encoding", &v, &vl) ||
                 (header_is(line, len, "Content-Length", &v, &vl) &&
                  !(parse_length(v, vl, &cl) && cl == 0))) {
        /* A GET with a body: this server has no use for one, and refuses rather than misframe. */
        return refuse(fd, io, resp_400, sizeof resp_400 - 1, deadline, -EPROTO);
      }
    }
    bool keep = minor == 1 ? !conn_close : (conn_keep && !conn_close);
    int k = keep ? 1 : 0;
    /* Counted before it is sent, so that a client that has read the answer finds it counted. */
    if (p->served) atomic_fetch_add_explicit(p->served, 1, memory_order_relaxed);
    int rc = wb_net_write_all(io, fd, p->resp[k], head ? p->head_len[k] : p->resp_len[k], deadline);
    if (rc < 0) return rc;
    if (!keep) return 0; /* the caller closes: the server's FIN follows the response */
    memmove(buf, buf + end, have - end);
    have -= end;
  }
}

/* ------------------------------------------------------------------------ */
/* URLs                                                                      */
/* ------------------------------------------------------------------------ */

int wb_url_parse(const char *s, wb_url *u, char *err, size_t errlen) {
  memset(u, 0, sizeof *u);
  if (strncasecmp(s, "http://", 7) != 0) {
    snprintf(err, errlen, "'%s' is not an http:// URL (https is not supported)", s);
    return -EINVAL;
  }
  const char *a = s + 7;
  size_t alen = strcspn(a, "/?#");
  if (alen == 0 || alen >= sizeof u->authority) {
    snprintf(err, errlen, "'%s' has no host, or one too long", s);
    return -EINVAL;
  }
  if (memchr(a, '@', alen)) {
    snprintf(err, errlen, "'%s': user names in URLs are not supported", s);
    return -EINVAL;
  }
  memcpy(u->authority, a, alen);
  const char *port = NULL;
  size_t hlen;
  const char *h = a;
  if (a[0] == '[') {
    const char *rb = memchr(a, ']', alen);
    if (!rb) {
      snprintf(err, errlen, "'%s': unclosed '[' in the host", s);
      return -EINVAL;
    }
    h = a + 1;
    hlen = (size_t)(rb - h);
    if (rb + 1 < a + alen) {
      if (rb[1] != ':') {
        snprintf(err, errlen, "'%s': bad host", s);
        return -EINVAL;
      }
      port = rb + 2;
    }
  } else {
    const char *colon = memchr(a, ':', alen);
    hlen = colon ? (size_t)(colon - a) : alen;
    if (colon) port = colon + 1;
  }
  if (hlen == 0 || hlen >= sizeof u->host) {
    snprintf(err, errlen, "'%s' has no host, or one too long", s);
    return -EINVAL;
  }
  memcpy(u->host, h, hlen);
  if (port) {
    size_t plen = (size_t)(a + alen - port), v;
    if (!parse_length(port, plen, &v) || v < 1 || v > 65535) {
      snprintf(err, errlen, "'%s': bad port", s);
      return -EINVAL;
    }
    snprintf(u->port, sizeof u->port, "%zu", v);
  } else {
    snprintf(u->port, sizeof u->port, "80");
  }
  const char *path = a + alen;
  size_t plen = strcspn(path, "#"); /* a fragment never goes to the server */
  if (plen + 2 > sizeof u->path) {
    snprintf(err, errlen, "'%s': path too long", s);
    return -EINVAL;
  }
  for (size_t i = 0; i < plen; i++) {
    if ((unsigned char)path[i] <= ' ' || path[i] == 0x7f) {
      snprintf(err, errlen, "'%s': the path holds a blank or control character (percent-encode it)", s);
      return -EINVAL;
    }
  }
  size_t o = 0;
  if (plen == 0 || path[0] != '/') u->path[o++] = '/';
  memcpy(u->path + o, path, plen);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The client                                                                */
/* ------------------------------------------------------------------------ */

/*
 * The keep-alive pool: a shard per CPU, each a stack of idle connections
 * under its own mutex (a weft mutex: fibers and threads alike). A request
 * takes from the shard of the CPU it runs on, else from the first other
 * shard that has one, and gives its connection back to the shard of the
 * CPU it ends on. One pool under one mutex was the whole client's meeting
 * point: whenever the kernel preempted a carrier thread while one of its
 * fibers held it, every fiber that came to the pool parked, and the client
 * stayed in that convoy (2.6 parks a request instead of 1) for whole
 * 100,000-request repetitions, at 0.7x the speed. wrk's threads keep
 * connections of their own in the same way.
 */
#define WB_POOL_SHARDS_MAX 64

typedef struct wb_pool_shard {
  weft_mutex_t mu;
  int *fd;         /* idle connections, the last one given back on top; pool_cap of room */
  atomic_size_t n; /* how many; written under mu, read without it as a hint */
  char pad[64];    /* keeps two shards' words off one cache line */
} wb_pool_shard;

int wb_http_client_init(wb_http_client *c) {
  c->req = NULL;
  c->shards = NULL;
  c->nshards = 0;
  atomic_init(&c->nidle, 0);
  atomic_init(&c->retries, 0);
  atomic_init(&c->reconnects, 0);
  atomic_init(&c->connects, 0);
  wb_str b = {0};
  int rc = wb_str_addf(
      &b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: weft-bench/%s\r\nAccept: */*\r\n%s\r\n", c->url->path,
      c->url->authority, WEFT_VERSION_STRING, c->keepalive ? "" : "Connection: close\r\n");
  if (rc < 0) return rc;
  if (c->keepalive) {
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    size_t n = cpus < 1 ? 1 : cpus > WB_POOL_SHARDS_MAX ? WB_POOL_SHARDS_MAX : (size_t)cpus;
    size_t room = c->pool_cap ? c->pool_cap : 1;
    c->shards = calloc(n, sizeof *c->shards);
    for (size_t i = 0; c->shards && i < n; i++) {
      c->shards[i].fd = malloc(room * sizeof *c->shards[i].fd);
      if (!c->shards[i].fd) {
        for (size_t j = 0; j < i; j++) free(c->shards[j].fd);
        free(c->shards);
        c->shards = NULL;
      }
    }
    if (!c->shards) {
      wb_str_free(&b);
      return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
      weft_mutex_init(&c->shards[i].mu);
      atomic_init(&c->shards[i].n, 0);
    }
    c->nshards = n;
  }
  c->req = b.s;
  c->req_len = b.len;
  return 0;
}

void wb_http_client_fini(wb_http_client *c) {
  for (size_t i = 0; i < c->nshards; i++) {
    wb_pool_shard *sh = &c->shards[i];
    for (size_t k = 0; k < atomic_load(&sh->n); k++) wb_net_close(sh->fd[k]);
    free(sh->fd);
    weft_mutex_destroy(&sh->mu);
  }
  free(c->shards);
  free(c->req);
  c->shards = NULL;
  c->nshards = 0;
  atomic_store(&c->nidle, 0);
  c->req = NULL;
}

size_t wb_http_client_idle(const wb_http_client *c) { return c->req ? atomic_load(&c->nidle) : 0; }

static size_t my_shard(const wb_http_client *c) {
  int cpu = sched_getcpu();
  return cpu < 0 ? 0 : (size_t)cpu % c->nshards;
}

static int pool_take(wb_http_client *c) {
  if (!atomic_load_explicit(&c->nidle, memory_order_relaxed)) return -1;
  size_t home = my_shard(c);
  for (size_t k = 0; k < c->nshards; k++) {
    wb_pool_shard *sh = &c->shards[(home + k) % c->nshards];
    if (!atomic_load_explicit(&sh->n, memory_order_relaxed)) continue;
    int fd = -1;
    weft_mutex_lock(&sh->mu);
    size_t n = atomic_load_explicit(&sh->n, memory_order_relaxed);
    if (n) {
      fd = sh->fd[n - 1];
      atomic_store_explicit(&sh->n, n - 1, memory_order_relaxed);
    }
    weft_mutex_unlock(&sh->mu);
    if (fd >= 0) {
      atomic_fetch_sub_explicit(&c->nidle, 1, memory_order_relaxed);
      return fd;
    }
  }
  return -1;
}

static void pool_put(wb_http_client *c, int fd) {
  /* At most pool_cap idle in all: each shard has room for that many. */
  if (atomic_fetch_add_explicit(&c->nidle, 1, memory_order_relaxed) >= c->pool_cap) {
    atomic_fetch_sub_explicit(&c->nidle, 1, memory_order_relaxed);
    wb_net_close(fd);
    return;
  }
  wb_pool_shard *sh = &c->shards[my_shard(c)];
  weft_mutex_lock(&sh->mu);
  size_t n = atomic_load_explicit(&sh->n, memory_order_relaxed);
  sh->fd[n] = fd;
  atomic_store_explicit(&sh->n, n + 1, memory_order_relaxed);
  weft_mutex_unlock(&sh->mu);
}

static int fail(wb_http_resp *r, const char *stage, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(wb_http_resp *r, const char *stage, int rc, const char *fmt, ...) {
  r->stage = stage;
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/*
 * Read and check one response on fd. *keep: the connection may carry another
 * request. *got_any: some of the response arrived (a reused connection that
 * the server closed before answering gives none, and is retried).
 */
static int read_response(wb_http_client *c, int fd, int64_t deadline, wb_http_resp *r, bool *keep,
                         bool *got_any) {
  char buf[RESP_BUF];
  size_t have = 0, end = 0;
  *keep = false;
  *got_any = false;
  while (!end) {
    if (have == sizeof buf) return fail(r, "response", -EMSGSIZE, "response head over %d bytes", RESP_BUF);
    /* Lent where weft lends (wb_net_read_lend): only the head is copied into buf; the body that came with
     * it stays lent for the loop below. */
    const void *data;
    ssize_t n = wb_net_read_lend(c->io, fd, buf + have, sizeof buf - have, &data, deadline);
    if (n < 0) return fail(r, "recv", (int)n, NULL);
    if (n == 0)
      return have == 0 ? fail(r, "recv", -ENODATA, "connection closed before the response")
                       : fail(r, "response", -EPROTO, "connection closed inside the response head");
    *got_any = true;
    if (data != buf + have) {
      size_t k = (size_t)n < sizeof buf - have ? (size_t)n : sizeof buf - have;
      size_t e = have == 0 ? head_end(data, 0, k) : 0;
      if (e) k = e; /* the whole head in one lend: the rest is the body's */
      memcpy(buf + have, data, k);
      wb_net_read_done(c->io, fd, k);
      n = (ssize_t)k;
    }
    size_t from = have > 3 ? have - 3 : 0;
    have += (size_t)n;
    end = head_end(buf, from, have);
  }
  size_t pos = 0, len = 0;
  const char *line = buf;
  next_line(buf, end, &pos, &line, &len);
  /* "HTTP/1.x SSS reason" */
  if (len < 12 || strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
      line[9] < '1' || line[9] > '5' || line[10] < '0' || line[10] > '9' || line[11] < '0' ||
      line[11] > '9' || (len > 12 && line[12] != ' '))
    return fail(r, "response", -EPROTO, "bad status line '%.*s'", (int)(len < 60 ? len : 60), line);
  int minor = line[7] - '0';
  r->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (r->status < 200) return fail(r, "response", -EPROTO, "interim response %d is not supported", r->status);
  bool have_len = false, conn_close = false, conn_keep = false;
  size_t clen = 0;
  while (next_line(buf, end, &pos, &line, &len) && len > 0) {
    const char *v;
    size_t vl, x;
    if (header_is(line, len, "Content-Length", &v, &vl)) {
      if (!parse_length(v, vl, &x) || (have_len && x != clen))
        return fail(r, "response", -EPROTO, "bad Content-Length '%.*s'", (int)(vl < 40 ? vl : 40), v);
      have_len = true;
      clen = x;
    } else if (header_is(line, len, "Transfer-Encoding", &v, &vl)) {
      return fail(r, "response", -ENOTSUP, "Transfer-Encoding '%.*s' is not supported (only Content-Length)",
                  (int)(vl < 40 ? vl : 40), v);
    } else if (header_is(line, len, "Connection", &v, &vl)) {
      conn_close |= has_token(v, vl, "close");
      conn_keep |= has_token(v, vl, "keep-alive");
    }
  }
  bool no_body = r->status == 204 || r->status == 304;
  bool framed = have_len || no_body;
  if (no_body) clen = 0;
  bool server_keeps = minor == 1 ? !conn_close : (conn_keep && !conn_close);
  *keep = c->keepalive && server_keeps && framed;

  /* The body: what came with the head, then the rest. */
  size_t pre = have - end;
  if (framed && pre > clen)
    return fail(r, "response", -EPROTO, "%zu bytes after a body of %zu (Content-Length)", pre - clen, clen);
  uint64_t sum = WB_FNV_INIT;
  if (c->checksum) sum = wb_fnv1a(sum, buf + end, pre);
  size_t got = pre;
  while (!framed || got < clen) {
    size_t want = sizeof buf;
    if (framed && clen - got < want) want = clen - got;
    /* The body is only counted (and summed with --checksum): lent, not copied, where weft lends. */
    const void *data;
    ssize_t n = wb_net_read_lend(c->io, fd, buf, want, &data, deadline);
    if (n < 0) return fail(r, "recv", (int)n, NULL);
    if (n == 0) {
      if (!framed) break; /* no Content-Length: the end of the stream ends the body */
      return fail(r, "response", -EBADMSG, "body ended after %zu of %zu bytes", got, clen);
    }
    size_t k = (size_t)n < want ? (size_t)n : want;
    if (c->checksum) sum = wb_fnv1a(sum, data, k);
    wb_net_read_done(c->io, fd, k);
    got += k;
  }
  r->body_len = got;
  r->body_sum = sum;
  if (framed && !*keep) {
    /* Either side said close: read on to the server's FIN (see the top of this file). */
    char extra[64];
    ssize_t n = wb_net_read(c->io, fd, extra, sizeof extra, deadline);
    if (n < 0) return fail(r, "recv", (int)n, "waiting for the server to close: %s", weft_strerror((int)n));
    if (n > 0) return fail(r, "response", -EPROTO, "data after the body on a closing connection");
  }
  if (r->status != 200) return fail(r, "response", -EPROTO, "HTTP status %d", r->status);
  if (c->expect_len != SIZE_MAX && got != c->expect_len)
    return fail(r, "response", -EBADMSG, "body of %zu bytes, expected %zu", got, c->expect_len);
  return 0;
}

int wb_http_get(wb_http_client *c, wb_http_resp *r) {
  memset(r, 0, sizeof *r);
  int64_t deadline = wb_net_deadline(c->timeout_ns);
  for (int attempt = 0;; attempt++) {
    /* A retry: a fresh connection. */
    int fd = c->keepalive && attempt == 0 && !c->fresh ? pool_take(c) : -1;
    bool reused = fd >= 0;
    int rc;
    if (fd < 0) {
      unsigned retries = 0;
      int64_t left = deadline - weft_now_ns();
      rc = left > 0 ? wb_net_connect(c->io, &c->addr, false, left, &fd, &retries) : -ETIMEDOUT;
      if (retries) atomic_fetch_add_explicit(&c->retries, retries, memory_order_relaxed);
      if (rc < 0) return fail(r, "connect", rc, NULL);
      atomic_fetch_add_explicit(&c->connects, 1, memory_order_relaxed);
    }
    rc = wb_net_write_all(c->io, fd, c->req, c->req_len, deadline);
    bool keep = false, got_any = false;
    if (rc < 0)
      fail(r, "send", rc, NULL);
    else
      rc = read_response(c, fd, deadline, r, &keep, &got_any);
    if (rc == 0 && keep) {
      pool_put(c, fd);
      return 0;
    }
    wb_net_close(fd);
    /*
     * A kept-alive connection that the server closed while it sat idle fails
     * before any of the response arrives: retry once on a fresh connection,
     * as HTTP clients do for idempotent requests.
     */
    if (rc < 0 && reused && !got_any && attempt == 0 &&
        (rc == -ENODATA || rc == -ECONNRESET || rc == -EPIPE)) {
      atomic_fetch_add_explicit(&c->reconnects, 1, memory_order_relaxed);
      memset(r, 0, sizeof *r);
      continue;
    }
    return rc;
  }
}

void wb_http_error(wb_errors *e, int rc, const wb_http_resp *r) {
  wb_errors_add(e, r->stage ? r->stage : "request", rc, r->detail[0] ? r->detail : NULL);
}
