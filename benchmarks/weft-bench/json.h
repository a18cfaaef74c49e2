/*
 * This file contains weft-bench's JSON value: a small tree that records are
 * built in, written from (one object per line, JSON Lines) and read back
 * into by a strict reader (RFC 8259, no extensions), with no dependency.
 *
 * Ownership: a container owns its children; json_free frees a whole tree.
 * Every function that allocates returns 0 or -ENOMEM (nothing changes then).
 */
#ifndef WEFT_BENCH_JSON_H
#define WEFT_BENCH_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
  json_type type;
  union {
    bool b;
    double num;
    char *str; /* NUL-terminated UTF-8; the reader refuses \u0000 so this is the whole string */
    struct {
      json_value **items;
      size_t n, cap;
    } arr;
    struct {
      char **keys; /* in insertion order: records are written in the order they were built */
      json_value **vals;
      size_t n, cap;
    } obj;
  } u;
};

/* Constructors: NULL when out of memory. */
json_value *json_new_null(void);
json_value *json_new_bool(bool b);
json_value *json_new_number(double v);
json_value *json_new_string(const char *s);
json_value *json_new_array(void);
json_value *json_new_object(void);
json_value *json_clone(const json_value *v);
void json_free(json_value *v);

/* Append v to an array; the array owns v on success (the caller still owns it on failure). */
int json_array_push(json_value *arr, json_value *v);

/*
 * Set key to v in an object, replacing (and freeing) an existing value in
 * place so the key keeps its position. The object owns v on success; on
 * failure v is freed too, so that callers can chain json_set(o, k, json_new_x(..)).
 * A NULL v (a failed constructor) gives -ENOMEM.
 */
int json_set(json_value *obj, const char *key, json_value *v);

/* Shorthands for json_set with a fresh value. A NULL string sets null. */
int json_set_str(json_value *obj, const char *key, const char *s);
int json_set_num(json_value *obj, const char *key, double v);
int json_set_int(json_value *obj, const char *key, int64_t v);
int json_set_bool(json_value *obj, const char *key, bool b);
int json_set_null(json_value *obj, const char *key);
int json_set_nums(json_value *obj, const char *key, const double *v, size_t n);

/* Remove key from an object (no-op when absent). */
void json_unset(json_value *obj, const char *key);

/* The value of key in an object, or NULL (also when obj is not an object). */
const json_value *json_get(const json_value *obj, const char *key);
/* Typed getters: false when absent or of another type. */
bool json_get_num(const json_value *obj, const char *key, double *out);
const char *json_get_str(const json_value *obj, const char *key);

/*
 * Serialise v on one line (no newline) into a malloc'd string. Numbers are
 * written in the shortest form that reads back to the same double; NaN and
 * infinities (which JSON cannot hold) are written as null.
 */
int json_write(const json_value *v, char **out);

/* Write v and a newline to f in one stdio call (a JSON Lines record); 0 or a negative errno. */
int json_print_line(const json_value *v, FILE *f);

/*
 * Parse text[0..len) as exactly one JSON value (surrounding whitespace
 * allowed). Strict: no comments, no trailing commas, no leading zeros, no
 * bare NaN, no duplicate keys, no control characters in strings, valid
 * UTF-8 and surrogate pairs, nesting at most 64 deep. On error returns
 * -EINVAL and, when err is not NULL, writes "column C: what" into
 * err[0..errlen) (the column counts bytes from 1).
 */
int json_parse(const char *text, size_t len, json_value **out, char *err, size_t errlen);

#endif /* WEFT_BENCH_JSON_H */
