/*
 * This file contains the runtime's life cycle as a whole: weft_shutdown,
 * which stops every part, and weft_fibers_available.
 */
#include "../base/internal.h"

#include <pthread.h>

#include "../base/process.h"
#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../io/offload.h"
#include "lifecycle.h"

static const weft__fiber_hooks fiber_hooks = {.in_region = weft__cpu_in_region};

int weft__fibers_up(void) { return weft__fibers_start(&fiber_hooks); }

bool weft_fibers_available(void) { return weft__fibers_up() == 0; }

static pthread_mutex_t shutdown_mu = PTHREAD_MUTEX_INITIALIZER;

/* A fork during a shutdown on another thread: the child finds the lock free. */
static void shutdown_atfork_child(void) { pthread_mutex_init(&shutdown_mu, NULL); }
static pthread_once_t shutdown_once = PTHREAD_ONCE_INIT;
static void shutdown_register(void) { weft__on_fork(NULL, NULL, shutdown_atfork_child); }

void weft_shutdown(void) {
  if (weft__fiber_self()) weft__die("weft_shutdown called on a fiber: it would wait for itself");
  if (weft__cpu_host_member())
    weft__die("weft_shutdown called from weft's own CPU workers: it would wait for itself");
  if (weft__offload_is_worker())
    weft__die("weft_shutdown called from an offloaded call: it would wait for itself");
  pthread_once(&shutdown_once, shutdown_register);
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
