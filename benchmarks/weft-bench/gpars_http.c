/*
 * This file contains the gpars "http" case: each element GETs a 9 KiB page
 * over a new connection, as the GPars write-up fetched pages over HTTP, and
 * checksums the body (FNV-1a) into its output.
 *
 * The server is weft-bench's own loopback server (http.c on net.c's fiber
 * server: an acceptor fiber and a fiber per connection, on 127.0.0.1 port 0,
 * with a listen backlog of at least one per element, so that every element
 * of a map can connect at once), serving a fixed body made from the run's
 * seed. With wb_gpars_http_set_url() the elements GET that URL instead; the
 * expected checksum is then the one of a first GET at setup, and every
 * element's body must match it (a page that changes between GETs fails the
 * check, as it should: the case measures GETs of one page).
 *
 * The element uses weft's fiber-aware calls on every backend: on a fiber
 * (weft-blocking) a wait parks the fiber; on a plain thread or OpenMP task
 * (seq, weft-cpu, omp, pool-per-call) the same call blocks the thread in
 * poll(2). So each backend runs the same machine code, and the difference
 * is only how the waits are spent.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpars.h"
#include "http.h"
#include "net.h"
#include "server.h"
#include "weft.h"

#define HTTP_TIMEOUT_NS (10 * 1000000000LL) /* one GET, connect included */

static const char *gpars_url; /* set by wb_gpars_http_set_url; NULL: the loopback server */

void wb_gpars_http_set_url(const char *url) { gpars_url = url; }

typedef struct http_ctx {
  size_t n;
  wb_http_page page;
  bool have_page;
  wb_server *srv; /* NULL with a URL */
  wb_url url;
  wb_http_client cl;
  bool have_client;
  uint64_t expect; /* the body's checksum */
  uint64_t *out;   /* each element's body checksum */
  wb_errors errors;
  atomic_bool told; /* the first failure was printed */
} http_ctx;

static void http_teardown(void *p) {
  http_ctx *c = p;
  if (!c) return;
  if (c->have_client) wb_http_client_fini(&c->cl);
  if (c->srv) wb_server_stop(c->srv, NULL);
  if (c->have_page) wb_http_page_fini(&c->page);
  free(c->out);
  free(c);
}

static int http_setup(void **out, size_t items, uint64_t seed, char *err, size_t errlen) {
  http_ctx *c = calloc(1, sizeof *c);
  if (!c || !(c->out = calloc(items, sizeof *c->out))) {
    free(c);
    snprintf(err, errlen, "no memory for %zu elements", items);
    return -ENOMEM;
  }
  c->n = items;
  wb_errors_init(&c->errors);
  atomic_init(&c->told, false);
  /* A client socket per element in flight, and the server's end of each when the server is ours. */
  uint64_t limit;
  int rc = wb_net_fd_limit("gpars", (uint64_t)items * (gpars_url ? 1 : 2) + 64, &limit);
  if (rc < 0) {
    snprintf(err, errlen, "%zu elements need more file descriptors than the hard limit allows", items);
    http_teardown(c);
    return rc;
  }
  c->cl.io = WB_IO_WEFT;
  c->cl.checksum = true;
  c->cl.timeout_ns = HTTP_TIMEOUT_NS;
  c->cl.pool_cap = items;
  c->cl.expect_len = SIZE_MAX;
  if (gpars_url) {
    rc = wb_url_parse(gpars_url, &c->url, err, errlen);
    if (rc == 0) rc = wb_net_resolve(c->url.host, c->url.port, &c->cl.addr, err, errlen);
  } else {
    rc = wb_http_page_init(&c->page, WB_HTTP_BODY_BYTES, seed, HTTP_TIMEOUT_NS);
    if (rc < 0) {
      snprintf(err, errlen, "no memory for the page");
    } else {
      c->have_page = true;
      /* On fibers; without them, a thread per connection (see cmd_http.c). */
      rc = wb_server_start(weft_fibers_available() ? WB_IO_WEFT : WB_IO_PLAIN, items, 0, false, wb_http_serve,
                           &c->page, &c->srv, err, errlen);
    }
    if (rc == 0) {
      char hp[96], url[128];
      c->cl.addr = *wb_server_addr(c->srv);
      wb_net_addr_str(&c->cl.addr, hp, sizeof hp);
      snprintf(url, sizeof url, "http://%s/", hp);
      rc = wb_url_parse(url, &c->url, err, errlen);
      c->cl.expect_len = WB_HTTP_BODY_BYTES;
      c->expect = c->page.body_sum;
    }
  }
  if (rc == 0) {
    c->cl.url = &c->url;
    rc = wb_http_client_init(&c->cl);
    if (rc < 0)
      snprintf(err, errlen, "no memory for the client");
    else
      c->have_client = true;
  }
  if (rc == 0 && gpars_url) {
    /* An outside page: its checksum is whatever a first GET gives. */
    wb_http_resp r;
    rc = wb_http_get(&c->cl, &r);
    if (rc < 0)
      snprintf(err, errlen, "GET %s: %s: %s", gpars_url, r.stage ? r.stage : "request",
               r.detail[0] ? r.detail : weft_strerror(rc));
    c->expect = r.body_sum;
  }
  if (rc < 0) {
    http_teardown(c);
    return rc;
  }
  *out = c;
  return 0;
}

static int http_element(void *p, size_t i) {
  http_ctx *c = p;
  wb_http_resp r;
  int rc = wb_http_get(&c->cl, &r);
  if (rc < 0) {
    /* The map reports only the code: say once what went wrong, in full. */
    wb_http_error(&c->errors, rc, &r);
    if (!atomic_exchange(&c->told, true))
      fprintf(stderr, "weft-bench gpars: http element %zu: %s: %s\n", i, r.stage ? r.stage : "request",
              r.detail[0] ? r.detail : weft_strerror(rc));
    return rc;
  }
  c->out[i] = r.body_sum;
  return 0;
}

static void http_reset(void *p) {
  http_ctx *c = p;
  /* ~expect: a value no element writes, so that a skipped element shows. */
  for (size_t i = 0; i < c->n; i++) c->out[i] = ~c->expect;
}

static int http_check(void *p, char *err, size_t errlen) {
  http_ctx *c = p;
  for (size_t i = 0; i < c->n; i++) {
    if (c->out[i] != c->expect) {
      snprintf(err, errlen, "element %zu: body checksum %016llx, expected %016llx", i,
               (unsigned long long)c->out[i], (unsigned long long)c->expect);
      return -EIO;
    }
  }
  return 0;
}

const gpars_case wb_gpars_http = {
    .name = "http",
    .what = "GET a 9 KiB page over a new loopback connection, one request per element",
    .default_items = 100,
    .setup = http_setup,
    .element = http_element,
    .reset = http_reset,
    .check = http_check,
    .teardown = http_teardown,
};
