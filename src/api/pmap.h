/*
 * This file contains the interface between weft_pmap's door (pmap.c) and
 * its paths: the CPU path (pmap.c) and the fiber path (pmap_fibers.c).
 */
#ifndef WEFT_API_PMAP_H
#define WEFT_API_PMAP_H

#include "../cpu/cpu.h"

/*
 * Run every index of r on the CPU backend and return the map's result. On a
 * fiber the work is handed to weft's OpenMP team while the fiber parks.
 */
int weft__pmap_cpu(weft__range *r);

/*
 * Run a BLOCKING map on fibers: at most max_parallel elements in flight (0:
 * no bound). The runtime must be running. Returns the map's result, or a
 * negative errno when nothing was started (-ENOMEM, -ESHUTDOWN).
 */
int weft__pmap_fibers(size_t n, weft_index_fn fn, void *ctx, size_t max_parallel, const void *site);

#endif /* WEFT_API_PMAP_H */
