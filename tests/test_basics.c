/*
 * Suite "basics": errors and their messages, the clock, sleeping and
 * yielding on a plain thread, settings, and what weft says about itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void test_strerror(void) {
  CU_ASSERT_STRING_EQUAL(weft_strerror(0), "success");
  CU_ASSERT_STRING_EQUAL(weft_strerror(-ETIMEDOUT), "deadline passed");
  CU_ASSERT_STRING_EQUAL(weft_strerror(-ECANCELED), "cancelled");
  CU_ASSERT_STRING_EQUAL(weft_strerror(-EPIPE), "channel closed");
  CU_ASSERT_STRING_EQUAL(weft_strerror(-ESHUTDOWN), "weft is shutting down");
  /* Errors weft passes through from the system still get a message. */
  CU_ASSERT_PTR_NOT_NULL(weft_strerror(-EHOSTUNREACH));
  CU_ASSERT(strlen(weft_strerror(-EHOSTUNREACH)) > 0);
  CU_ASSERT(strstr(weft_strerror(42), "not a weft error") != NULL);
  CU_ASSERT_STRING_EQUAL(weft_strerror(-100000), "unknown error");
  CU_ASSERT_STRING_EQUAL(weft_strerror(INT32_MIN), "unknown error");
}

static void test_clock(void) {
  int64_t a = weft_now_ns();
  int64_t b = weft_now_ns();
  CU_ASSERT(a > 0);
  CU_ASSERT(b >= a);
}

static void test_sleep_thread(void) {
  CU_ASSERT_EQUAL(weft_sleep_ns(-1), -EINVAL);
  CU_ASSERT_EQUAL(weft_sleep_until(-1), -EINVAL);
  CU_ASSERT_EQUAL(weft_sleep_until(-7), -EINVAL);
  int64_t t0 = weft_now_ns();
  CU_ASSERT_EQUAL(weft_sleep_ns(20 * 1000000), 0);
  /* Never early (how late is the machine's business, not a test's). */
  CU_ASSERT(weft_now_ns() - t0 >= 20 * 1000000);
  t0 = weft_now_ns();
  CU_ASSERT_EQUAL(weft_sleep_until(t0 + 5 * 1000000), 0);
  CU_ASSERT(weft_now_ns() >= t0 + 5 * 1000000);
  CU_ASSERT_EQUAL(weft_sleep_until(1), 0); /* long past */
  CU_ASSERT_EQUAL(weft_sleep_until(0), 0);
  CU_ASSERT_EQUAL(weft_sleep_ns(0), 0);
}

static void test_yield_and_context(void) {
  CU_ASSERT_EQUAL(weft_yield(), 0);
  CU_ASSERT_FALSE(weft_in_fiber());
  CU_ASSERT_FALSE(weft_cancelled());
}

static void test_config(void) {
  weft_config c;
  weft_config_init(&c);
  CU_ASSERT_EQUAL(c.fibers, -1);
  CU_ASSERT_EQUAL(c.carriers, 0);
  CU_ASSERT_EQUAL(weft_configure(NULL), -EINVAL);
  c.stack_size = 1024;
  CU_ASSERT_EQUAL(weft_configure(&c), -EINVAL);
  c.stack_size = 0;
  c.fibers = 2;
  CU_ASSERT_EQUAL(weft_configure(&c), -EINVAL);
  c.fibers = -1;
  c.carriers = 10;
  c.max_carriers = 4;
  CU_ASSERT_EQUAL(weft_configure(&c), -EINVAL);

  weft_config_init(&c);
  c.carriers = 1;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
  if (weft_test_fibers_expected()) {
    CU_ASSERT_TRUE(weft_fibers_available()); /* starts the runtime */
    CU_ASSERT_EQUAL(weft_carrier_count(), 1);
    /* Running: settings are fixed until shutdown. */
    CU_ASSERT_EQUAL(weft_configure(&c), -EBUSY);
    weft_shutdown();
    CU_ASSERT_EQUAL(weft_carrier_count(), 0);
  }
  c.carriers = 0;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
  weft_config_init(&c);
  c.fibers = 0;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
  CU_ASSERT_FALSE(weft_fibers_available());
  weft_config_init(&c);
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
  CU_ASSERT_EQUAL(weft_fibers_available(), weft_test_fibers_expected());
}

static void test_info(void) {
  CU_ASSERT_EQUAL(weft_get_info(NULL), -EINVAL);
  weft_info i;
  CU_ASSERT_EQUAL(weft_get_info(&i), 0);
  CU_ASSERT_STRING_EQUAL(i.version, WEFT_VERSION_STRING);
  CU_ASSERT_PTR_NOT_NULL(i.context_switch);
  CU_ASSERT_PTR_NOT_NULL(i.openmp_runtime);
  CU_ASSERT_PTR_NOT_NULL(i.compiler);
  CU_ASSERT_PTR_NOT_NULL(i.stack_guard);
  CU_ASSERT(i.stack_size >= 16 * 1024);
  CU_ASSERT(i.carriers >= 1);
#ifdef WEFT_HAVE_OPENMP
  CU_ASSERT(i.openmp >= 200805);
#else
  CU_ASSERT_EQUAL(i.openmp, 0);
  CU_ASSERT_STRING_EQUAL(i.openmp_runtime, "pool");
#endif
}

static void test_shutdown_idempotent(void) {
  weft_shutdown();
  weft_shutdown();
  /* And weft starts again on demand. */
  CU_ASSERT_EQUAL(weft_sleep_ns(1000), 0);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"strerror", test_strerror},
      {"clock", test_clock},
      {"sleep_thread", test_sleep_thread},
      {"yield_and_context", test_yield_and_context},
      {"config", test_config},
      {"info", test_info},
      {"shutdown_idempotent", test_shutdown_idempotent},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "basics", tests);
}
