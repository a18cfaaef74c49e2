/*
 * Suite "mpi_wait" (under mpirun -np 4): weft_mpi_wait and weft_mpi_waitall
 * on plain threads and on fibers: argument checks, null and persistent
 * requests, deadlines (the request stays active), cancellation, a waitall
 * that completes in part, thousands of requests in one wait, a fiber inside
 * an OpenMP region of its own, and the progress engine ending when idle.
 * Each rank talks to its neighbours: it receives from the left and sends
 * to the right.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "mpi_harness.h"
#include "mpi_internal.h"

#define MS 1000000LL

static int left(void) { return (weft_mpi_test_rank() + weft_mpi_test_size() - 1) % weft_mpi_test_size(); }
static int right(void) { return (weft_mpi_test_rank() + 1) % weft_mpi_test_size(); }

/* Fibers park only with fibers on and MPI_THREAD_MULTIPLE: where the engine's counters must move. */
static bool parks(void) {
  return weft_test_fibers_expected() && weft_mpi_test_level() == MPI_THREAD_MULTIPLE;
}

/* Run fn(arg) as a blocking future (a fiber, or the fallback's thread) and wait for it. */
static void on_fiber(weft_task_fn fn, void *arg) {
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, fn, arg, &f), 0);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
}

static void send_int(int v, int tag) { MPI_Send(&v, 1, MPI_INT, right(), tag, MPI_COMM_WORLD); }

static void test_args(void) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Status st;
  CU_ASSERT_EQUAL(weft_mpi_wait(NULL, &st, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_mpi_wait(&r, &st, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_mpi_waitall(-1, &r, NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_mpi_waitall(1, NULL, NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_mpi_waitall(1, &r, NULL, -7), -EINVAL);
  CU_ASSERT_EQUAL(weft_mpi_waitall(0, NULL, NULL, -1), 0);
  /* A null request is complete at once, whatever the deadline. */
  CU_ASSERT_EQUAL(weft_mpi_wait(&r, &st, -1), 0);
  CU_ASSERT_EQUAL(weft_mpi_wait(&r, MPI_STATUS_IGNORE, 0), 0);
  CU_ASSERT_EQUAL(weft_mpi_wait(&r, NULL, weft_now_ns() + 1000 * MS), 0);
  MPI_Request two[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  CU_ASSERT_EQUAL(weft_mpi_waitall(2, two, MPI_STATUSES_IGNORE, 0), 0);
}

/* A plain thread: deadlines leave the request active; then it completes. */
static void test_thread(void) {
  int got[2] = {-1, -1};
  MPI_Request r[2];
  MPI_Irecv(&got[0], 1, MPI_INT, left(), 70, MPI_COMM_WORLD, &r[0]);
  MPI_Irecv(&got[1], 1, MPI_INT, left(), 71, MPI_COMM_WORLD, &r[1]);
  CU_ASSERT_EQUAL(weft_mpi_wait(&r[0], MPI_STATUS_IGNORE, 0), -ETIMEDOUT);
  CU_ASSERT(r[0] != MPI_REQUEST_NULL);
  int64_t t0 = weft_now_ns();
  CU_ASSERT_EQUAL(weft_mpi_wait(&r[0], NULL, t0 + 20 * MS), -ETIMEDOUT);
  CU_ASSERT(weft_now_ns() - t0 >= 20 * MS); /* never early */
  CU_ASSERT(r[0] != MPI_REQUEST_NULL);
  MPI_Barrier(MPI_COMM_WORLD);
  send_int(weft_mpi_test_rank(), 70);
  send_int(weft_mpi_test_rank() + 100, 71);
  MPI_Status st;
  CU_ASSERT_EQUAL(weft_mpi_wait(&r[0], &st, -1), 0);
  CU_ASSERT(r[0] == MPI_REQUEST_NULL);
  CU_ASSERT_EQUAL(got[0], left());
  CU_ASSERT_EQUAL(st.MPI_SOURCE, left());
  CU_ASSERT_EQUAL(st.MPI_TAG, 70);
  CU_ASSERT_EQUAL(weft_mpi_wait(&r[1], &st, weft_now_ns() + 60000 * MS), 0); /* polled */
  CU_ASSERT(r[1] == MPI_REQUEST_NULL);
  CU_ASSERT_EQUAL(got[1], left() + 100);
  CU_ASSERT_EQUAL(st.MPI_TAG, 71);
  MPI_Barrier(MPI_COMM_WORLD);
}

typedef struct recv_job {
  MPI_Request req;
  MPI_Status st;
  int rc[3];
  int64_t deadline;
} recv_job;

static void *timeouts_on_fiber(void *arg) {
  recv_job *j = arg;
  j->rc[0] = weft_mpi_wait(&j->req, NULL, 0);
  j->rc[1] = weft_mpi_wait(&j->req, NULL, weft_now_ns() + 20 * MS);
  j->rc[2] = weft_mpi_wait(&j->req, &j->st, weft_now_ns() - 1); /* already past */
  return NULL;
}

static void *wait_on_fiber(void *arg) {
  recv_job *j = arg;
  j->rc[0] = weft_mpi_wait(&j->req, &j->st, j->deadline);
  return NULL;
}

/* A fiber: timeouts leave the request active; a wait that parks is woken when the message comes. */
static void test_fiber(void) {
  int got = -1;
  recv_job j = {.deadline = -1};
  MPI_Irecv(&got, 1, MPI_INT, left(), 72, MPI_COMM_WORLD, &j.req);
  on_fiber(timeouts_on_fiber, &j);
  CU_ASSERT_EQUAL(j.rc[0], -ETIMEDOUT);
  CU_ASSERT_EQUAL(j.rc[1], -ETIMEDOUT);
  CU_ASSERT_EQUAL(j.rc[2], -ETIMEDOUT);
  CU_ASSERT(j.req != MPI_REQUEST_NULL);

  weft_mpi__stats before, after;
  weft_mpi__get_stats(&before);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_on_fiber, &j, &f), 0);
  weft_test_sleep_ms(30); /* the fiber is waiting by now (if not, its first test finds the message) */
  MPI_Barrier(MPI_COMM_WORLD);
  send_int(weft_mpi_test_rank(), 72);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
  CU_ASSERT_EQUAL(j.rc[0], 0);
  CU_ASSERT(j.req == MPI_REQUEST_NULL);
  CU_ASSERT_EQUAL(got, left());
  CU_ASSERT_EQUAL(j.st.MPI_SOURCE, left());
  CU_ASSERT_EQUAL(j.st.MPI_TAG, 72);
  weft_mpi__get_stats(&after);
  if (parks()) {
    CU_ASSERT(after.parked > before.parked);
    CU_ASSERT(after.engines >= 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Cancelling the future of a fiber that waits: -ECANCELED, the request left active. */
static void test_cancel(void) {
  if (!weft_test_fibers_expected())
    return; /* on the fallback's thread the wait is MPI_Wait: nothing to cancel */
  int got = -1;
  recv_job j = {.deadline = -1, .rc = {1, 1, 1}};
  MPI_Irecv(&got, 1, MPI_INT, left(), 73, MPI_COMM_WORLD, &j.req);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_on_fiber, &j, &f), 0);
  weft_test_sleep_ms(50);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
  CU_ASSERT_EQUAL(j.rc[0], -ECANCELED);
  CU_ASSERT(j.req != MPI_REQUEST_NULL);
  MPI_Cancel(&j.req);
  MPI_Status st;
  MPI_Wait(&j.req, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  CU_ASSERT_TRUE(cancelled);
  MPI_Barrier(MPI_COMM_WORLD);
}

enum { MANY = 1000 };

typedef struct many_job {
  MPI_Request reqs[2 * MANY];
  MPI_Status st[2 * MANY];
  int in[MANY], out[MANY];
  int rc;
} many_job;

static void *waitall_on_fiber(void *arg) {
  many_job *m = arg;
  for (int k = 0; k < MANY; k++) {
    m->out[k] = weft_mpi_test_rank() * 10000 + k;
    MPI_Irecv(&m->in[k], 1, MPI_INT, left(), k, MPI_COMM_WORLD, &m->reqs[k]);
  }
  /* Sent in the reverse order: the receives complete out of order. */
  for (int k = MANY - 1; k >= 0; k--)
    MPI_Isend(&m->out[k], 1, MPI_INT, right(), k, MPI_COMM_WORLD, &m->reqs[MANY + k]);
  m->rc = weft_mpi_waitall(2 * MANY, m->reqs, m->st, -1);
  return NULL;
}

static void test_waitall_many(void) {
  many_job *m = calloc(1, sizeof *m);
  on_fiber(waitall_on_fiber, m);
  CU_ASSERT_EQUAL(m->rc, 0);
  bool ok = true;
  for (int k = 0; k < 2 * MANY; k++) ok = ok && m->reqs[k] == MPI_REQUEST_NULL;
  for (int k = 0; k < MANY; k++)
    ok = ok && m->in[k] == left() * 10000 + k && m->st[k].MPI_TAG == k && m->st[k].MPI_SOURCE == left();
  CU_ASSERT_TRUE(ok);
  free(m);
  MPI_Barrier(MPI_COMM_WORLD);
}

typedef struct partial_job {
  MPI_Request r[2];
  MPI_Status st[2];
  int rc;
  int64_t deadline;
} partial_job;

static void *partial_on_fiber(void *arg) {
  partial_job *p = arg;
  p->rc = weft_mpi_waitall(2, p->r, p->st, p->deadline);
  return NULL;
}

/* A waitall whose deadline passes with one of two requests complete: that one is done, the other left. */
static void test_waitall_partial(void) {
  for (int where = 0; where < 2; where++) { /* a plain thread, then a fiber */
    int a = -1, b = -1;
    partial_job p = {.deadline = 0};
    MPI_Irecv(&a, 1, MPI_INT, left(), 80, MPI_COMM_WORLD, &p.r[0]);
    MPI_Irecv(&b, 1, MPI_INT, left(), 81, MPI_COMM_WORLD, &p.r[1]);
    MPI_Barrier(MPI_COMM_WORLD);
    send_int(weft_mpi_test_rank() + 1000, 81); /* only the second */
    MPI_Barrier(MPI_COMM_WORLD);
    p.deadline = weft_now_ns() + 1000 * MS;
    if (where == 0)
      partial_on_fiber(&p);
    else
      on_fiber(partial_on_fiber, &p);
    CU_ASSERT_EQUAL(p.rc, -ETIMEDOUT);
    CU_ASSERT(p.r[0] != MPI_REQUEST_NULL);
    CU_ASSERT(p.r[1] == MPI_REQUEST_NULL);
    CU_ASSERT_EQUAL(p.st[1].MPI_TAG, 81);
    CU_ASSERT_EQUAL(b, left() + 1000);
    MPI_Barrier(MPI_COMM_WORLD);
    send_int(weft_mpi_test_rank(), 80);
    p.deadline = -1;
    if (where == 0)
      partial_on_fiber(&p);
    else
      on_fiber(partial_on_fiber, &p);
    CU_ASSERT_EQUAL(p.rc, 0);
    CU_ASSERT(p.r[0] == MPI_REQUEST_NULL);
    CU_ASSERT_EQUAL(a, left());
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

/* Persistent requests: made inactive, not freed; waiting on an inactive one returns at once. */
static void test_persistent(void) {
  int in = -1, out = weft_mpi_test_rank();
  partial_job p = {.deadline = -1};
  MPI_Recv_init(&in, 1, MPI_INT, left(), 90, MPI_COMM_WORLD, &p.r[0]);
  MPI_Send_init(&out, 1, MPI_INT, right(), 90, MPI_COMM_WORLD, &p.r[1]);
  for (int round = 0; round < 3; round++) {
    in = -1;
    out = weft_mpi_test_rank() + 10 * round;
    MPI_Startall(2, p.r);
    on_fiber(partial_on_fiber, &p);
    CU_ASSERT_EQUAL(p.rc, 0);
    CU_ASSERT(p.r[0] != MPI_REQUEST_NULL && p.r[1] != MPI_REQUEST_NULL);
    CU_ASSERT_EQUAL(in, left() + 10 * round);
    CU_ASSERT_EQUAL(p.st[0].MPI_TAG, 90);
    on_fiber(partial_on_fiber, &p); /* inactive now: at once */
    CU_ASSERT_EQUAL(p.rc, 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Request_free(&p.r[0]);
  MPI_Request_free(&p.r[1]);
}

#ifdef _OPENMP
static void *wait_in_omp_region(void *arg) {
  recv_job *j = arg;
#pragma omp parallel num_threads(1)
  j->rc[0] = weft_mpi_wait(&j->req, &j->st, -1);
  return NULL;
}
#endif

/* A fiber inside an OpenMP region of its own cannot park: it polls, and still gets its message. */
static void test_omp_region(void) {
#ifdef _OPENMP
  int got = -1;
  recv_job j = {.rc = {1, 1, 1}};
  weft_mpi__stats before, after;
  weft_mpi__get_stats(&before);
  MPI_Irecv(&got, 1, MPI_INT, left(), 95, MPI_COMM_WORLD, &j.req);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_in_omp_region, &j, &f), 0);
  weft_test_sleep_ms(30);
  MPI_Barrier(MPI_COMM_WORLD);
  send_int(weft_mpi_test_rank(), 95);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
  CU_ASSERT_EQUAL(j.rc[0], 0);
  CU_ASSERT_EQUAL(got, left());
  weft_mpi__get_stats(&after);
  if (parks()) CU_ASSERT(after.self_poll > before.self_poll);
  MPI_Barrier(MPI_COMM_WORLD);
#endif
}

/* An idle engine ends by itself (20 ms), with an empty table. */
static void test_engine_ends(void) {
  weft_test_sleep_ms(200);
  weft_mpi__stats s;
  weft_mpi__get_stats(&s);
  CU_ASSERT_EQUAL(s.table_now, 0);
  CU_ASSERT_FALSE(s.running);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"args", test_args},
      {"thread", test_thread},
      {"fiber", test_fiber},
      {"cancel", test_cancel},
      {"waitall_many", test_waitall_many},
      {"waitall_partial", test_waitall_partial},
      {"persistent", test_persistent},
      {"omp_region", test_omp_region},
      {"engine_ends", test_engine_ends},
      {NULL, NULL},
  };
  return weft_mpi_test_main(argc, argv, "mpi_wait", tests, MPI_THREAD_MULTIPLE);
}
