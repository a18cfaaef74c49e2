/*
 * Suite "bad_input": every public function of weft.h given bad input: NULL
 * pointers, sizes that overflow, deadlines below -1, closed and invalid
 * descriptors, settings out of range, futures freed twice or used after
 * free, weft_shutdown where it would wait for itself, and every family of
 * calls after weft_shutdown (they start the runtime again). Each call must
 * give its documented error (or, for misuse that cannot be reported, abort
 * with a message, which is checked in a child process); nothing may crash,
 * hang, run a callback that should not run, or be lost.
 *
 * The calls that behave differently on a fiber are tried on a plain thread
 * and on a fiber (a blocking future); with WEFT_FIBERS=0 the second is a
 * thread too.
 *
 * Checks that may run off the main thread use CHECK, which counts and
 * prints failures (CUnit's assertions are not thread-safe); each test
 * asserts at the end that none were counted.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"
#include "stress/reliability.h"

/*
 * Huge sizes must fail with -ENOMEM, which needs the sanitizers' allocators
 * to return NULL for them as malloc does, instead of reporting the request
 * as an error of the program.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

static atomic_int failures;
static atomic_int tried; /* bad inputs tried, for the summary line */

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    atomic_fetch_add(&tried, 1);                                                                             \
    if (!(cond)) {                                                                                           \
      atomic_fetch_add(&failures, 1);                                                                        \
      fprintf(stderr, "\n  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                           \
    }                                                                                                        \
  } while (0)

/* CHECK(a == b) for integers, with both values in the message. */
#define CHECK_EQ(a, b)                                                                                       \
  do {                                                                                                       \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                                    \
    atomic_fetch_add(&tried, 1);                                                                             \
    if (va_ != vb_) {                                                                                        \
      atomic_fetch_add(&failures, 1);                                                                        \
      fprintf(stderr, "\n  %s:%d: %s is %lld (%s), expected %s = %lld\n", __FILE__, __LINE__, #a, va_,       \
              weft_strerror((int)va_), #b, vb_);                                                             \
    }                                                                                                        \
  } while (0)

static void begin(void) { atomic_store(&failures, 0); }
static void end(void) { CU_ASSERT_EQUAL(atomic_load(&failures), 0); }

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

/* Run fn(arg) on a fiber (a blocking future; a thread without fibers) and wait for it. */
static void on_fiber(void *(*fn)(void *), void *arg) {
  weft_future *f = NULL;
  int rc = weft_future_start(WEFT_BLOCKING, fn, arg, &f);
  CHECK_EQ(rc, 0);
  if (rc == 0) {
    CHECK_EQ(weft_future_get(f, -1, NULL), 0);
    weft_future_free(f);
  }
}

/* --- weft_pmap ------------------------------------------------------------------------------------- */

typedef struct hits {
  size_t n;
  atomic_uint *h;
  atomic_size_t calls;
} hits;

static int hit(void *ctx, size_t i) {
  hits *h = ctx;
  atomic_fetch_add(&h->calls, 1);
  if (i < h->n) atomic_fetch_add(&h->h[i], 1);
  return 0;
}

static void hits_init(hits *h, size_t n) {
  h->n = n;
  h->h = calloc(n ? n : 1, sizeof *h->h);
  atomic_init(&h->calls, 0);
}

/* Every index in [0, n) ran exactly once, and nothing else ran. */
static bool hits_once(hits *h) {
  for (size_t i = 0; i < h->n; i++)
    if (atomic_load(&h->h[i]) != 1) return false;
  return atomic_load(&h->calls) == h->n;
}

static void test_pmap_args(void) {
  begin();
  hits h;
  hits_init(&h, 8);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  /* NULL fn: -EINVAL whatever n, even 0. */
  CHECK_EQ(weft_pmap(8, NULL, &h, NULL), -EINVAL);
  CHECK_EQ(weft_pmap(0, NULL, &h, NULL), -EINVAL);
  CHECK_EQ(weft_pmap(SIZE_MAX, NULL, &h, &blocking), -EINVAL);
  /* A kind that is not a weft_kind; flags not 0. */
  int bad_kinds[] = {-1, 2, 7, INT_MAX, INT_MIN};
  for (size_t k = 0; k < sizeof bad_kinds / sizeof bad_kinds[0]; k++) {
    o.kind = (weft_kind)bad_kinds[k];
    CHECK_EQ(weft_pmap(8, hit, &h, &o), -EINVAL);
  }
  o.kind = WEFT_BLOCKING;
  unsigned bad_flags[] = {1, 0x80000000u, UINT_MAX};
  for (size_t k = 0; k < 3; k++) {
    o.flags = bad_flags[k];
    CHECK_EQ(weft_pmap(8, hit, &h, &o), -EINVAL);
    o.kind = WEFT_CPU;
  }
  CHECK_EQ(atomic_load(&h.calls), 0); /* nothing ran */
  /* n = 0 runs nothing and succeeds; NULL opts is the default (CPU). */
  CHECK_EQ(weft_pmap(0, hit, &h, NULL), 0);
  CHECK_EQ(weft_pmap(0, hit, &h, &blocking), 0);
  CHECK_EQ(atomic_load(&h.calls), 0);
  CHECK_EQ(weft_pmap(8, hit, &h, NULL), 0);
  CHECK(hits_once(&h));
  free(h.h);
  /* max_parallel larger than n, and the largest there is: no bound in effect. */
  weft_pmap_opts big = {WEFT_BLOCKING, 0, SIZE_MAX, 0};
  hits_init(&h, 100);
  CHECK_EQ(weft_pmap(100, hit, &h, &big), 0);
  CHECK(hits_once(&h));
  free(h.h);
  end();
}

/*
 * A grain so large that claiming a chunk passes SIZE_MAX: the range's
 * counter must not wrap round and hand out index 0 again. (Two or more
 * workers claim: the first takes [0, n), the next one's fetch-and-add moves
 * the counter past SIZE_MAX.)
 */
static void test_pmap_huge_grain(void) {
  begin();
  const size_t grains[] = {(size_t)1 << 63, ((size_t)1 << 63) + 1, (size_t)1 << 62,
                           SIZE_MAX,        SIZE_MAX - 1,          SIZE_MAX / 3};
  for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
    for (size_t n = 1; n <= 64; n *= 4) {
      hits h;
      hits_init(&h, n);
      weft_pmap_opts o = {WEFT_CPU, grains[g], 0, 0};
      CHECK_EQ(weft_pmap(n, hit, &h, &o), 0);
      if (!hits_once(&h))
        fprintf(stderr, "\n  grain %zu, n %zu: %zu calls for %zu elements\n", grains[g], n,
                atomic_load(&h.calls), n);
      CHECK(hits_once(&h));
      free(h.h);
    }
  }
  end();
}

/* A child: a CPU map of SIZE_MAX elements starts running (it allocates nothing per element). */
static atomic_size_t huge_calls;
static int huge_fn(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  if (atomic_fetch_add(&huge_calls, 1) == 200000) rel_ok_exit(); /* it runs: enough */
  return 0;
}

static void huge_child(void *arg) {
  const weft_pmap_opts *o = arg;
  int rc = weft_pmap(SIZE_MAX, huge_fn, NULL, o);
  fprintf(stderr, "weft_pmap(SIZE_MAX) returned %d (%s) after %zu calls\n", rc, weft_strerror(rc),
          atomic_load(&huge_calls));
  _exit(rc == -ENOMEM && atomic_load(&huge_calls) == 0 ? 2 : 1);
}

/*
 * n = SIZE_MAX. No kind needs memory per element: a blocking map on fibers
 * makes a fiber only when an element parks (api/pmap_fibers.c), a CPU map
 * and the fallback hand out indices from counters. So the call is valid and
 * runs; checked in a child that leaves after 200,000 elements. (The first
 * version refused it with -ENOMEM: it allocated a fiber record per element
 * up front.)
 */
static void test_pmap_huge_n(void) {
  begin();
  weft_pmap_opts cpu = WEFT_PMAP_OPTS_INIT, cpu_grain = {WEFT_CPU, 1000, 0, 0},
                 bounded = {WEFT_BLOCKING, 0, 4, 0};
  const weft_pmap_opts *kinds[] = {&cpu, &cpu_grain, &bounded, &blocking};
  size_t nk = !rel_can_fork() ? 0 : 4;
  for (size_t k = 0; k < nk; k++) {
    char err[512], st[64];
    int s = rel_child(huge_child, (void *)kinds[k], 60, err, sizeof err);
    if (!rel_child_ok(s, err))
      fprintf(stderr, "\n  weft_pmap(SIZE_MAX) kind %zu: %s: %s\n", k, rel_status(s, st, sizeof st), err);
    CHECK(rel_child_ok(s, err));
  }
  end();
}

/* --- futures --------------------------------------------------------------------------------------- */

static atomic_int fn_runs;
static void *count_fn(void *arg) {
  atomic_fetch_add(&fn_runs, 1);
  return arg;
}

static void test_future_args(void) {
  begin();
  atomic_store(&fn_runs, 0);
  weft_kind kinds[] = {WEFT_CPU, WEFT_BLOCKING};
  for (int k = 0; k < 2; k++) {
    weft_future *f = (weft_future *)0x10;
    CHECK_EQ(weft_future_start(kinds[k], NULL, NULL, &f), -EINVAL);
    CHECK(f == (weft_future *)0x10); /* untouched on error */
    CHECK_EQ(weft_future_start(kinds[k], count_fn, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_future_start(kinds[k], NULL, NULL, NULL), -EINVAL);
  }
  int bad_kinds[] = {-1, 2, 99, INT_MIN};
  for (size_t k = 0; k < 4; k++) {
    weft_future *f = NULL;
    CHECK_EQ(weft_future_start((weft_kind)bad_kinds[k], count_fn, NULL, &f), -EINVAL);
    CHECK(f == NULL);
  }
  CHECK_EQ(weft_future_get(NULL, -1, NULL), -EINVAL);
  CHECK_EQ(weft_future_get(NULL, 0, NULL), -EINVAL);
  CHECK_EQ(weft_future_cancel(NULL), -EINVAL);
  CHECK(!weft_future_done(NULL));
  weft_future_free(NULL);
  for (int k = 0; k < 2; k++) {
    weft_future *f = NULL;
    CHECK_EQ(weft_future_start(kinds[k], count_fn, (void *)7, &f), 0);
    /* Deadlines below -1 are -EINVAL, before and after the result is there. */
    const int64_t bad[] = {-2, -1000, INT64_MIN};
    for (size_t d = 0; d < 3; d++) CHECK_EQ(weft_future_get(f, bad[d], NULL), -EINVAL);
    void *r = NULL;
    CHECK_EQ(weft_future_get(f, -1, &r), 0);
    CHECK(r == (void *)7);
    for (size_t d = 0; d < 3; d++) CHECK_EQ(weft_future_get(f, bad[d], NULL), -EINVAL);
    /* Cancel after the end: -EALREADY, as often as asked; the result stays. */
    CHECK_EQ(weft_future_cancel(f), -EALREADY);
    CHECK_EQ(weft_future_cancel(f), -EALREADY);
    CHECK_EQ(weft_future_get(f, 0, &r), 0);
    weft_future_free(f);
  }
  CHECK_EQ(atomic_load(&fn_runs), 2); /* only the two good starts ran */
  end();
}

/* Death tests: misuse of a freed future aborts with a message in test builds. */
typedef enum { UAF_GET, UAF_DONE, UAF_CANCEL, UAF_FREE } uaf_op;
typedef struct uaf_arg {
  weft_kind kind;
  uaf_op op;
} uaf_arg;

static void uaf_child(void *arg) {
  uaf_arg *a = arg;
  weft_future *f = NULL;
  if (weft_future_start(a->kind, count_fn, NULL, &f) != 0) _exit(3);
  weft_future_get(f, -1, NULL);
  weft_future_free(f);
  switch (a->op) {
  case UAF_GET:
    weft_future_get(f, -1, NULL);
    break;
  case UAF_DONE:
    (void)weft_future_done(f);
    break;
  case UAF_CANCEL:
    weft_future_cancel(f);
    break;
  case UAF_FREE:
    weft_future_free(f);
    break;
  }
  _exit(4); /* not caught */
}

static void test_future_after_free(void) {
  begin();
  if (!rel_can_fork()) return;
#if defined(WEFT_TESTING)
  const char *names[] = {"weft_future_get", "weft_future_done", "weft_future_cancel", "weft_future_free"};
  for (int k = 0; k < 2; k++) {
    for (int op = 0; op < 4; op++) {
      uaf_arg a = {k ? WEFT_BLOCKING : WEFT_CPU, (uaf_op)op};
      char err[1024], st[64];
      int s = rel_child(uaf_child, &a, 30, err, sizeof err);
      bool ok = WIFSIGNALED(s) && WTERMSIG(s) == SIGABRT && strstr(err, names[op]) &&
                (strstr(err, "not a live future") || strstr(err, "freed twice"));
      if (!ok) fprintf(stderr, "\n  %s after free: %s: %s\n", names[op], rel_status(s, st, sizeof st), err);
      CHECK(ok);
    }
  }
#endif
  end();
}

/* --- time ------------------------------------------------------------------------------------------ */

static void *time_calls(void *arg) {
  (void)arg;
  const int64_t bad[] = {-1, -2, INT64_MIN};
  for (size_t k = 0; k < 3; k++) CHECK_EQ(weft_sleep_ns(bad[k]), -EINVAL);
  for (size_t k = 0; k < 3; k++) CHECK_EQ(weft_sleep_until(bad[k]), -EINVAL);
  CHECK_EQ(weft_sleep_ns(0), 0);
  CHECK_EQ(weft_sleep_until(0), 0); /* 0 tries once: already past */
  int64_t t0 = weft_now_ns();
  CHECK_EQ(weft_sleep_until(t0 - 1000), 0);
  CHECK_EQ(weft_sleep_until(1), 0);
  CHECK_EQ(weft_yield(), 0);
  int64_t d = weft_now_ns() + 2 * REL_MS;
  CHECK_EQ(weft_sleep_until(d), 0);
  CHECK(weft_now_ns() >= d); /* never early */
  CHECK(!weft_cancelled());
  return NULL;
}

static atomic_int huge_slept;
static void *sleep_forever(void *arg) {
  int64_t ns = (int64_t)(intptr_t)arg;
  atomic_store(&huge_slept, 1);
  /* Saturating arithmetic: INT64_MAX ns from now is "forever", not a negative deadline. */
  int rc = ns ? weft_sleep_ns(INT64_MAX) : weft_sleep_until(INT64_MAX);
  return (void *)(intptr_t)rc;
}

static void test_time_args(void) {
  begin();
  time_calls(NULL);
  on_fiber(time_calls, NULL);
  /* The largest sleeps end only by cancellation. */
  for (int k = 0; k < 2; k++) {
    atomic_store(&huge_slept, 0);
    weft_future *f = NULL;
    CHECK_EQ(weft_future_start(WEFT_BLOCKING, sleep_forever, (void *)(intptr_t)k, &f), 0);
    while (!atomic_load(&huge_slept)) weft_test_sleep_ms(1);
    weft_test_sleep_ms(5);
    CHECK(!weft_future_done(f));
    int c = weft_future_cancel(f);
    CHECK(c == -EBUSY || c == 0);
    void *r = NULL;
    int g = weft_future_get(f, -1, &r);
    if (c == -EBUSY) {
      CHECK_EQ(g, 0);
      CHECK_EQ((intptr_t)r, -ECANCELED);
    } else {
      CHECK_EQ(g, -ECANCELED);
    }
    weft_future_free(f);
  }
  end();
}

/*
 * Deadline 0 ("try once") on a fiber, when the wait finds nothing: the
 * fiber must be left as it was. Each case is followed by a real wait with a
 * deadline, which must neither end early nor report anything but
 * -ETIMEDOUT. (A deadline-0 wait that readies its own fiber leaves a stale
 * entry in the carrier's run queue, and the next park returns at once.)
 */
static atomic_int zero_release;
static void *wait_release(void *arg) {
  (void)arg;
  while (!atomic_load(&zero_release)) weft_sleep_ns(200000);
  return (void *)1;
}

static void after_zero(const char *what) {
  weft_sem_t s;
  weft_sem_init(&s, 0);
  int64_t d = weft_now_ns() + 5 * REL_MS;
  int rc = weft_sem_wait(&s, d);
  int64_t now = weft_now_ns();
  if (rc != -ETIMEDOUT || now < d)
    fprintf(stderr, "\n  after %s: weft_sem_wait returned %d (%s) %lld ns before its deadline\n", what, rc,
            weft_strerror(rc), (long long)(d - now));
  CHECK_EQ(rc, -ETIMEDOUT);
  CHECK(now >= d);
  weft_sem_destroy(&s);
  d = weft_now_ns() + 5 * REL_MS;
  rc = weft_sleep_until(d);
  now = weft_now_ns();
  if (rc != 0 || now < d)
    fprintf(stderr, "\n  after %s: weft_sleep_until returned %d %lld ns before its deadline\n", what, rc,
            (long long)(d - now));
  CHECK_EQ(rc, 0);
  CHECK(now >= d);
}

static void *zero_deadlines(void *arg) {
  weft_future *pending = arg;
  CHECK_EQ(weft_sleep_until(0), 0);
  after_zero("weft_sleep_until(0)");
  CHECK_EQ(weft_future_get(pending, 0, NULL), -ETIMEDOUT);
  after_zero("weft_future_get(pending future, 0)");
  return NULL;
}

static void test_fiber_deadline_zero(void) {
  begin();
  atomic_store(&zero_release, 0);
  weft_future *pending = NULL;
  CHECK_EQ(weft_future_start(WEFT_BLOCKING, wait_release, NULL, &pending), 0);
  zero_deadlines(pending);
  weft_future *f = NULL;
  CHECK_EQ(weft_future_start(WEFT_BLOCKING, zero_deadlines, pending, &f), 0);
  CHECK_EQ(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
  atomic_store(&zero_release, 1);
  CHECK_EQ(weft_future_get(pending, -1, NULL), 0);
  weft_future_free(pending);
  end();
}

/* --- settings -------------------------------------------------------------------------------------- */

static void test_configure_args(void) {
  begin();
  weft_config_init(NULL); /* ignored */
  CHECK_EQ(weft_configure(NULL), -EINVAL);
  CHECK_EQ(weft_get_info(NULL), -EINVAL);
  weft_shutdown();
  weft_config c;
  /* A good setting, then bad ones: each is refused and changes nothing. */
  weft_config_init(&c);
  c.stack_size = 64 * 1024;
  CHECK_EQ(weft_configure(&c), 0);
  struct {
    const char *what;
    weft_config c;
  } bad[16];
  size_t nb = 0;
#define BAD(field, value)                                                                                    \
  do {                                                                                                       \
    weft_config_init(&bad[nb].c);                                                                            \
    bad[nb].c.field = value;                                                                                 \
    bad[nb].what = #field " = " #value;                                                                      \
    nb++;                                                                                                    \
  } while (0)
  BAD(fibers, 2);
  BAD(fibers, -2);
  BAD(fibers, INT_MIN);
  BAD(trace_pinned, 2);
  BAD(trace_pinned, -3);
  BAD(io_uring, 5);
  BAD(io_uring, -2);
  BAD(stack_size, 1);
  BAD(stack_size, 16 * 1024 - 1);
  BAD(stack_size, ((size_t)1 << 30) + 1);
  BAD(stack_size, SIZE_MAX);
  BAD(carriers, 70000);
  BAD(max_carriers, 70000);
  BAD(carriers, UINT_MAX);
  /* More carriers than max_carriers: given both, and with max_carriers at its default (256). */
  weft_config_init(&bad[nb].c);
  bad[nb].c.carriers = 8;
  bad[nb].c.max_carriers = 4;
  bad[nb++].what = "carriers 8 > max_carriers 4";
#undef BAD
  for (size_t k = 0; k < nb; k++) {
    int rc = weft_configure(&bad[k].c);
    if (rc != -EINVAL)
      fprintf(stderr, "\n  weft_configure(%s) returned %d (%s)\n", bad[k].what, rc, weft_strerror(rc));
    CHECK_EQ(rc, -EINVAL);
    weft_info i;
    CHECK_EQ(weft_get_info(&i), 0);
    CHECK_EQ(i.stack_size, 64 * 1024); /* the good setting stands */
  }
  /* More carriers than the default max_carriers (256), max_carriers left at 0. */
  weft_config_init(&c);
  c.carriers = 300;
  int rc300 = weft_configure(&c);
  if (rc300 != -EINVAL)
    fprintf(stderr, "\n  weft_configure(carriers 300 > the default max_carriers 256) returned %d (%s)\n",
            rc300, weft_strerror(rc300));
  CHECK_EQ(rc300, -EINVAL);
  weft_config_init(&c);
  c.stack_size = 64 * 1024;
  CHECK_EQ(weft_configure(&c), 0);
  /* While the fiber runtime runs: -EBUSY, and nothing changes. */
  if (weft_fibers_available()) {
    weft_config_init(&c);
    c.stack_size = 128 * 1024;
    CHECK_EQ(weft_configure(&c), -EBUSY);
    weft_info i;
    weft_get_info(&i);
    CHECK_EQ(i.stack_size, 64 * 1024);
    CHECK_EQ(weft_configure(&bad[0].c), -EINVAL); /* a bad one is still -EINVAL first */
  }
  weft_shutdown();
  weft_config_init(&c);
  CHECK_EQ(weft_configure(&c), 0);
  end();
}

/* Settings from the environment that are out of range or not numbers fall back to the defaults. */
static void env_child(void *arg) {
  (void)arg;
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  weft_configure(&c);
  const char *vars[][2] = {{"WEFT_STACK_SIZE", "1"},        {"WEFT_CARRIERS", "abc"},
                           {"WEFT_MAX_CARRIERS", "0"},      {"WEFT_FIBERS", "maybe"},
                           {"WEFT_PIN_THRESHOLD_MS", "-5"}, {"WEFT_OFFLOAD_MAX", "x"},
                           {"WEFT_IO_URING", "2"},          {"WEFT_TRACE_PINNED", "sometimes"}};
  for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) setenv(vars[k][0], vars[k][1], 1);
  weft_info i;
  weft_get_info(&i);
  int bad = 0;
  if (i.stack_size != 256 * 1024) bad |= 1;
  if (i.carriers != weft_test_cpus() && i.carriers != 256) bad |= 2;
  /* fibers: "maybe" is not a boolean, so the default (on) applies where there is a context switch */
  if (strcmp(i.context_switch, "none") != 0 && !weft_fibers_available()) bad |= 4;
  setenv("WEFT_STACK_SIZE", "2g", 1); /* over 1 GiB */
  weft_get_info(&i);
  if (i.stack_size != 256 * 1024) bad |= 8;
  setenv("WEFT_STACK_SIZE", "99999999999999999999999", 1); /* does not fit */
  weft_get_info(&i);
  if (i.stack_size != 256 * 1024) bad |= 16;
  if (weft_pmap(100, hit, &(hits){0}, &blocking) != 0) bad |= 32;
  weft_shutdown();
  if (bad) {
    fprintf(stderr, "env settings: failures 0x%x\n", bad);
    _exit(1);
  }
  rel_ok_exit();
}

static void test_env_args(void) {
  begin();
  if (!rel_can_fork()) return;
  char err[2048], st[64];
  int s = rel_child(env_child, NULL, 60, err, sizeof err);
  if (!rel_child_ok(s, err)) fprintf(stderr, "\n  %s: %s\n", rel_status(s, st, sizeof st), err);
  CHECK(rel_child_ok(s, err));
  end();
}

static void test_strerror_info(void) {
  begin();
  for (int e = -5000; e <= 5000; e++) {
    const char *m = weft_strerror(e);
    CHECK(m != NULL && m[0] != '\0');
  }
  const int odd[] = {INT_MIN, INT_MIN + 1, INT_MAX, -EINVAL, -ESHUTDOWN};
  for (size_t k = 0; k < 5; k++) CHECK(weft_strerror(odd[k]) != NULL && weft_strerror(odd[k])[0]);
  CHECK(strcmp(weft_strerror(0), "success") == 0);
  CHECK(strstr(weft_strerror(1), "not a weft error") != NULL);
  weft_info i;
  CHECK_EQ(weft_get_info(&i), 0);
  CHECK(i.version && i.context_switch && i.openmp_runtime && i.stack_guard && i.compiler);
  end();
}

/* --- I/O ------------------------------------------------------------------------------------------- */

/* A descriptor number that is surely closed: high, so that no other open can take it meanwhile. */
static int closed_fd(void) {
  int p[2];
  if (pipe(p) != 0) return 999;
  int hi = dup2(p[0], 997);
  close(p[0]);
  close(p[1]);
  if (hi >= 0) close(hi);
  return 997;
}

static void *io_calls(void *arg) {
  bool huge_fd = arg != NULL; /* INT_MAX too: see test_accept_huge_fd for why not on fibers */
  char buf[16] = {0};
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  socklen_t sl = sizeof sa;
  int cfd = closed_fd();
  const int badfds[] = {-1, -1000, INT_MIN, cfd, INT_MAX};
  for (size_t k = 0; k < sizeof badfds / sizeof badfds[0] - (huge_fd ? 0 : 1); k++) {
    int fd = badfds[k];
    CHECK_EQ(weft_read(fd, buf, sizeof buf, -1), -EBADF);
    CHECK_EQ(weft_write(fd, buf, sizeof buf, -1), -EBADF);
    CHECK_EQ(weft_recv(fd, buf, sizeof buf, 0, -1), -EBADF);
    CHECK_EQ(weft_send(fd, buf, sizeof buf, 0, -1), -EBADF);
    CHECK_EQ(weft_accept(fd, NULL, NULL, -1), -EBADF);
    CHECK_EQ(weft_connect(fd, (struct sockaddr *)&sa, sl, -1), -EBADF);
    CHECK_EQ(weft_poll_fd(fd, POLLIN, -1), -EBADF);
  }
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const int64_t bad[] = {-2, -3, INT64_MIN};
  for (size_t d = 0; d < 3; d++) {
    CHECK_EQ(weft_read(sv[0], buf, sizeof buf, bad[d]), -EINVAL);
    CHECK_EQ(weft_write(sv[0], buf, sizeof buf, bad[d]), -EINVAL);
    CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0, bad[d]), -EINVAL);
    CHECK_EQ(weft_send(sv[0], buf, sizeof buf, 0, bad[d]), -EINVAL);
    CHECK_EQ(weft_accept(sv[0], NULL, NULL, bad[d]), -EINVAL);
    CHECK_EQ(weft_connect(sv[0], (struct sockaddr *)&sa, sl, bad[d]), -EINVAL);
    CHECK_EQ(weft_poll_fd(sv[0], POLLIN, bad[d]), -EINVAL);
  }
  /* NULL buffers with a length, lengths beyond SSIZE_MAX. */
  CHECK_EQ(weft_read(sv[0], NULL, 1, -1), -EINVAL);
  CHECK_EQ(weft_write(sv[0], NULL, 1, -1), -EINVAL);
  CHECK_EQ(weft_recv(sv[0], NULL, 1, 0, -1), -EINVAL);
  CHECK_EQ(weft_send(sv[0], NULL, 1, 0, -1), -EINVAL);
  CHECK_EQ(weft_read(sv[0], buf, (size_t)SSIZE_MAX + 1, -1), -EINVAL);
  CHECK_EQ(weft_write(sv[0], buf, SIZE_MAX, -1), -EINVAL);
  CHECK_EQ(weft_recv(sv[0], buf, SIZE_MAX, 0, -1), -EINVAL);
  CHECK_EQ(weft_send(sv[0], buf, SIZE_MAX, 0, -1), -EINVAL);
  /* accept: an address without its length; connect: no address; poll: no event asked. */
  CHECK_EQ(weft_accept(sv[0], (struct sockaddr *)&sa, NULL, -1), -EINVAL);
  CHECK_EQ(weft_connect(sv[0], NULL, sl, -1), -EINVAL);
  CHECK_EQ(weft_poll_fd(sv[0], 0, -1), -EINVAL);
  CHECK_EQ(weft_poll_fd(sv[0], POLLHUP, -1), -EINVAL);
  /* Nothing to read, deadline 0: -ETIMEDOUT at once; a past deadline too. */
  CHECK_EQ(weft_read(sv[0], buf, sizeof buf, 0), -ETIMEDOUT);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0, 1), -ETIMEDOUT);
  CHECK_EQ(weft_poll_fd(sv[0], POLLIN, 0), -ETIMEDOUT);
  /* accept on a socket that does not listen: the system's error, not a hang. */
  CHECK_EQ(weft_accept(sv[0], NULL, NULL, weft_now_ns() + 200 * REL_MS), -EINVAL);
  int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(tcp >= 0);
  int a = weft_accept(tcp, NULL, NULL, weft_now_ns() + 5000 * REL_MS);
  CHECK(a < 0 && a != -ETIMEDOUT);
  /* connect with a bad address length; to a port where nobody listens. */
  CHECK_EQ(weft_connect(tcp, (struct sockaddr *)&sa, 1, -1), -EINVAL);
  struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t ll = sizeof lo;
  CHECK(bind(probe, (struct sockaddr *)&lo, sizeof lo) == 0 &&
        getsockname(probe, (struct sockaddr *)&lo, &ll) == 0);
  close(probe); /* a port that was just free: nobody listens there */
  CHECK_EQ(weft_connect(tcp, (struct sockaddr *)&lo, sizeof lo, weft_now_ns() + 5000 * REL_MS),
           -ECONNREFUSED);
  close(tcp);
  /* A peer that has gone: -EPIPE (never SIGPIPE) for sockets; reads see the end. */
  close(sv[1]);
  CHECK_EQ(weft_send(sv[0], "x", 1, 0, -1), -EPIPE);
  CHECK_EQ(weft_write(sv[0], "x", 1, -1), -EPIPE);
  CHECK_EQ(weft_read(sv[0], buf, sizeof buf, -1), 0);
  int pr = weft_poll_fd(sv[0], POLLIN, -1);
  CHECK(pr > 0 && (pr & (POLLIN | POLLHUP)));
  close(sv[0]);
  return NULL;
}

static void test_io_args(void) {
  begin();
  io_calls((void *)1);
  on_fiber(io_calls, NULL);
  end();
}

/*
 * weft_accept on a fiber with a huge descriptor number: the poller indexes
 * its table of waits by descriptor and grows it to fit, before the kernel
 * has said whether the descriptor exists. For INT_MAX that is a table of
 * 2^31 entries: refused (-ENOMEM) where memory is short, written in full
 * where the system overcommits. The documented answer is -EBADF. Run in a
 * child whose address space is limited to 1 GiB more than it uses, so that
 * the table can never be had (not under the sanitizers, which need
 * terabytes of address space).
 */
static void *accept_huge(void *arg) {
  int fd = (int)(intptr_t)arg;
  return (void *)(intptr_t)weft_accept(fd, NULL, NULL, -1);
}

static void huge_fd_child(void *arg) {
  (void)arg;
  /* Through the carriers' epoll (io_uring off): the ring takes the descriptor as it is. */
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  c.io_uring = 0;
  weft_configure(&c);
  weft_fibers_available();
  size_t vm = weft_test_vm_size();
  struct rlimit rl = {vm + (1ul << 30), vm + (1ul << 30)};
  setrlimit(RLIMIT_AS, &rl);
  const int fds[] = {INT_MAX, 1 << 30};
  int bad = 0;
  for (int k = 0; k < 2; k++) {
    weft_future *fu = NULL;
    if (weft_future_start(WEFT_BLOCKING, accept_huge, (void *)(intptr_t)fds[k], &fu) != 0) _exit(3);
    void *r = NULL;
    weft_future_get(fu, -1, &r);
    weft_future_free(fu);
    if ((intptr_t)r != -EBADF) {
      fprintf(stderr, "weft_accept(%d) on a fiber returned %d (%s)\n", fds[k], (int)(intptr_t)r,
              weft_strerror((int)(intptr_t)r));
      bad = 1;
    }
  }
  if (bad) _exit(1);
  rel_ok_exit();
}

static void test_accept_huge_fd(void) {
  begin();
  if (!REL_SANITIZED && !weft_test_slow_env() && rel_can_fork()) {
    char err[1024], st[64];
    int s = rel_child(huge_fd_child, NULL, 60, err, sizeof err);
    if (!rel_child_ok(s, err)) fprintf(stderr, "\n  %s: %s\n", rel_status(s, st, sizeof st), err);
    CHECK(rel_child_ok(s, err));
  }
  end();
}

/* --- offload --------------------------------------------------------------------------------------- */

static void *blocking_calls(void *arg) {
  (void)arg;
  void *r = (void *)1;
  CHECK_EQ(weft_blocking(NULL, NULL, &r), -EINVAL);
  CHECK_EQ(weft_blocking(NULL, NULL, NULL), -EINVAL);
  CHECK(r == (void *)1); /* untouched */
  CHECK_EQ(weft_blocking(count_fn, (void *)3, NULL), 0);
  CHECK_EQ(weft_blocking(count_fn, (void *)4, &r), 0);
  CHECK(r == (void *)4);
  return NULL;
}

static void test_blocking_args(void) {
  begin();
  atomic_store(&fn_runs, 0);
  blocking_calls(NULL);
  on_fiber(blocking_calls, NULL);
  CHECK_EQ(atomic_load(&fn_runs), 4);
  end();
}

/* --- synchronisation ------------------------------------------------------------------------------- */

static weft_mutex_t held_elsewhere = WEFT_MUTEX_INITIALIZER;
static atomic_int held_state; /* 1: the holder has the mutex; 2: it may let go */
static void *hold_it(void *arg) {
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&held_elsewhere), 0);
  atomic_store(&held_state, 1);
  while (atomic_load(&held_state) != 2) weft_sleep_ns(100000);
  CHECK_EQ(weft_mutex_unlock(&held_elsewhere), 0);
  return NULL;
}

static void test_sync_args(void) {
  begin();
  const int64_t bad[] = {-2, -100, INT64_MIN};
  /* mutex */
  CHECK_EQ(weft_mutex_init(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_lock(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_trylock(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_unlock(NULL), -EINVAL);
  weft_mutex_destroy(NULL);
  weft_mutex_t m;
  CHECK_EQ(weft_mutex_init(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM); /* not held */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  CHECK_EQ(weft_mutex_lock(&m), -EDEADLK);
  CHECK_EQ(weft_mutex_trylock(&m), -EBUSY);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM);
  /* Held by another context (a fiber, or a thread): not ours to unlock. */
  atomic_store(&held_state, 0);
  weft_future *holder = NULL;
  CHECK_EQ(weft_future_start(WEFT_BLOCKING, hold_it, NULL, &holder), 0);
  while (atomic_load(&held_state) != 1) weft_test_sleep_ms(1);
  CHECK_EQ(weft_mutex_unlock(&held_elsewhere), -EPERM);
  CHECK_EQ(weft_mutex_trylock(&held_elsewhere), -EBUSY);
  atomic_store(&held_state, 2);
  CHECK_EQ(weft_future_get(holder, -1, NULL), 0);
  weft_future_free(holder);
  CHECK_EQ(weft_mutex_trylock(&held_elsewhere), 0);
  CHECK_EQ(weft_mutex_unlock(&held_elsewhere), 0);
  /* cond */
  weft_cond_t c;
  CHECK_EQ(weft_cond_init(NULL), -EINVAL);
  CHECK_EQ(weft_cond_init(&c), 0);
  CHECK_EQ(weft_cond_wait(NULL, &m, -1), -EINVAL);
  CHECK_EQ(weft_cond_wait(&c, NULL, -1), -EINVAL);
  CHECK_EQ(weft_cond_wait(&c, &m, -1), -EPERM); /* m not held */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  for (size_t d = 0; d < 3; d++) CHECK_EQ(weft_cond_wait(&c, &m, bad[d]), -EINVAL);
  CHECK_EQ(weft_cond_wait(&c, &m, 0), -ETIMEDOUT);
  CHECK_EQ(weft_cond_wait(&c, &m, 1), -ETIMEDOUT); /* a deadline long past */
  CHECK_EQ(weft_mutex_unlock(&m), 0);              /* still held after each */
  CHECK_EQ(weft_cond_signal(NULL), -EINVAL);
  CHECK_EQ(weft_cond_broadcast(NULL), -EINVAL);
  CHECK_EQ(weft_cond_signal(&c), 0); /* nobody waits: nothing happens */
  CHECK_EQ(weft_cond_broadcast(&c), 0);
  weft_cond_destroy(NULL);
  weft_cond_destroy(&c);
  weft_mutex_destroy(&m);
  /* semaphore */
  weft_sem_t s;
  CHECK_EQ(weft_sem_init(NULL, 1), -EINVAL);
  CHECK_EQ(weft_sem_wait(NULL, -1), -EINVAL);
  CHECK_EQ(weft_sem_post(NULL), -EINVAL);
  weft_sem_destroy(NULL);
  CHECK_EQ(weft_sem_init(&s, 0), 0);
  for (size_t d = 0; d < 3; d++) CHECK_EQ(weft_sem_wait(&s, bad[d]), -EINVAL);
  CHECK_EQ(weft_sem_wait(&s, 0), -ETIMEDOUT);
  CHECK_EQ(weft_sem_wait(&s, 1), -ETIMEDOUT);
  weft_sem_destroy(&s);
  CHECK_EQ(weft_sem_init(&s, UINT32_MAX), 0);
  CHECK_EQ(weft_sem_post(&s), -EOVERFLOW);
  CHECK_EQ(weft_sem_wait(&s, 0), 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_post(&s), -EOVERFLOW);
  weft_sem_destroy(&s);
  /* channel */
  weft_chan_t *ch = NULL;
  CHECK_EQ(weft_chan_create(4, 4, NULL), -EINVAL);
  CHECK_EQ(weft_chan_create(SIZE_MAX, 2, &ch), -EINVAL);     /* capacity * size overflows */
  CHECK_EQ(weft_chan_create(SIZE_MAX / 2, 2, &ch), -EINVAL); /* the header's bytes on top overflow */
  CHECK_EQ(weft_chan_create((size_t)1 << 42, 1, &ch), -ENOMEM);
  CHECK(ch == NULL);
  CHECK_EQ(weft_chan_send(NULL, "x", -1), -EINVAL);
  CHECK_EQ(weft_chan_recv(NULL, &s, -1), -EINVAL);
  CHECK_EQ(weft_chan_close(NULL), -EINVAL);
  weft_chan_free(NULL);
  CHECK_EQ(weft_chan_create(1, sizeof(int), &ch), 0);
  int v = 5;
  CHECK_EQ(weft_chan_send(ch, NULL, -1), -EINVAL); /* elem_size > 0 needs an element */
  CHECK_EQ(weft_chan_recv(ch, NULL, -1), -EINVAL);
  for (size_t d = 0; d < 3; d++) {
    CHECK_EQ(weft_chan_send(ch, &v, bad[d]), -EINVAL);
    CHECK_EQ(weft_chan_recv(ch, &v, bad[d]), -EINVAL);
  }
  CHECK_EQ(weft_chan_recv(ch, &v, 0), -ETIMEDOUT);
  CHECK_EQ(weft_chan_send(ch, &v, 0), 0);
  CHECK_EQ(weft_chan_send(ch, &v, 0), -ETIMEDOUT); /* full */
  CHECK_EQ(weft_chan_close(ch), 0);
  CHECK_EQ(weft_chan_close(ch), -EPIPE);
  CHECK_EQ(weft_chan_send(ch, &v, -1), -EPIPE);
  v = 0;
  CHECK_EQ(weft_chan_recv(ch, &v, -1), 0); /* what was buffered still comes out */
  CHECK_EQ(v, 5);
  CHECK_EQ(weft_chan_recv(ch, &v, -1), -EPIPE);
  weft_chan_free(ch);
  /* Elements of size 0: NULL is allowed. Unbuffered with nobody there: deadline 0 times out. */
  CHECK_EQ(weft_chan_create(0, 0, &ch), 0);
  CHECK_EQ(weft_chan_send(ch, NULL, 0), -ETIMEDOUT);
  CHECK_EQ(weft_chan_recv(ch, NULL, 0), -ETIMEDOUT);
  CHECK_EQ(weft_chan_close(ch), 0);
  CHECK_EQ(weft_chan_recv(ch, NULL, 0), -EPIPE);
  weft_chan_free(ch);
  end();
}

/* Destroying what someone waits on or holds is undefined; checking builds abort with a message. */
static weft_cond_t dead_c = WEFT_COND_INITIALIZER;
static weft_mutex_t dead_m = WEFT_MUTEX_INITIALIZER;
static weft_sem_t dead_s;
static weft_chan_t *dead_ch;
static atomic_int dead_waiting;

static void *dead_waiter(void *arg) {
  int which = (int)(intptr_t)arg;
  atomic_store(&dead_waiting, 1);
  int64_t d = weft_now_ns() + 10000 * REL_MS;
  int v;
  switch (which) {
  case 1:
    weft_mutex_lock(&dead_m);
    weft_cond_wait(&dead_c, &dead_m, d);
    weft_mutex_unlock(&dead_m);
    break;
  case 2:
    weft_sem_wait(&dead_s, d);
    break;
  default:
    weft_chan_recv(dead_ch, &v, d);
    break;
  }
  return NULL;
}

static void destroy_busy_child(void *arg) {
  int which = (int)(intptr_t)arg;
  weft_sem_init(&dead_s, 0);
  weft_chan_create(1, sizeof(int), &dead_ch);
  if (which == 0) {
    weft_mutex_lock(&dead_m);
    weft_mutex_destroy(&dead_m); /* held */
    _exit(4);
  }
  weft_future *f;
  weft_future_start(WEFT_BLOCKING, dead_waiter, (void *)(intptr_t)which, &f);
  while (!atomic_load(&dead_waiting)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(50); /* let it queue itself (if it has not, the child exits 4: reported) */
  if (which == 1) {
    weft_mutex_lock(&dead_m); /* the waiter let it go while waiting */
    weft_cond_destroy(&dead_c);
  } else if (which == 2) {
    weft_sem_destroy(&dead_s);
  } else {
    weft_chan_free(dead_ch);
  }
  _exit(4);
}

static void test_destroy_busy(void) {
  begin();
  if (!rel_can_fork()) return;
#if defined(WEFT_TESTING)
  const char *names[] = {"weft_mutex_destroy", "weft_cond_destroy", "weft_sem_destroy", "weft_chan_free"};
  for (int k = 0; k < 4; k++) {
    char err[1024], st[64];
    int s = rel_child(destroy_busy_child, (void *)(intptr_t)k, 30, err, sizeof err);
    bool ok = WIFSIGNALED(s) && WTERMSIG(s) == SIGABRT && strstr(err, names[k]);
    if (!ok) fprintf(stderr, "\n  %s while in use: %s: %s\n", names[k], rel_status(s, st, sizeof st), err);
    CHECK(ok);
  }
#endif
  end();
}

/* --- keys and scoped values ------------------------------------------------------------------------ */

static void *scope_fn(void *arg) {
  weft_key_t k = *(weft_key_t *)arg;
  void *v = (void *)1;
  CHECK_EQ(weft_scope_get(k, &v), 0);
  CHECK(v == NULL); /* bound to NULL is bound */
  CHECK_EQ(weft_scope_get(k, NULL), 0);
  return (void *)9;
}

static void test_keys_args(void) {
  begin();
  CHECK_EQ(weft_key_create(NULL, NULL), -EINVAL);
  const weft_key_t never[] = {0, 1, UINT64_MAX, (weft_key_t)1 << 40, 0xDEADBEEFull};
  for (size_t k = 0; k < 5; k++) {
    CHECK_EQ(weft_key_delete(never[k]), -EINVAL);
    CHECK(weft_local_get(never[k]) == NULL);
    CHECK_EQ(weft_local_set(never[k], (void *)1), -EINVAL);
    CHECK_EQ(weft_scope_run(never[k], NULL, scope_fn, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_scope_get(never[k], NULL), -EINVAL);
  }
  weft_key_t key;
  CHECK_EQ(weft_key_create(&key, NULL), 0);
  CHECK_EQ(weft_scope_get(key, NULL), -ENOENT);
  void *r = NULL;
  CHECK_EQ(weft_scope_run(key, NULL, NULL, NULL, &r), -EINVAL);
  CHECK_EQ(weft_scope_run(key, NULL, scope_fn, &key, &r), 0);
  CHECK(r == (void *)9);
  CHECK_EQ(weft_scope_run(key, NULL, scope_fn, &key, NULL), 0);
  CHECK_EQ(weft_local_set(key, (void *)3), 0);
  CHECK(weft_local_get(key) == (void *)3);
  CHECK_EQ(weft_local_set(key, NULL), 0);
  CHECK_EQ(weft_key_delete(key), 0);
  /* A deleted key is unknown everywhere, and stays so once its slot is reused. */
  CHECK_EQ(weft_key_delete(key), -EINVAL);
  CHECK_EQ(weft_local_set(key, (void *)1), -EINVAL);
  CHECK(weft_local_get(key) == NULL);
  CHECK_EQ(weft_scope_get(key, NULL), -EINVAL);
  CHECK_EQ(weft_scope_run(key, NULL, scope_fn, &key, NULL), -EINVAL);
  weft_key_t again;
  CHECK_EQ(weft_key_create(&again, NULL), 0);
  CHECK(again != key);
  CHECK_EQ(weft_local_set(key, (void *)1), -EINVAL);
  CHECK_EQ(weft_key_delete(key), -EINVAL);
  CHECK_EQ(weft_key_delete(again), 0);
  end();
}

/* --- after weft_shutdown --------------------------------------------------------------------------- */

static void *after_fiber(void *arg) {
  (void)arg;
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  CHECK_EQ(weft_write(sv[0], "ping", 4, -1), 4);
  char b[4];
  CHECK_EQ(weft_read(sv[1], b, 4, -1), 4);
  close(sv[0]);
  close(sv[1]);
  CHECK_EQ(weft_sleep_ns(100000), 0);
  void *r = NULL;
  CHECK_EQ(weft_blocking(count_fn, (void *)5, &r), 0);
  CHECK(r == (void *)5);
  hits h;
  hits_init(&h, 300);
  CHECK_EQ(weft_pmap(300, hit, &h, NULL), 0); /* a CPU map from a fiber */
  CHECK(hits_once(&h));
  free(h.h);
  return (void *)11;
}

static weft_mutex_t after_m = WEFT_MUTEX_INITIALIZER;
static long after_count;
static int after_lock(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  if (weft_mutex_lock(&after_m) != 0) return 1;
  long c = after_count;
  weft_yield();
  after_count = c + 1;
  return weft_mutex_unlock(&after_m);
}

static void test_after_shutdown(void) {
  begin();
  for (int round = 0; round < 3; round++) {
    weft_shutdown();
    weft_shutdown(); /* twice in a row: nothing to do the second time */
    CHECK_EQ(weft_carrier_count(), 0);
    /* Each family of calls starts what it needs again. */
    hits h;
    hits_init(&h, 500);
    CHECK_EQ(weft_pmap(500, hit, &h, &blocking), 0);
    CHECK(hits_once(&h));
    free(h.h);
    weft_shutdown();
    hits_init(&h, 500);
    CHECK_EQ(weft_pmap(500, hit, &h, NULL), 0);
    CHECK(hits_once(&h));
    free(h.h);
    weft_shutdown();
    weft_kind kinds[] = {WEFT_CPU, WEFT_BLOCKING};
    for (int k = 0; k < 2; k++) {
      weft_future *f = NULL;
      CHECK_EQ(weft_future_start(kinds[k], after_fiber, NULL, &f), 0);
      void *r = NULL;
      CHECK_EQ(weft_future_get(f, -1, &r), 0);
      CHECK(r == (void *)11);
      weft_shutdown();
      /* A future not yet freed stays valid across a shutdown. */
      CHECK(weft_future_done(f));
      CHECK_EQ(weft_future_get(f, 0, &r), 0);
      weft_future_free(f);
    }
    after_count = 0;
    CHECK_EQ(weft_pmap(64, after_lock, NULL, &blocking), 0);
    CHECK_EQ(after_count, 64);
    weft_shutdown();
    CHECK_EQ(weft_sleep_ns(100000), 0);
    weft_shutdown();
    weft_config c;
    weft_config_init(&c);
    CHECK_EQ(weft_configure(&c), 0); /* the runtime is stopped: settings may change */
    if (weft_test_fibers_expected()) {
      CHECK(weft_fibers_available());
      CHECK(weft_carrier_count() > 0);
    }
  }
  end();
}

/* --- weft_shutdown where it would wait for itself: an abort with a message, not a hang ------------- */

static void *shutdown_fn(void *arg) {
  (void)arg;
  weft_shutdown();
  return NULL;
}
static int shutdown_elem(void *ctx, size_t i) {
  (void)ctx;
  if (i == 0) weft_shutdown();
  return 0;
}
static void *shutdown_offloaded(void *arg) {
  (void)arg;
  weft_blocking(shutdown_fn, NULL, NULL);
  return NULL;
}

typedef enum {
  SD_BLOCKING_FUTURE,
  SD_CPU_FUTURE,
  SD_BLOCKING_ELEM,
  SD_CPU_ELEM,
  SD_OFFLOADED,
  SD_N
} sd_where;
static const char *const sd_names[] = {"a blocking future", "a CPU future",
                                       "an element of a blocking weft_pmap", "an element of a CPU weft_pmap",
                                       "a call offloaded with weft_blocking"};

static void shutdown_child(void *arg) {
  sd_where w = (sd_where)(intptr_t)arg;
  weft_future *f = NULL;
  weft_pmap_opts cpu4 = {WEFT_CPU, 1, 0, 0};
  switch (w) {
  case SD_BLOCKING_FUTURE:
  case SD_CPU_FUTURE:
    weft_future_start(w == SD_CPU_FUTURE ? WEFT_CPU : WEFT_BLOCKING, shutdown_fn, NULL, &f);
    /* With a deadline the getter never runs the future itself: it runs on weft's own team. */
    while (weft_future_get(f, weft_now_ns() + 1000 * REL_MS, NULL) == -ETIMEDOUT) {
    }
    break;
  case SD_BLOCKING_ELEM:
    weft_pmap(4, shutdown_elem, NULL, &blocking);
    break;
  case SD_CPU_ELEM:
    weft_pmap(4, shutdown_elem, NULL, &cpu4);
    break;
  case SD_OFFLOADED:
    weft_future_start(WEFT_BLOCKING, shutdown_offloaded, NULL, &f);
    while (weft_future_get(f, weft_now_ns() + 1000 * REL_MS, NULL) == -ETIMEDOUT) {
    }
    break;
  default:
    break;
  }
  _exit(4); /* it returned: not caught */
}

static void test_shutdown_misuse(void) {
  begin();
  if (!rel_can_fork()) return;
  for (int w = 0; w < SD_N; w++) {
    /* Without fibers, blocking work runs on the CPU path: only the kinds that exist there apply. */
    char err[1024], st[64];
    int s = rel_child(shutdown_child, (void *)(intptr_t)w, 10, err, sizeof err);
    bool ok = WIFSIGNALED(s) && WTERMSIG(s) == SIGABRT && strstr(err, "weft_shutdown called");
    /*
     * An element of a CPU map that runs on the caller's own thread (a
     * plain thread: the master of the region, or the caller taking part
     * on weft's pool) is not weft's worker: its weft_shutdown does not
     * wait for itself, and returns. Either outcome is safe; a hang is not.
     */
    bool cpu_elem = w == SD_CPU_ELEM || (w == SD_BLOCKING_ELEM && !weft_test_fibers_expected());
    if (cpu_elem && WIFEXITED(s) && WEXITSTATUS(s) == 4) ok = true;
    if (!ok)
      fprintf(stderr, "\n  weft_shutdown from %s: %s (expected an abort with a message): %s\n", sd_names[w],
              rel_status(s, st, sizeof st), err);
    CHECK(ok);
  }
  end();
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"pmap_args", test_pmap_args},
      {"pmap_huge_grain", test_pmap_huge_grain},
      {"pmap_huge_n", test_pmap_huge_n},
      {"future_args", test_future_args},
      {"future_after_free", test_future_after_free},
      {"time_args", test_time_args},
      {"fiber_deadline_zero", test_fiber_deadline_zero},
      {"configure_args", test_configure_args},
      {"env_args", test_env_args},
      {"strerror_info", test_strerror_info},
      {"io_args", test_io_args},
      {"accept_huge_fd", test_accept_huge_fd},
      {"blocking_args", test_blocking_args},
      {"sync_args", test_sync_args},
      {"destroy_busy", test_destroy_busy},
      {"keys_args", test_keys_args},
      {"after_shutdown", test_after_shutdown},
      {"shutdown_misuse", test_shutdown_misuse},
      {NULL, NULL},
  };
  int rc = weft_test_run(argc, argv, "bad_input", tests);
  printf("bad_input: %d checks of bad input and misuse\n", atomic_load(&tried));
  return rc;
}
