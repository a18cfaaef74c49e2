/*
 * This file contains weft-bench's JSON Lines on jansson (jsonl.h): how a
 * number is written, the setters and getters the records use, one record
 * per line out, one record per line in.
 */
#define _POSIX_C_SOURCE 200809L
#include "jsonl.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 2^53: below it every whole double is an exact integer, and JSON readers of doubles keep it. */
#define WHOLE_MAX 9007199254740992.0

json_t *wb_json_number(double v) {
  if (!isfinite(v)) return json_null();
  if (v == floor(v) && fabs(v) < WHOLE_MAX) return json_integer((json_int_t)v);
  /*
   * DBL_DIG digits: any decimal of that many digits reads back to a double
   * that prints as the same digits, so a value rounded to them is written
   * and read back exactly by jansson's JSON_REAL_PRECISION(DBL_DIG) below.
   * (jansson's default, 17 digits, would write 0.1 as 0.10000000000000001.)
   */
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%.*g", DBL_DIG, v);
  return json_real(strtod(tmp, NULL));
}

int wb_json_set(json_t *obj, const char *key, json_t *v) {
  if (!v) return -ENOMEM;
  return json_object_set_new(obj, key, v) == 0 ? 0 : -ENOMEM;
}

int wb_json_set_num(json_t *obj, const char *key, double v) {
  return wb_json_set(obj, key, wb_json_number(v));
}

int wb_json_set_int(json_t *obj, const char *key, int64_t v) {
  return wb_json_set(obj, key, json_integer((json_int_t)v));
}

int wb_json_set_str(json_t *obj, const char *key, const char *s) {
  return wb_json_set(obj, key, s ? json_string(s) : json_null());
}

int wb_json_set_bool(json_t *obj, const char *key, bool b) { return wb_json_set(obj, key, json_boolean(b)); }

int wb_json_set_null(json_t *obj, const char *key) { return wb_json_set(obj, key, json_null()); }

int wb_json_set_nums(json_t *obj, const char *key, const double *v, size_t n) {
  json_t *arr = json_array();
  if (!arr) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (json_array_append_new(arr, wb_json_number(v[i])) != 0) {
      json_decref(arr);
      return -ENOMEM;
    }
  }
  return wb_json_set(obj, key, arr);
}

bool wb_json_get_num(const json_t *obj, const char *key, double *out) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  if (!json_is_number(v)) return false;
  *out = json_number_value(v);
  return true;
}

const char *wb_json_get_str(const json_t *obj, const char *key) {
  return json_is_object(obj) ? json_string_value(json_object_get(obj, key)) : NULL;
}

int wb_json_print_line(const json_t *v, FILE *f) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(DBL_DIG));
  if (!s) return -ENOMEM;
  size_t n = strlen(s);
  /* The newline in the same buffer: one fwrite, so that lines of concurrent writers do not mix. */
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return -ENOMEM;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  int rc = fwrite(line, 1, n + 1, f) == n + 1 ? 0 : -EIO;
  free(line);
  return rc;
}

char *wb_json_key_text(const json_t *v) {
  if (json_is_string(v)) return strdup(json_string_value(v));
  if (json_is_number(v)) {
    /* 8 and 8.0 are the same measurement. */
    char tmp[40];
    snprintf(tmp, sizeof tmp, "%.17g", json_number_value(v));
    return strdup(tmp);
  }
  if (!v || json_is_null(v)) return strdup("null");
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
}

int wb_json_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen) {
  json_error_t e;
  json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
  if (!v) {
    if (json_error_code(&e) == json_error_out_of_memory) return -ENOMEM;
    if (err) snprintf(err, errlen, "column %d: %s", e.column, e.text);
    return -EINVAL;
  }
  if (!json_is_object(v)) {
    json_decref(v);
    if (err) snprintf(err, errlen, "column 1: not a JSON object");
    return -EINVAL;
  }
  *out = v;
  return 0;
}
