/*
 * This file contains the runtime's settings (weft_configure and the
 * environment), what weft tells about itself (weft_get_info), the runtime's
 * life cycle as a whole (weft_shutdown), and what a forked child inherits.
 */
#include "../internal.h"

#include <pthread.h>
#include <string.h>

#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../fiber/stack.h"
#include "../io/offload.h"
#include "../io/uring.h"
#include "../sys.h"
#include "settings.h"

#define DEFAULT_STACK_SIZE (256 * 1024)
#define MIN_STACK_SIZE     (16 * 1024)
#define MAX_STACK_SIZE     (1024 * 1024 * 1024)

/* What weft_configure set; zero fields take the environment or the default. */
static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_config cfg_set = {.fibers = -1, .trace_pinned = -1, .io_uring = -1};

void weft_config_init(weft_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->fibers = -1;
  cfg->trace_pinned = -1;
  cfg->io_uring = -1;
}

static unsigned env_unsigned(const char *name, unsigned dflt) {
  size_t v;
  if (!weft__env_size(name, &v) || v == 0 || v > UINT32_MAX) return dflt;
  return (unsigned)v;
}

void weft__settings_get(weft__settings *s) {
  pthread_mutex_lock(&cfg_mu);
  weft_config c = cfg_set;
  pthread_mutex_unlock(&cfg_mu);

  int b = c.fibers >= 0 ? c.fibers : weft__env_bool("WEFT_FIBERS");
  s->fibers = b != 0;
  s->max_carriers = c.max_carriers ? c.max_carriers : env_unsigned("WEFT_MAX_CARRIERS", 256);
  s->carriers = c.carriers ? c.carriers : env_unsigned("WEFT_CARRIERS", weft__cpu_count());
  if (s->carriers > s->max_carriers) s->carriers = s->max_carriers;
  size_t ss = c.stack_size;
  if (!ss && (!weft__env_size("WEFT_STACK_SIZE", &ss) || ss < MIN_STACK_SIZE || ss > MAX_STACK_SIZE))
    ss = DEFAULT_STACK_SIZE;
  s->stack_size = ss;
  s->pin_threshold_ms = c.pin_threshold_ms ? c.pin_threshold_ms : env_unsigned("WEFT_PIN_THRESHOLD_MS", 20);
  b = c.trace_pinned >= 0 ? c.trace_pinned : weft__env_bool("WEFT_TRACE_PINNED");
  s->trace_pinned = b == 1;
  b = c.io_uring >= 0 ? c.io_uring : weft__env_bool("WEFT_IO_URING");
  s->io_uring = b != 0;
  s->offload_max = c.offload_max ? c.offload_max : env_unsigned("WEFT_OFFLOAD_MAX", 64);
  /* Environment only (a diagnostic, like WEFT_TRACE_PINNED): 1 or on, 2 for every call. */
  unsigned ex = env_unsigned("WEFT_EXPLAIN", weft__env_bool("WEFT_EXPLAIN") == 1 ? 1 : 0);
  s->explain = ex > 2 ? 2 : ex;
  /* Environment only (a diagnostic); "0" turns the report off, which env_unsigned would read as unset. */
  const char *dl = getenv("WEFT_DEADLOCK_MS");
  s->deadlock_ms = dl && strcmp(dl, "0") == 0 ? 0 : env_unsigned("WEFT_DEADLOCK_MS", 10000);
}

int weft_configure(const weft_config *cfg) {
  if (!cfg) return -EINVAL;
  if (cfg->fibers < -1 || cfg->fibers > 1 || cfg->trace_pinned < -1 || cfg->trace_pinned > 1 ||
      cfg->io_uring < -1 || cfg->io_uring > 1)
    return -EINVAL;
  if (cfg->stack_size && (cfg->stack_size < MIN_STACK_SIZE || cfg->stack_size > MAX_STACK_SIZE))
    return -EINVAL;
  if (cfg->carriers > 65536 || cfg->max_carriers > 65536) return -EINVAL;
  /* More carriers than the bound that will apply (the given one, else the environment's or 256). */
  unsigned max = cfg->max_carriers ? cfg->max_carriers : env_unsigned("WEFT_MAX_CARRIERS", 256);
  if (cfg->carriers > max) return -EINVAL;
  pthread_mutex_lock(&cfg_mu);
  int rc = 0;
  if (weft__fibers_running())
    rc = -EBUSY;
  else
    cfg_set = *cfg;
  pthread_mutex_unlock(&cfg_mu);
  return rc;
}

int weft_get_info(weft_info *out) {
  if (!out) return -EINVAL;
  weft__settings s;
  weft__settings_get(&s);
  memset(out, 0, sizeof *out);
  out->version = WEFT_VERSION_STRING;
  out->fibers = weft__fibers_running();
  out->context_switch = WEFT_CONTEXT_NAME;
#ifdef WEFT_HAVE_OPENMP
  out->openmp = _OPENMP;
#endif
  out->openmp_runtime = weft__cpu_runtime_name();
  const char *g = weft__stack_guard_name();
  out->stack_guard = g ? g : "not started";
  out->stack_size = s.stack_size;
  out->carriers = s.carriers;
  out->io_uring = weft__uring_in_use();
  out->compiler = WEFT_COMPILER_NAME;
  return 0;
}

bool weft_fibers_available(void) { return weft__fibers_start() == 0; }

/* --- shutdown ----------------------------------------------------------------- */

static pthread_mutex_t shutdown_mu = PTHREAD_MUTEX_INITIALIZER;

void weft_shutdown(void) {
  if (weft__fiber_self()) weft__die("weft_shutdown called on a fiber: it would wait for itself");
  if (weft__cpu_host_member())
    weft__die("weft_shutdown called from weft's own CPU workers: it would wait for itself");
  if (weft__offload_is_worker())
    weft__die("weft_shutdown called from an offloaded call: it would wait for itself");
  pthread_mutex_lock(&shutdown_mu);
  /*
   * Work in flight may start more work of the other kind (a CPU future
   * that starts a blocking one): stop both until neither restarted.
   */
  do {
    weft__fibers_shutdown();
    weft__cpu_shutdown();
    weft__offload_shutdown();
  } while (weft__fibers_running());
  pthread_mutex_unlock(&shutdown_mu);
}

/* --- fork ----------------------------------------------------------------------- */

static void atfork_child(void) {
  /* The child has only the forking thread: forget the parent's threads. */
  pthread_mutex_init(&cfg_mu, NULL);
  pthread_mutex_init(&shutdown_mu, NULL);
  weft__threads_atfork_child();
  weft__fibers_atfork_child();
  weft__cpu_atfork_child();
  weft__pool_atfork_child();
  weft__offload_atfork_child();
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) { pthread_atfork(NULL, NULL, atfork_child); }
void weft__atfork_init(void) { pthread_once(&atfork_once, atfork_register); }
