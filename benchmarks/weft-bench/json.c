/*
 * This file contains weft-bench's JSON tree, its writer and its strict
 * reader (see json.h). The reader accepts exactly RFC 8259 JSON and nothing
 * else, because `compare` must not guess at a damaged results file: a
 * truncated line or a hand edit gives a clear error instead of a silently
 * different number.
 */
#define _POSIX_C_SOURCE 200809L
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The tree                                                                  */
/* ------------------------------------------------------------------------ */

static json_value *new_value(json_type t) {
  json_value *v = calloc(1, sizeof *v);
  if (v) v->type = t;
  return v;
}

json_value *json_new_null(void) { return new_value(JSON_NULL); }
json_value *json_new_array(void) { return new_value(JSON_ARRAY); }
json_value *json_new_object(void) { return new_value(JSON_OBJECT); }

json_value *json_new_bool(bool b) {
  json_value *v = new_value(JSON_BOOL);
  if (v) v->u.b = b;
  return v;
}

json_value *json_new_number(double d) {
  json_value *v = new_value(JSON_NUMBER);
  if (v) v->u.num = d;
  return v;
}

json_value *json_new_string(const char *s) {
  json_value *v = new_value(JSON_STRING);
  if (!v) return NULL;
  v->u.str = strdup(s);
  if (!v->u.str) {
    free(v);
    return NULL;
  }
  return v;
}

void json_free(json_value *v) {
  if (!v) return;
  switch (v->type) {
  case JSON_STRING:
    free(v->u.str);
    break;
  case JSON_ARRAY:
    for (size_t i = 0; i < v->u.arr.n; i++) json_free(v->u.arr.items[i]);
    free(v->u.arr.items);
    break;
  case JSON_OBJECT:
    for (size_t i = 0; i < v->u.obj.n; i++) {
      free(v->u.obj.keys[i]);
      json_free(v->u.obj.vals[i]);
    }
    free(v->u.obj.keys);
    free(v->u.obj.vals);
    break;
  default:
    break;
  }
  free(v);
}

int json_array_push(json_value *arr, json_value *v) {
  if (!arr || arr->type != JSON_ARRAY || !v) return -EINVAL;
  if (arr->u.arr.n == arr->u.arr.cap) {
    size_t cap = arr->u.arr.cap ? 2 * arr->u.arr.cap : 8;
    json_value **items = realloc(arr->u.arr.items, cap * sizeof *items);
    if (!items) return -ENOMEM;
    arr->u.arr.items = items;
    arr->u.arr.cap = cap;
  }
  arr->u.arr.items[arr->u.arr.n++] = v;
  return 0;
}

static long find_key(const json_value *obj, const char *key) {
  for (size_t i = 0; i < obj->u.obj.n; i++)
    if (strcmp(obj->u.obj.keys[i], key) == 0) return (long)i;
  return -1;
}

int json_set(json_value *obj, const char *key, json_value *v) {
  if (!v) return -ENOMEM;
  if (!obj || obj->type != JSON_OBJECT) {
    json_free(v);
    return -EINVAL;
  }
  long at = find_key(obj, key);
  if (at >= 0) {
    json_free(obj->u.obj.vals[at]);
    obj->u.obj.vals[at] = v;
    return 0;
  }
  if (obj->u.obj.n == obj->u.obj.cap) {
    size_t cap = obj->u.obj.cap ? 2 * obj->u.obj.cap : 16;
    char **keys = realloc(obj->u.obj.keys, cap * sizeof *keys);
    if (!keys) goto oom;
    obj->u.obj.keys = keys;
    json_value **vals = realloc(obj->u.obj.vals, cap * sizeof *vals);
    if (!vals) goto oom;
    obj->u.obj.vals = vals;
    obj->u.obj.cap = cap;
  }
  char *k = strdup(key);
  if (!k) goto oom;
  obj->u.obj.keys[obj->u.obj.n] = k;
  obj->u.obj.vals[obj->u.obj.n] = v;
  obj->u.obj.n++;
  return 0;
oom:
  json_free(v);
  return -ENOMEM;
}

int json_set_str(json_value *obj, const char *key, const char *s) {
  return json_set(obj, key, s ? json_new_string(s) : json_new_null());
}
int json_set_num(json_value *obj, const char *key, double d) {
  return json_set(obj, key, json_new_number(d));
}
int json_set_int(json_value *obj, const char *key, int64_t i) {
  return json_set(obj, key, json_new_number((double)i));
}
int json_set_bool(json_value *obj, const char *key, bool b) { return json_set(obj, key, json_new_bool(b)); }
int json_set_null(json_value *obj, const char *key) { return json_set(obj, key, json_new_null()); }

int json_set_nums(json_value *obj, const char *key, const double *v, size_t n) {
  json_value *arr = json_new_array();
  if (!arr) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_value *x = json_new_number(v[i]);
    if (!x || json_array_push(arr, x) < 0) {
      json_free(x);
      json_free(arr);
      return -ENOMEM;
    }
  }
  return json_set(obj, key, arr);
}

void json_unset(json_value *obj, const char *key) {
  if (!obj || obj->type != JSON_OBJECT) return;
  long at = find_key(obj, key);
  if (at < 0) return;
  free(obj->u.obj.keys[at]);
  json_free(obj->u.obj.vals[at]);
  for (size_t i = (size_t)at + 1; i < obj->u.obj.n; i++) {
    obj->u.obj.keys[i - 1] = obj->u.obj.keys[i];
    obj->u.obj.vals[i - 1] = obj->u.obj.vals[i];
  }
  obj->u.obj.n--;
}

const json_value *json_get(const json_value *obj, const char *key) {
  if (!obj || obj->type != JSON_OBJECT) return NULL;
  long at = find_key(obj, key);
  return at < 0 ? NULL : obj->u.obj.vals[at];
}

bool json_get_num(const json_value *obj, const char *key, double *out) {
  const json_value *v = json_get(obj, key);
  if (!v || v->type != JSON_NUMBER) return false;
  *out = v->u.num;
  return true;
}

const char *json_get_str(const json_value *obj, const char *key) {
  const json_value *v = json_get(obj, key);
  return v && v->type == JSON_STRING ? v->u.str : NULL;
}

json_value *json_clone(const json_value *v) {
  if (!v) return NULL;
  switch (v->type) {
  case JSON_NULL:
    return json_new_null();
  case JSON_BOOL:
    return json_new_bool(v->u.b);
  case JSON_NUMBER:
    return json_new_number(v->u.num);
  case JSON_STRING:
    return json_new_string(v->u.str);
  case JSON_ARRAY: {
    json_value *a = json_new_array();
    for (size_t i = 0; a && i < v->u.arr.n; i++) {
      json_value *c = json_clone(v->u.arr.items[i]);
      if (!c || json_array_push(a, c) < 0) {
        json_free(c);
        json_free(a);
        a = NULL;
      }
    }
    return a;
  }
  case JSON_OBJECT: {
    json_value *o = json_new_object();
    for (size_t i = 0; o && i < v->u.obj.n; i++) {
      if (json_set(o, v->u.obj.keys[i], json_clone(v->u.obj.vals[i])) < 0) {
        json_free(o);
        o = NULL;
      }
    }
    return o;
  }
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* The writer                                                                */
/* ------------------------------------------------------------------------ */

typedef struct buf {
  char *s;
  size_t len, cap;
  int err; /* sticky: the first failure, so that writing code need not check each append */
} buf;

static void buf_addn(buf *b, const char *s, size_t n) {
  if (b->err) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->err = -ENOMEM;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void buf_add(buf *b, const char *s) { buf_addn(b, s, strlen(s)); }

static void write_string(buf *b, const char *s) {
  buf_add(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    switch (*p) {
    case '"':
      buf_add(b, "\\\"");
      break;
    case '\\':
      buf_add(b, "\\\\");
      break;
    case '\n':
      buf_add(b, "\\n");
      break;
    case '\r':
      buf_add(b, "\\r");
      break;
    case '\t':
      buf_add(b, "\\t");
      break;
    default:
      if (*p < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", *p);
        buf_add(b, esc);
      } else {
        buf_addn(b, (const char *)p, 1);
      }
    }
  }
  buf_add(b, "\"");
}

static void write_number(buf *b, double d) {
  char tmp[40];
  if (!isfinite(d)) {
    buf_add(b, "null");
    return;
  }
  if (d == floor(d) && fabs(d) < 9007199254740992.0) {
    snprintf(tmp, sizeof tmp, "%.0f", d);
  } else {
    /* The shortest of %.15g..%.17g that reads back exactly. */
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(tmp, sizeof tmp, "%.*g", prec, d);
      if (strtod(tmp, NULL) == d) break;
    }
  }
  if (strcmp(tmp, "-0") == 0) snprintf(tmp, sizeof tmp, "0");
  buf_add(b, tmp);
}

static void write_value(buf *b, const json_value *v) {
  switch (v->type) {
  case JSON_NULL:
    buf_add(b, "null");
    break;
  case JSON_BOOL:
    buf_add(b, v->u.b ? "true" : "false");
    break;
  case JSON_NUMBER:
    write_number(b, v->u.num);
    break;
  case JSON_STRING:
    write_string(b, v->u.str);
    break;
  case JSON_ARRAY:
    buf_add(b, "[");
    for (size_t i = 0; i < v->u.arr.n; i++) {
      if (i) buf_add(b, ",");
      write_value(b, v->u.arr.items[i]);
    }
    buf_add(b, "]");
    break;
  case JSON_OBJECT:
    buf_add(b, "{");
    for (size_t i = 0; i < v->u.obj.n; i++) {
      if (i) buf_add(b, ",");
      write_string(b, v->u.obj.keys[i]);
      buf_add(b, ":");
      write_value(b, v->u.obj.vals[i]);
    }
    buf_add(b, "}");
    break;
  }
}

int json_write(const json_value *v, char **out) {
  buf b = {0};
  write_value(&b, v);
  if (b.err) {
    free(b.s);
    return b.err;
  }
  *out = b.s;
  return 0;
}

int json_print_line(const json_value *v, FILE *f) {
  char *s = NULL;
  int rc = json_write(v, &s);
  if (rc < 0) return rc;
  /* One fprintf per record: a reader of a pipe never sees half a line from us. */
  rc = fprintf(f, "%s\n", s) < 0 ? -EIO : 0;
  if (rc == 0 && fflush(f) != 0) rc = -EIO;
  free(s);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* The reader                                                                */
/* ------------------------------------------------------------------------ */

#define JSON_MAX_DEPTH 64

typedef struct parser {
  const char *s;
  size_t len, pos;
  int depth;
  char *err;
  size_t errlen;
  bool failed;
  bool oom;
} parser;

static void fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(parser *p, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = true;
  if (!p->err || !p->errlen) return;
  int n = snprintf(p->err, p->errlen, "column %zu: ", p->pos + 1);
  if (n < 0 || (size_t)n >= p->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static json_value *parse_value(parser *p);

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos >= n && memcmp(p->s + p->pos, word, n) == 0) {
    p->pos += n;
    return true;
  }
  return false;
}

static int hex4(parser *p, unsigned *out) {
  if (p->len - p->pos < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[p->pos + (size_t)i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  p->pos += 4;
  *out = v;
  return 0;
}

static void put_utf8(buf *b, unsigned cp) {
  char t[4];
  size_t n;
  if (cp < 0x80) {
    t[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    t[0] = (char)(0xC0 | (cp >> 6));
    t[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    t[0] = (char)(0xE0 | (cp >> 12));
    t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    t[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    t[0] = (char)(0xF0 | (cp >> 18));
    t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    t[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  buf_addn(b, t, n);
}

/* Length of the valid UTF-8 sequence at s[0..avail), or 0 (overlongs, surrogates and > U+10FFFF refused). */
static size_t utf8_len(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  size_t n;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}

/* Parse a string at p->pos (on the opening quote) into a malloc'd C string. */
static char *parse_string(parser *p) {
  buf b = {0};
  p->pos++; /* the quote */
  for (;;) {
    if (p->pos >= p->len) {
      fail(p, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      buf_add(&b, ""); /* an empty string still gets its buffer */
      if (b.err) {
        p->oom = true;
        fail(p, "out of memory");
        break;
      }
      return b.s;
    }
    if (c < 0x20) {
      fail(p, "control character in string");
      break;
    }
    if (c == '\\') {
      p->pos++;
      if (p->pos >= p->len) {
        fail(p, "unterminated escape");
        break;
      }
      char e = p->s[p->pos++];
      switch (e) {
      case '"':
        buf_add(&b, "\"");
        break;
      case '\\':
        buf_add(&b, "\\");
        break;
      case '/':
        buf_add(&b, "/");
        break;
      case 'b':
        buf_add(&b, "\b");
        break;
      case 'f':
        buf_add(&b, "\f");
        break;
      case 'n':
        buf_add(&b, "\n");
        break;
      case 'r':
        buf_add(&b, "\r");
        break;
      case 't':
        buf_add(&b, "\t");
        break;
      case 'u': {
        unsigned cp, lo;
        if (hex4(p, &cp) < 0) {
          fail(p, "bad \\u escape");
          goto out;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail(p, "lone low surrogate");
          goto out;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (!(p->len - p->pos >= 2 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u')) {
            fail(p, "high surrogate without its low half");
            goto out;
          }
          p->pos += 2;
          if (hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
            fail(p, "bad surrogate pair");
            goto out;
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) {
          fail(p, "\\u0000 is not supported");
          goto out;
        }
        put_utf8(&b, cp);
        break;
      }
      default:
        p->pos--;
        fail(p, "bad escape '\\%c'", e);
        goto out;
      }
      continue;
    }
    size_t n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
    if (!n) {
      fail(p, "invalid UTF-8");
      break;
    }
    buf_addn(&b, p->s + p->pos, n);
    p->pos += n;
  }
out:
  if (b.err && !p->failed) {
    p->oom = true;
    fail(p, "out of memory");
  }
  free(b.s);
  return NULL;
}

static json_value *parse_number(parser *p) {
  size_t start = p->pos;
  const char *s = p->s;
  size_t i = p->pos;
#define DIGIT(k) ((k) < p->len && s[k] >= '0' && s[k] <= '9')
  if (i < p->len && s[i] == '-') i++;
  if (i < p->len && s[i] == '0') {
    i++;
    if (DIGIT(i)) {
      p->pos = i;
      fail(p, "leading zero in number");
      return NULL;
    }
  } else if (DIGIT(i)) {
    while (DIGIT(i)) i++;
  } else {
    p->pos = i;
    fail(p, "bad number");
    return NULL;
  }
  if (i < p->len && s[i] == '.') {
    i++;
    if (!DIGIT(i)) {
      p->pos = i;
      fail(p, "digit expected after '.'");
      return NULL;
    }
    while (DIGIT(i)) i++;
  }
  if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
    if (!DIGIT(i)) {
      p->pos = i;
      fail(p, "digit expected in exponent");
      return NULL;
    }
    while (DIGIT(i)) i++;
  }
#undef DIGIT
  /* strtod needs a terminated copy: the text is not NUL-terminated at the number's end. */
  char tmp[64];
  size_t n = i - start;
  if (n >= sizeof tmp) {
    fail(p, "number too long");
    return NULL;
  }
  memcpy(tmp, s + start, n);
  tmp[n] = '\0';
  double d = strtod(tmp, NULL);
  if (!isfinite(d)) {
    fail(p, "number out of range");
    return NULL;
  }
  p->pos = i;
  json_value *v = json_new_number(d);
  if (!v) {
    p->oom = true;
    fail(p, "out of memory");
  }
  return v;
}

static json_value *parse_array(parser *p) {
  json_value *arr = json_new_array();
  if (!arr) goto oom;
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
    return arr;
  }
  for (;;) {
    json_value *v = parse_value(p);
    if (!v) goto bad;
    if (json_array_push(arr, v) < 0) {
      json_free(v);
      goto oom;
    }
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      skip_ws(p);
      if (p->pos < p->len && p->s[p->pos] == ']') {
        fail(p, "trailing comma in array");
        goto bad;
      }
      continue;
    }
    if (p->pos < p->len && p->s[p->pos] == ']') {
      p->pos++;
      return arr;
    }
    fail(p, "expected ',' or ']' in array");
    goto bad;
  }
oom:
  p->oom = true;
  fail(p, "out of memory");
bad:
  json_free(arr);
  return NULL;
}

static json_value *parse_object(parser *p) {
  json_value *obj = json_new_object();
  if (!obj) goto oom;
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}') {
    p->pos++;
    return obj;
  }
  for (;;) {
    if (p->pos >= p->len || p->s[p->pos] != '"') {
      fail(p, "expected a string key in object");
      goto bad;
    }
    size_t key_pos = p->pos;
    char *key = parse_string(p);
    if (!key) goto bad;
    if (json_get(obj, key)) {
      p->pos = key_pos;
      fail(p, "duplicate key \"%s\"", key);
      free(key);
      goto bad;
    }
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != ':') {
      free(key);
      fail(p, "expected ':' after key");
      goto bad;
    }
    p->pos++;
    json_value *v = parse_value(p);
    if (!v) {
      free(key);
      goto bad;
    }
    int rc = json_set(obj, key, v); /* frees v on failure */
    free(key);
    if (rc < 0) goto oom;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      skip_ws(p);
      if (p->pos < p->len && p->s[p->pos] == '}') {
        fail(p, "trailing comma in object");
        goto bad;
      }
      continue;
    }
    if (p->pos < p->len && p->s[p->pos] == '}') {
      p->pos++;
      return obj;
    }
    fail(p, "expected ',' or '}' in object");
    goto bad;
  }
oom:
  p->oom = true;
  fail(p, "out of memory");
bad:
  json_free(obj);
  return NULL;
}

static json_value *parse_value(parser *p) {
  skip_ws(p);
  if (p->pos >= p->len) {
    fail(p, "unexpected end of input");
    return NULL;
  }
  if (++p->depth > JSON_MAX_DEPTH) {
    fail(p, "nested more than %d deep", JSON_MAX_DEPTH);
    return NULL;
  }
  json_value *v = NULL;
  char c = p->s[p->pos];
  if (c == '{')
    v = parse_object(p);
  else if (c == '[')
    v = parse_array(p);
  else if (c == '"') {
    char *s = parse_string(p);
    if (s) {
      v = new_value(JSON_STRING);
      if (v)
        v->u.str = s;
      else {
        free(s);
        p->oom = true;
        fail(p, "out of memory");
      }
    }
  } else if (c == '-' || (c >= '0' && c <= '9'))
    v = parse_number(p);
  else if (literal(p, "true"))
    v = json_new_bool(true);
  else if (literal(p, "false"))
    v = json_new_bool(false);
  else if (literal(p, "null"))
    v = json_new_null();
  else
    fail(p, "unexpected character '%c'", c);
  if (!v && !p->failed) {
    p->oom = true;
    fail(p, "out of memory");
  }
  p->depth--;
  return v;
}

int json_parse(const char *text, size_t len, json_value **out, char *err, size_t errlen) {
  parser p = {.s = text, .len = len, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = '\0';
  json_value *v = parse_value(&p);
  if (v) {
    skip_ws(&p);
    if (p.pos != p.len) {
      fail(&p, "unexpected text after the value");
      json_free(v);
      v = NULL;
    }
  }
  if (!v) return p.oom ? -ENOMEM : -EINVAL;
  *out = v;
  return 0;
}
