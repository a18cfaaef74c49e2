/*
 * This file contains weft-bench's HTTP/1.1 (http.c): the page its loopback
 * server serves, the server's per-connection handler, URL parsing, and the
 * client's GET, with an optional pool of kept-alive connections. `weft-bench
 * http` and the gpars http case use them.
 *
 * Deliberately small: GET (and HEAD) of one page, Content-Length framing,
 * keep-alive and "Connection: close" both ways. Chunked responses, TLS,
 * redirects and request bodies are refused with an error, never guessed at.
 */
#ifndef WEFT_BENCH_HTTP_H
#define WEFT_BENCH_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "net.h"
#include "weft.h"

/* The page of the GPars write-up's HTTP case: 9 KiB. */
#define WB_HTTP_BODY_BYTES 9216

/* ------------------------------------------------------------------------ */
/* The server                                                                */
/* ------------------------------------------------------------------------ */

/* The page and the two responses that carry it, built once; read-only while the server runs. */
typedef struct wb_http_page {
  size_t body_len;
  uint64_t body_sum; /* FNV-1a of the body: what a client that checks the bytes expects */
  char *resp[2];     /* whole responses, headers and body: [0] "Connection: close", [1] keep-alive */
  size_t resp_len[2];
  size_t head_len[2]; /* their header part (a HEAD request gets only this) */
  int64_t timeout_ns; /* the server's limit on each read or write of a connection (an idle keep-alive too) */
  atomic_size_t
      *served; /* when not NULL, counts the page's responses written (weft-bench serve); NULL by init */
} wb_http_page;

/* Build a body of body_len printable bytes from seed (the same seed, the same bytes). 0 or -ENOMEM. */
int wb_http_page_init(wb_http_page *p, size_t body_len, uint64_t seed, int64_t timeout_ns);
void wb_http_page_fini(wb_http_page *p);

/* The server's handler (a wb_conn_fn; ctx is a wb_http_page): serve requests until the connection ends. */
int wb_http_serve(void *ctx, int fd, wb_io io);

/* ------------------------------------------------------------------------ */
/* URLs                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct wb_url {
  char host[256];      /* without brackets for an IPv6 literal */
  char port[8];        /* "80" when the URL has none */
  char path[1024];     /* from the first '/', query included; "/" when empty */
  char authority[300]; /* the Host header: host[:port] as written */
} wb_url;

/* Parse "http://host[:port][/path]". Returns 0, or -EINVAL with err filled. */
int wb_url_parse(const char *s, wb_url *u, char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* The client                                                                */
/* ------------------------------------------------------------------------ */

/* What the requests of one run share. Set the inputs, then wb_http_client_init. */
typedef struct wb_http_client {
  /* inputs */
  wb_io io;
  wb_addr addr;
  const wb_url *url;
  bool keepalive;     /* reuse connections (HTTP/1.1 persistent); else "Connection: close" per request */
  bool checksum;      /* FNV-1a of each body into the response */
  size_t expect_len;  /* the body length every response must have; SIZE_MAX: any */
  int64_t timeout_ns; /* the limit of one request (connect included) */
  size_t pool_cap;    /* keep-alive: most idle connections kept (the concurrency) */
  bool fresh;         /* keep-alive: a request opens its own connection (then pools it); set between runs */
  /* state */
  char *req; /* the request line and headers */
  size_t req_len;
  struct wb_pool_shard *shards; /* the idle kept-alive connections, a shard per CPU (http.c) */
  size_t nshards;
  atomic_size_t nidle;    /* idle connections in all shards (at most pool_cap) */
  atomic_uint retries;    /* connect retries (backoff after a timed-out attempt) */
  atomic_uint reconnects; /* keep-alive: a reused connection the server had closed, retried fresh */
  atomic_uint connects;   /* connections opened (retries and reconnects included) */
} wb_http_client;

int wb_http_client_init(wb_http_client *c);
/* Idle connections in the pool now (not while requests run). */
size_t wb_http_client_idle(const wb_http_client *c);
/* Close the idle connections and free the client's state. */
void wb_http_client_fini(wb_http_client *c);

typedef struct wb_http_resp {
  int status;        /* the status code */
  size_t body_len;   /* bytes of body read */
  uint64_t body_sum; /* FNV-1a of the body when the client checksums */
  const char *stage; /* on failure: "connect", "send", "recv", "response" */
  char detail[128];  /* on a protocol failure: what was wrong ("" otherwise) */
} wb_http_resp;

/*
 * One GET: connect (or take an idle connection), send, read the whole
 * response (status line, headers, Content-Length bytes of body, checked
 * against expect_len), then close, or put the connection back when both
 * sides keep it alive. A status other than 200 is an error. Returns 0, or
 * a negative errno with r->stage (and r->detail for the response's faults)
 * set; every descriptor is closed on failure. Any context, many at once.
 */
int wb_http_get(wb_http_client *c, wb_http_resp *r);

/* Record r's failure rc in e ("stage: what"). */
void wb_http_error(wb_errors *e, int rc, const wb_http_resp *r);

/*
 * The gpars http case (gpars_http.c): GET url instead of the loopback
 * server's page (NULL: the loopback server). Call before the case's setup;
 * `weft-bench gpars --url URL` is meant to call it.
 */
void wb_gpars_http_set_url(const char *url);

#endif /* WEFT_BENCH_HTTP_H */
