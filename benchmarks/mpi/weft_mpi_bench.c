/*
 * This file contains weft-mpi-bench, weft_mpi's benchmarks, run under MPI's
 * launcher (benchmarks/mpi/run.sh runs the set that docs/benchmarks.md
 * reports). Each command measures weft against a baseline in the same run,
 * the repetitions interleaved (the order rotates every round), and reports
 * medians; a repetition's time is the slowest rank's.
 *
 *   math      the GPars math kernel (benchmarks/kernels.c) over n indices:
 *             weft_mpi_pmap STATIC and DYNAMIC against hand-written MPI +
 *             `omp parallel for` (scatter, compute, gather), and the same
 *             without the scatter (every rank has the input, as weft's
 *             elements do)
 *   exchange  n blocking elements per rank, each exchanging a message with
 *             the element of the same index on the neighbours: weft_pmap
 *             BLOCKING + weft_mpi_waitall, against OpenMP threads calling
 *             MPI_Waitall, and against fibers calling MPI_Waitall
 *   late      the same receives, with the senders 2 s late: wall time and
 *             the receivers' CPU time while they wait, for the same three
 *   uneven    index i waits i * i units (waits: 4 ranks share 2 cores, so
 *             computing would measure the kernel's time slicing):
 *             weft_mpi_pmap STATIC against DYNAMIC, and DYNAMIC's claims;
 *             with --cpu 1, index i computes i * i units (weft_kernel_spin,
 *             about 1,000 steps a unit) as a WEFT_CPU map; with --chunk C,
 *             DYNAMIC with that fixed chunk too
 *
 * Output: one JSON object per line on stdout (rank 0), a summary on stderr.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "weft_mpi.h"

static int rank, size;

#define MAX_REPS 101

static void die(const char *what) {
  if (rank == 0) fprintf(stderr, "weft-mpi-bench: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static double now_s(void) { return (double)weft_now_ns() / 1e9; }

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec / 1e6;
}

/* The slowest rank's value (collective). */
static double max_over_ranks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct series {
  const char *name;
  double t[MAX_REPS];
  double cpu[MAX_REPS]; /* per repetition: the CPU seconds of the rank that used most */
  int n;
} series;

static double median(const double *v, int n) {
  double tmp[MAX_REPS];
  memcpy(tmp, v, (size_t)n * sizeof *v);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static double maximum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static int omp_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* One JSON line per series; `base` is the baseline the ratio is against (time_base / time). */
static void report(const char *bench, const series *s, int ns, int base, size_t n, const char *extra) {
  if (rank != 0) return;
  double tb = median(s[base].t, s[base].n);
  for (int k = 0; k < ns; k++) {
    double med = median(s[k].t, s[k].n);
    printf("{\"bench\":\"%s\",\"variant\":\"%s\",\"ranks\":%d,\"omp_threads\":%d,\"n\":%zu,\"reps\":%d,"
           "\"median_s\":%.6f,\"min_s\":%.6f,\"max_s\":%.6f,\"per_s\":%.1f,\"vs\":\"%s\",\"speedup\":%.3f,"
           "\"cpu_s\":%.4f%s}\n",
           bench, s[k].name, size, omp_threads(), n, s[k].n, med, minimum(s[k].t, s[k].n),
           maximum(s[k].t, s[k].n), (double)n / med, s[base].name, tb / med, median(s[k].cpu, s[k].n),
           extra ? extra : "");
    fprintf(stderr, "%-10s %d ranks  %-26s median %9.4f s  (min %.4f, max %.4f)  %.3fx %s  cpu %.3f s\n",
            bench, size, s[k].name, med, minimum(s[k].t, s[k].n), maximum(s[k].t, s[k].n), tb / med,
            s[base].name, median(s[k].cpu, s[k].n));
  }
  fflush(stdout);
}

/* --- math ---------------------------------------------------------------------------- */

typedef struct math_ctx {
  const int64_t *in;
} math_ctx;

static int math_elem(void *p, size_t i, void *out) {
  const math_ctx *m = p;
  *(int64_t *)out = weft_kernel_math(m->in[i]);
  return 0;
}

/* Hand-written MPI + OpenMP: (scatter,) compute the rank's block with omp parallel for, gather to 0. */
static void math_baseline(const int64_t *in, int64_t *out, size_t n, bool scatter, int64_t *blk_in,
                          int64_t *blk_out, int *counts, int *displs) {
  int mine = counts[rank];
  const int64_t *src = in + displs[rank];
  if (scatter) {
    MPI_Scatterv(in, counts, displs, MPI_INT64_T, blk_in, mine, MPI_INT64_T, 0, MPI_COMM_WORLD);
    src = blk_in;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < mine; i++) blk_out[i] = weft_kernel_math(src[i]);
  MPI_Gatherv(blk_out, mine, MPI_INT64_T, out, counts, displs, MPI_INT64_T, 0, MPI_COMM_WORLD);
  (void)n;
}

static int cmd_math(size_t n, int reps) {
  int64_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out), *check = malloc(n * sizeof *check);
  int *counts = malloc((size_t)size * sizeof *counts), *displs = malloc((size_t)size * sizeof *displs);
  for (int r = 0; r < size; r++) {
    size_t q = n / (size_t)size, rem = n % (size_t)size;
    counts[r] = (int)(q + ((size_t)r < rem));
    displs[r] = (int)(q * (size_t)r + ((size_t)r < rem ? (size_t)r : rem));
  }
  int64_t *blk_in = malloc((size_t)counts[0] * sizeof *blk_in),
          *blk_out = malloc((size_t)counts[0] * sizeof *blk_out);
  if (!in || !out || !check || !blk_in || !blk_out) die("out of memory");
  weft_kernel_math_input(in, n, 42);
  for (size_t i = 0; i < n; i++) check[i] = weft_kernel_math(in[i]);
  math_ctx mc = {in};
  series s[4] = {{.name = "mpi+omp"},
                 {.name = "mpi+omp (no scatter)"},
                 {.name = "weft_mpi_pmap STATIC"},
                 {.name = "weft_mpi_pmap DYNAMIC"}};
  int bad = 0;
  for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up, not counted */
    for (int j = 0; j < 4; j++) {
      int k = (j + (rep < 0 ? 0 : rep)) % 4;
      memset(out, 0, n * sizeof *out);
      MPI_Barrier(MPI_COMM_WORLD);
      double c0 = cpu_s(), t0 = now_s();
      if (k < 2) {
        math_baseline(in, out, n, k == 0, blk_in, blk_out, counts, displs);
      } else {
        weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
        o.schedule = k == 2 ? WEFT_MPI_STATIC : WEFT_MPI_DYNAMIC;
        if (weft_mpi_pmap(MPI_COMM_WORLD, n, sizeof *out, math_elem, &mc, out, &o) != 0) bad++;
      }
      double t = max_over_ranks(now_s() - t0), c = max_over_ranks(cpu_s() - c0);
      if (rank == 0 && memcmp(out, check, n * sizeof *out) != 0) bad++;
      if (rep >= 0) {
        s[k].t[s[k].n] = t;
        s[k].cpu[s[k].n++] = c;
      }
    }
  }
  report("mpi-math", s, 4, 0, n, NULL);
  free(in);
  free(out);
  free(check);
  free(blk_in);
  free(blk_out);
  free(counts);
  free(displs);
  return bad;
}

/* --- exchange and late --------------------------------------------------------------- */

typedef struct xch {
  int *in, *out;
  int n, left, right;
  bool plain;      /* wait with MPI_Waitall, not weft_mpi_waitall */
  int late_sender; /* late: receive only, from this rank; -1: exchange */
} xch;

static int xch_one(xch *x, size_t i) {
  MPI_Request r[2];
  int cnt = 1, rc = 0;
  if (x->late_sender >= 0) {
    MPI_Irecv(&x->in[i], 1, MPI_INT, x->late_sender, (int)i, MPI_COMM_WORLD, &r[0]);
  } else {
    x->out[i] = rank * x->n + (int)i;
    MPI_Irecv(&x->in[i], 1, MPI_INT, x->left, (int)i, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&x->out[i], 1, MPI_INT, x->right, (int)i, MPI_COMM_WORLD, &r[1]);
    cnt = 2;
  }
  if (x->plain)
    rc = MPI_Waitall(cnt, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS ? 0 : -EIO;
  else
    rc = weft_mpi_waitall(cnt, r, MPI_STATUSES_IGNORE, -1);
  return rc;
}

static int xch_fn(void *p, size_t i) { return xch_one(p, i); }

enum { X_WEFT, X_OMP, X_FIBER_PLAIN, X_N };
static const char *const x_names[X_N] = {"weft_mpi_waitall on fibers", "omp threads + MPI_Waitall",
                                         "fibers + MPI_Waitall"};

/*
 * Between two rounds: fibers that blocked their carriers in MPI_Waitall made
 * the pinning monitor start extra carriers, which linger (and spin in MPI)
 * after the round; stop them (weft_shutdown), restart the runtime untimed,
 * and let the OpenMP runtime's spinning threads go to sleep, so that no
 * round pays for the one before.
 */
static void settle(int k) {
  if (k == X_FIBER_PLAIN) {
    weft_shutdown();
    weft_fibers_available();
  }
  weft_sleep_ns(50000000);
}

/* One round of variant k; returns 0 or an error. */
static int xch_round(int k, xch *x) {
  int bad = 0;
  if (k == X_OMP) {
    x->plain = true;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
    for (int i = 0; i < x->n; i++) bad += xch_one(x, (size_t)i) != 0;
    return bad;
  }
  x->plain = k == X_FIBER_PLAIN;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  return weft_pmap((size_t)x->n, xch_fn, x, &o);
}

static int cmd_exchange(int n, int reps) {
  xch x = {.in = calloc((size_t)n, sizeof(int)),
           .out = calloc((size_t)n, sizeof(int)),
           .n = n,
           .left = (rank + size - 1) % size,
           .right = (rank + 1) % size,
           .late_sender = -1};
  series s[X_N];
  for (int k = 0; k < X_N; k++) s[k] = (series){.name = x_names[k]};
  int bad = 0;
  for (int rep = -1; rep < reps; rep++)
    for (int j = 0; j < X_N; j++) {
      int k = (j + (rep < 0 ? 0 : rep)) % X_N;
      memset(x.in, 0xff, (size_t)n * sizeof(int));
      MPI_Barrier(MPI_COMM_WORLD);
      double c0 = cpu_s(), t0 = now_s();
      bad += xch_round(k, &x) != 0;
      double t = max_over_ranks(now_s() - t0), c = max_over_ranks(cpu_s() - c0);
      for (int i = 0; i < n; i++) bad += x.in[i] != x.left * n + i;
      settle(k);
      if (rep >= 0) {
        s[k].t[s[k].n] = t;
        s[k].cpu[s[k].n++] = c;
      }
    }
  report("mpi-exchange", s, X_N, X_OMP, (size_t)n, NULL);
  free(x.in);
  free(x.out);
  return bad;
}

/* Even ranks receive n messages that their odd partner sends late_ms late; time and CPU of the receivers. */
static int cmd_late(int n, int reps, int late_ms) {
  if (size % 2) die("late needs an even number of ranks");
  bool receiver = rank % 2 == 0;
  int partner = rank ^ 1;
  xch x = {.in = calloc((size_t)n, sizeof(int)),
           .out = calloc((size_t)n, sizeof(int)),
           .n = n,
           .late_sender = partner};
  series s[X_N];
  for (int k = 0; k < X_N; k++) s[k] = (series){.name = x_names[k]};
  int bad = 0;
  for (int rep = 0; rep < reps; rep++)
    for (int j = 0; j < X_N; j++) {
      int k = (j + rep) % X_N;
      MPI_Barrier(MPI_COMM_WORLD);
      double c0 = cpu_s(), t0 = now_s();
      if (receiver) {
        bad += xch_round(k, &x) != 0;
      } else {
        weft_sleep_ns((int64_t)late_ms * 1000000);
        for (int i = 0; i < n; i++) {
          x.out[i] = rank * n + i;
          MPI_Send(&x.out[i], 1, MPI_INT, partner, i, MPI_COMM_WORLD);
        }
      }
      double t = receiver ? now_s() - t0 : 0, c = receiver ? cpu_s() - c0 : 0;
      settle(k);
      t = max_over_ranks(t);
      c = max_over_ranks(c);
      s[k].t[s[k].n] = t;
      s[k].cpu[s[k].n++] = c;
    }
  char extra[64];
  snprintf(extra, sizeof extra, ",\"late_ms\":%d", late_ms);
  report("mpi-late", s, X_N, X_OMP, (size_t)n, extra);
  free(x.in);
  free(x.out);
  return bad;
}

/* --- uneven ---------------------------------------------------------------------------- */

typedef struct uneven_ctx {
  int64_t unit_ns;
  bool cpu; /* compute (spin) instead of waiting */
} uneven_ctx;

static int uneven_elem(void *p, size_t i, void *out) {
  const uneven_ctx *u = p;
  if (u->cpu) {
    uint64_t x = weft_kernel_spin((uint64_t)(i * i) * (uint64_t)u->unit_ns, i + 1);
    weft_kernel_sink(&x);
  } else {
    weft_sleep_ns((int64_t)(i * i) * u->unit_ns);
  }
  *(int *)out = rank;
  return 0;
}

static int cmd_uneven(size_t n, int reps, int64_t unit_ns, size_t lanes, bool cpu, size_t chunk) {
  uneven_ctx u = {unit_ns, cpu};
  int *who = malloc(n * sizeof *who);
  series s[3] = {{.name = "weft_mpi_pmap STATIC"},
                 {.name = "weft_mpi_pmap DYNAMIC"},
                 {.name = "weft_mpi_pmap DYNAMIC chunk"}};
  int ns = chunk ? 3 : 2;
  int bad = 0;
  long moved = 0;
  for (int rep = 0; rep < reps; rep++)
    for (int j = 0; j < ns; j++) {
      int k = (j + rep) % ns;
      weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
      o.local.kind = cpu ? WEFT_CPU : WEFT_BLOCKING;
      o.local.max_parallel = cpu ? 0 : lanes;
      o.schedule = k ? WEFT_MPI_DYNAMIC : WEFT_MPI_STATIC;
      o.chunk = k == 2 ? chunk : 0;
      MPI_Barrier(MPI_COMM_WORLD);
      double c0 = cpu_s(), t0 = now_s();
      bad += weft_mpi_pmap(MPI_COMM_WORLD, n, sizeof *who, uneven_elem, &u, who, &o) != 0;
      double t = max_over_ranks(now_s() - t0), c = max_over_ranks(cpu_s() - c0);
      s[k].t[s[k].n] = t;
      s[k].cpu[s[k].n++] = c;
      if (k == 1 && rank == 0) {
        size_t q = n / (size_t)size, rem = n % (size_t)size;
        for (size_t i = 0; i < n; i++) {
          size_t owner = i < rem * (q + 1) ? i / (q + 1) : rem + (i - rem * (q + 1)) / (q ? q : 1);
          moved += (size_t)who[i] != owner;
        }
      }
    }
  char extra[160];
  snprintf(extra, sizeof extra,
           ",\"unit_ns\":%lld,\"lanes\":%zu,\"cpu\":%d,\"chunk\":%zu,\"moved_per_rep\":%.1f",
           (long long)unit_ns, lanes, cpu ? 1 : 0, chunk, reps ? (double)moved / reps : 0.0);
  report("mpi-uneven", s, ns, 0, n, extra);
  free(who);
  return bad;
}

/* --- main ------------------------------------------------------------------------------ */

static const char usage[] =
    "usage: weft-mpi-bench math     [--n N] [--reps R]\n"
    "       weft-mpi-bench exchange [--n N] [--reps R]\n"
    "       weft-mpi-bench late     [--n N] [--reps R] [--late-ms MS]\n"
    "       weft-mpi-bench uneven   [--n N] [--reps R] [--unit-us U] [--lanes L] [--cpu 0|1] [--chunk C]\n"
    "(under mpirun; benchmarks/mpi/run.sh runs the documented set)\n";

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE) die("MPI_THREAD_MULTIPLE is needed");
  if (argc < 2) {
    if (rank == 0) fputs(usage, stderr);
    MPI_Finalize();
    return 2;
  }
  const char *cmd = argv[1];
  long long n = -1, reps = -1, late_ms = 2000, unit_us = 10, lanes = 1, cpu = 0, chunk = 0;
  for (int a = 2; a + 1 < argc; a += 2) {
    long long v = atoll(argv[a + 1]);
    if (strcmp(argv[a], "--n") == 0)
      n = v;
    else if (strcmp(argv[a], "--reps") == 0)
      reps = v;
    else if (strcmp(argv[a], "--late-ms") == 0)
      late_ms = v;
    else if (strcmp(argv[a], "--unit-us") == 0)
      unit_us = v;
    else if (strcmp(argv[a], "--lanes") == 0)
      lanes = v;
    else if (strcmp(argv[a], "--cpu") == 0)
      cpu = v;
    else if (strcmp(argv[a], "--chunk") == 0)
      chunk = v;
    else
      die("unknown option");
  }
  if (reps > MAX_REPS) reps = MAX_REPS;
  int bad;
  if (strcmp(cmd, "math") == 0)
    bad = cmd_math(n > 0 ? (size_t)n : 4194304, reps > 0 ? (int)reps : 11);
  else if (strcmp(cmd, "exchange") == 0)
    bad = cmd_exchange(n > 0 ? (int)n : 1000, reps > 0 ? (int)reps : 11);
  else if (strcmp(cmd, "late") == 0)
    bad = cmd_late(n > 0 ? (int)n : 1000, reps > 0 ? (int)reps : 3, (int)late_ms);
  else if (strcmp(cmd, "uneven") == 0)
    bad = cmd_uneven(n > 0 ? (size_t)n : 100, reps > 0 ? (int)reps : 5, unit_us * 1000, (size_t)lanes,
                     cpu != 0, chunk > 0 ? (size_t)chunk : 0);
  else
    die("unknown command (see weft-mpi-bench without arguments)");
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all && rank == 0) fprintf(stderr, "weft-mpi-bench: %d wrong results or errors\n", all);
  weft_shutdown();
  MPI_Finalize();
  return all ? 1 : 0;
}
