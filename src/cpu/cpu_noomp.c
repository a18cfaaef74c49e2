/*
 * This file contains the CPU backend of a build without OpenMP: every call
 * goes to weft's own pool of threads (cpu_pool.c), so CPU work still runs in
 * parallel and futures still run asynchronously.
 */
#include "cpu.h"
#include "../base/sys.h"

void weft__cpu_run_range(weft__range *r) { weft__pool_run_range(r); }
void weft__cpu_team(weft__team *t) { weft__pool_team(t); }
unsigned weft__cpu_team_kind(void) { return WEFT__TEAM_POOL; }
void weft__cpu_fork(weft__range *r, size_t k) { weft__pool_fork(r, k); }
int weft__cpu_submit(weft__job *j) { return weft__pool_submit(j); }
int weft__cpu_spawn(weft__job *j) { return weft__pool_submit(j); }
bool weft__cpu_take(weft__job *j) { return (void)j, false; }
bool weft__cpu_help(bool (*done)(void *arg), void *arg) { return done(arg); }
void weft__cpu_kick(void) {}
bool weft__cpu_in_region(void) { return false; }
unsigned weft__cpu_threads(void) { return weft__pool_threads(); }
void weft__cpu_shutdown(void) { weft__pool_shutdown(); }
bool weft__cpu_host_member(void) { return weft__pool_is_worker(); }
const char *weft__cpu_runtime_name(void) { return "pool"; }
int weft__cpu_kept_threads(void) { return 0; }
