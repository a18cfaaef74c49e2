/*
 * Suite "ompt": an OpenMP tool (OMPT, OpenMP 5.0 chapter 4) sees the work
 * weft runs on OpenMP's threads. weft opens ordinary parallel regions for a
 * map and for its own team (the host, where CPU futures run), so a tool
 * such as a profiler or a race detector must see each one begin and end,
 * and every element must run in an implicit task of a region the tool saw
 * begin, on the thread number omp_get_thread_num() reports.
 *
 * The tool is this executable: it defines ompt_start_tool, which the
 * runtime looks up when it starts. Built where the OpenMP runtime implements
 * OMPT (LLVM's libomp, with clang); libgomp has no OMPT, so under gcc the
 * suite is not built (tests/CMakeLists.txt says so at configure time).
 */
#include <omp-tools.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* --- the tool ------------------------------------------------------------------------------ */

#define MAX_REGIONS 4096

static ompt_get_parallel_info_t get_parallel_info;
static atomic_bool tool_on;
static atomic_uint_fast64_t next_region;     /* ids handed to regions, from 1 */
static atomic_int region_state[MAX_REGIONS]; /* 0 unseen, 1 begun, 2 ended (by id; ids past the end: 3) */
static atomic_uint_fast64_t begins, ends, implicit_begins;

static void on_parallel_begin(ompt_data_t *task, const ompt_frame_t *frame, ompt_data_t *parallel,
                              unsigned int requested, int flags, const void *codeptr) {
  (void)task, (void)frame, (void)requested, (void)flags, (void)codeptr;
  uint64_t id = atomic_fetch_add(&next_region, 1) + 1;
  parallel->value = id;
  if (id < MAX_REGIONS) atomic_store(&region_state[id], 1);
  atomic_fetch_add(&begins, 1);
}

static void on_parallel_end(ompt_data_t *parallel, ompt_data_t *task, int flags, const void *codeptr) {
  (void)task, (void)flags, (void)codeptr;
  uint64_t id = parallel->value;
  if (id > 0 && id < MAX_REGIONS) atomic_store(&region_state[id], 2);
  atomic_fetch_add(&ends, 1);
}

static void on_implicit_task(ompt_scope_endpoint_t ep, ompt_data_t *parallel, ompt_data_t *task,
                             unsigned int actual, unsigned int index, int flags) {
  (void)parallel, (void)task, (void)actual, (void)index;
  if (ep == ompt_scope_begin && (flags & ompt_task_implicit)) atomic_fetch_add(&implicit_begins, 1);
}

static int tool_init(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
  (void)device, (void)data;
  ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
  get_parallel_info = (ompt_get_parallel_info_t)lookup("ompt_get_parallel_info");
  if (!set || !get_parallel_info) return 0;
  if (set(ompt_callback_parallel_begin, (ompt_callback_t)on_parallel_begin) != ompt_set_always ||
      set(ompt_callback_parallel_end, (ompt_callback_t)on_parallel_end) != ompt_set_always ||
      set(ompt_callback_implicit_task, (ompt_callback_t)on_implicit_task) != ompt_set_always)
    return 0;
  atomic_store(&tool_on, true);
  return 1; /* keep the tool */
}

static void tool_fini(ompt_data_t *data) { (void)data; }

ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version, const char *runtime_version);
ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version, const char *runtime_version) {
  (void)omp_version, (void)runtime_version;
  static ompt_start_tool_result_t result = {tool_init, tool_fini, {0}};
  return &result;
}

/*
 * What an element sees: the innermost region's id (0: none the tool named),
 * its team size and the thread number. Returns false when the element runs
 * outside any region (on the caller, with no team).
 */
typedef struct seen {
  uint64_t region;
  int team_size, thread;
} seen;

static bool where_am_i(seen *s) {
  ompt_data_t *parallel = NULL;
  int size = 0;
  int rc = get_parallel_info(0, &parallel, &size);
  s->thread = omp_get_thread_num();
  s->team_size = size;
  s->region = parallel ? parallel->value : 0;
  return rc == 2 && omp_get_level() > 0;
}

/* The region an element ran in was named by the tool and had not ended. */
static bool region_live(uint64_t id) {
  return id > 0 && (id >= MAX_REGIONS || atomic_load(&region_state[id]) == 1);
}

/* --- the tests ----------------------------------------------------------------------------- */

static void test_tool_started(void) {
  /* The runtime starts the tool with its first OpenMP call. */
  CU_ASSERT_TRUE(omp_get_max_threads() >= 1);
  CU_ASSERT_TRUE_FATAL(atomic_load(&tool_on));
}

enum { MAP_N = 256 };

typedef struct map_ctx {
  seen at[MAP_N];
  bool in_region[MAP_N];
  bool live[MAP_N];
} map_ctx;

static int map_elem(void *ctx, size_t i) {
  map_ctx *m = ctx;
  m->in_region[i] = where_am_i(&m->at[i]);
  m->live[i] = region_live(m->at[i].region);
  weft_test_busy_ns(20000); /* long enough that every thread of the team takes part */
  return 0;
}

/*
 * A map with an explicit grain runs on the whole team: each element is in
 * an implicit task of a region the tool saw begin and not yet end, with the
 * team's size and a thread number inside it; afterwards the region has ended.
 */
static void test_map_region_seen(void) {
  if (omp_get_max_threads() < 2) {
    printf("\n    skipped: one OpenMP thread, so weft opens no region for a map");
    return;
  }
  static map_ctx m;
  memset(&m, 0, sizeof m);
  uint64_t b0 = atomic_load(&begins), e0 = atomic_load(&ends);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = 1;
  CU_ASSERT_EQUAL_FATAL(weft_pmap(MAP_N, map_elem, &m, &o), 0);
  CU_ASSERT_TRUE(atomic_load(&begins) > b0);
  CU_ASSERT_EQUAL(atomic_load(&begins) - b0, atomic_load(&ends) - e0);
  int threads_seen = 0;
  bool thread_seen[64] = {false};
  for (size_t i = 0; i < MAP_N; i++) {
    CU_ASSERT_TRUE(m.in_region[i]);
    CU_ASSERT_TRUE(m.live[i]);
    CU_ASSERT_TRUE(m.at[i].team_size >= 1);
    CU_ASSERT_TRUE(m.at[i].thread >= 0 && m.at[i].thread < m.at[i].team_size);
    /* One region runs the whole map. */
    CU_ASSERT_EQUAL(m.at[i].region, m.at[0].region);
    if (m.at[i].thread >= 0 && m.at[i].thread < 64 && !thread_seen[m.at[i].thread]) {
      thread_seen[m.at[i].thread] = true;
      threads_seen++;
    }
  }
  uint64_t r = m.at[0].region;
  if (r > 0 && r < MAX_REGIONS) CU_ASSERT_EQUAL(atomic_load(&region_state[r]), 2);
  /* The team has OMP_NUM_THREADS threads, and more than one of them ran elements. */
  CU_ASSERT_EQUAL(m.at[0].team_size, omp_get_max_threads());
  if (weft_test_cpus() > 1) CU_ASSERT_TRUE(threads_seen > 1);
}

/*
 * With the automatic grain a map may run on the caller (no region at all)
 * or fork one: whichever it does, an element that runs in a region runs in
 * one the tool saw begin.
 */
static void test_auto_map_region_seen(void) {
  static map_ctx m;
  for (int round = 0; round < 5; round++) {
    memset(&m, 0, sizeof m);
    CU_ASSERT_EQUAL_FATAL(weft_pmap(MAP_N, map_elem, &m, NULL), 0);
    for (size_t i = 0; i < MAP_N; i++)
      if (m.in_region[i]) CU_ASSERT_TRUE(m.live[i]);
  }
}

/*
 * Inside the program's own parallel region weft makes tasks of that team
 * (the program's): every element runs in the program's region, which the
 * tool saw begin, and weft opens no region of its own.
 */
static void test_in_program_region(void) {
  static map_ctx m;
  memset(&m, 0, sizeof m);
  uint64_t outer = 0;
  int rc = 0;
#pragma omp parallel
  {
#pragma omp single
    {
      seen s;
      where_am_i(&s);
      outer = s.region;
      uint64_t b0 = atomic_load(&begins);
      rc = weft_pmap(MAP_N, map_elem, &m, NULL);
      /* No region begins while the map runs: its elements are the team's tasks. */
      if (atomic_load(&begins) != b0) rc = -1000;
    }
  }
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_TRUE(outer != 0);
  for (size_t i = 0; i < MAP_N; i++) {
    CU_ASSERT_TRUE(m.in_region[i]);
    CU_ASSERT_EQUAL(m.at[i].region, outer);
  }
}

typedef struct leaf_ctx {
  atomic_int outside_tool; /* leaves that ran in a region the tool did not see */
  atomic_int in_region;
} leaf_ctx;

static void sum_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  leaf_ctx *c = ctx;
  seen s;
  if (where_am_i(&s)) {
    atomic_fetch_add(&c->in_region, 1);
    if (!region_live(s.region)) atomic_fetch_add(&c->outside_tool, 1);
  }
  weft_test_busy_ns(5000);
  uint64_t *a = acc;
  for (size_t i = lo; i < hi; i++) *a += i;
}

static void sum_combine(void *ctx, void *acc, const void *other) {
  (void)ctx;
  *(uint64_t *)acc += *(const uint64_t *)other;
}

/* weft_reduce's subtrees run as a map: the same holds, and the sum is right. */
static void test_reduce_region_seen(void) {
  leaf_ctx c = {0};
  const size_t n = 1 << 16;
  uint64_t zero = 0, got = 0;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = 256;
  for (int round = 0; round < 5; round++) {
    CU_ASSERT_EQUAL_FATAL(weft_reduce(n, sum_leaf, sum_combine, &c, &zero, &got, sizeof got, &o), 0);
    CU_ASSERT_EQUAL(got, (uint64_t)n * (n - 1) / 2);
  }
  CU_ASSERT_EQUAL(atomic_load(&c.outside_tool), 0);
}

typedef struct fut_ctx {
  atomic_bool started;
  seen at;
  bool in_region, live;
} fut_ctx;

static void *fut_body(void *arg) {
  fut_ctx *f = arg;
  f->in_region = where_am_i(&f->at);
  f->live = region_live(f->at.region);
  atomic_store(&f->started, true);
  return NULL;
}

/*
 * A CPU future that a worker takes runs in weft's own team: a region the
 * tool saw begin. The caller waits for the body to start before it joins,
 * so that the join does not take the future back and run it itself.
 */
static void test_future_region_seen(void) {
  if (omp_get_max_threads() < 2 || weft_test_cpus() < 2) {
    printf("\n    skipped: one OpenMP thread, so a future runs on the thread that joins it");
    return;
  }
  fut_ctx f = {0};
  weft_future *fut;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, fut_body, &f, &fut), 0);
  int64_t deadline = weft_now_ns() + 10 * (int64_t)1000000000;
  while (!atomic_load(&f.started) && weft_now_ns() < deadline) weft_test_sleep_ms(1);
  bool by_worker = atomic_load(&f.started);
  CU_ASSERT_EQUAL(weft_future_get(fut, -1, NULL), 0);
  weft_future_free(fut);
  CU_ASSERT_TRUE(by_worker);
  CU_ASSERT_TRUE(f.in_region);
  CU_ASSERT_TRUE(f.live);
  CU_ASSERT_TRUE(f.at.thread >= 0 && f.at.thread < f.at.team_size);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"tool_started", test_tool_started},
      {"map_region_seen", test_map_region_seen},
      {"auto_map_region_seen", test_auto_map_region_seen},
      {"in_program_region", test_in_program_region},
      {"reduce_region_seen", test_reduce_region_seen},
      {"future_region_seen", test_future_region_seen},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "ompt", tests);
}
