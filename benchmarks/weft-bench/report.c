/*
 * This file contains the pieces of weft-bench's human tables that several
 * commands print: a number cell that shows "-" where no repetition gave the
 * figure, the latency and CPU cells of the network tables, and the line that
 * holds one case's rate against another's.
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <math.h>
#include <stdlib.h>

void wb_print_cell(double v, int width, int prec) {
  if (isnan(v))
    printf(" %*s", width, "-");
  else
    printf(" %*.*f", width, prec, v);
}

void wb_print_ratio(const char *name, const double *a, size_t na, const double *b, size_t nb) {
  double mb = wb_median(b, nb), ma = wb_median(a, na);
  if (!(mb > 0) || isnan(ma)) return;
  printf("  %s: %.2fx", name, ma / mb);
  double *r = malloc((na ? na : 1) * sizeof *r);
  size_t k = r ? wb_ratios(a, na, b, nb, r) : 0;
  if (k > 1) {
    wb_summary s = wb_summarize(r, k);
    printf(" (per repetition: median %.2fx, min %.2fx, max %.2fx)", s.median, s.min, s.max);
  }
  free(r);
  printf("\n");
}

void wb_print_net_cells(const wb_run *r, size_t first) {
  wb_print_cell(wb_run_metric(r, first).median, 9, 3);
  wb_print_cell(wb_run_metric(r, first + 1).median, 9, 3);
  wb_print_cell(wb_run_metric(r, first + 2).median, 9, 3);
  wb_print_cell(wb_run_metric(r, first + 3).max, 9, 3);
  wb_print_cell(wb_run_metric(r, first + 4).median, 10, 1);
  wb_print_cell(wb_run_metric(r, first + 5).median, 5, 2);
}
