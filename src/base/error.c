/*
 * This file contains weft_strerror: the one table that gives each error that
 * weft returns its message, in weft's own words where the error has a
 * weft-specific meaning.
 */
#include "internal.h"

#include <string.h>

static const struct {
  int err; /* positive errno value */
  const char *msg;
} weft_errors[] = {
    {EINVAL, "invalid argument"},
    {ENOMEM, "out of memory"},
    {ETIMEDOUT, "deadline passed"},
    {ECANCELED, "cancelled"},
    {EBUSY, "busy: already running or held"},
    {EALREADY, "already finished or cancelled"},
    {EPIPE, "channel closed"},
    {ENOENT, "no binding for this key"},
    {ESHUTDOWN, "weft is shutting down"},
    {EAGAIN, "resource temporarily unavailable"},
    {EBADF, "bad file descriptor"},
    {ECONNRESET, "connection reset by peer"},
    {ECONNREFUSED, "connection refused"},
    {ENOSYS, "not supported by this build or system"},
    {EOVERFLOW, "value too large"},
    {EPERM, "operation not permitted"},
    {EDEADLK, "would deadlock"},
};

const char *weft_strerror(int err) {
  if (err == 0) return "success";
  if (err > 0) return "not a weft error (a value returned by the caller's function)";
  if (err == INT32_MIN) return "unknown error";
  int e = -err;
  for (size_t i = 0; i < sizeof weft_errors / sizeof weft_errors[0]; i++)
    if (weft_errors[i].err == e) return weft_errors[i].msg;
#ifdef WEFT_HAVE_STRERRORDESC_NP
  /* glibc's own table: static strings, safe from any thread. */
  const char *s = strerrordesc_np(e);
  if (s) return s;
#endif
  return "unknown error";
}
