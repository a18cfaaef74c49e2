/*
 * This file contains how the API starts the fiber runtime: with what the
 * layers above the fiber layer give it (weft__fiber_hooks), so that the
 * fiber layer never reaches up for them.
 */
#ifndef WEFT_API_LIFECYCLE_H
#define WEFT_API_LIFECYCLE_H

#include "../base/internal.h"

/* weft__fibers_start with the CPU backend's hooks: 0, or a negative errno (the CPU path then). */
int weft__fibers_up(void);

#endif /* WEFT_API_LIFECYCLE_H */
