/*
 * This file contains weft-bench's JSON Lines on jansson (jsonl.c): one
 * record (a JSON object) per line, written and read by jansson, with the
 * few rules jansson leaves to its caller:
 *
 *   - numbers: a whole number below 2^53 is written as an integer; any
 *     other finite number is kept to 15 significant digits (DBL_DIG), so
 *     that what is written reads back to the very double that was stored;
 *     NaN and the infinities, which JSON cannot hold, become null;
 *   - a NULL string becomes null;
 *   - reading is strict: exactly one object per line, duplicate keys and
 *     \u0000 refused (jansson refuses the rest of what RFC 8259 forbids).
 *
 * Ownership is jansson's: every setter takes ("steals") the value it is
 * given, also when it fails, so that calls chain as
 * rc = rc ? rc : wb_json_set_num(rec, "k", v). They return 0 or -ENOMEM.
 */
#ifndef WEFT_BENCH_JSONL_H
#define WEFT_BENCH_JSONL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A number as weft-bench writes it (see above); NULL when out of memory. */
json_t *wb_json_number(double v);

/* Set key of obj to v (stolen; NULL gives -ENOMEM). An existing key keeps its place. */
int wb_json_set(json_t *obj, const char *key, json_t *v);
int wb_json_set_num(json_t *obj, const char *key, double v);
int wb_json_set_int(json_t *obj, const char *key, int64_t v);
int wb_json_set_str(json_t *obj, const char *key, const char *s);
int wb_json_set_bool(json_t *obj, const char *key, bool b);
int wb_json_set_null(json_t *obj, const char *key);
/* An array of n numbers (NaN: null). */
int wb_json_set_nums(json_t *obj, const char *key, const double *v, size_t n);

/* A number (integer or real) at key: false when absent or of another type. */
bool wb_json_get_num(const json_t *obj, const char *key, double *out);
/* A string at key, or NULL. */
const char *wb_json_get_str(const json_t *obj, const char *key);

/* Write v on one line and a newline to f, in one stdio call: 0 or a negative errno. */
int wb_json_print_line(const json_t *v, FILE *f);

/* A scalar's text as a key for matching: strings as they are, numbers in one form whatever their type. */
char *wb_json_key_text(const json_t *v);

/*
 * Parse text[0..len) as one JSON object. Returns 0 with *out (the caller
 * decrefs it); -EINVAL with "column C: what" in err[0..errlen) when it is
 * not one JSON value or not an object; -ENOMEM.
 */
int wb_json_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen);

#endif /* WEFT_BENCH_JSONL_H */
