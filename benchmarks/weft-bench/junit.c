/*
 * This file contains compare's JUnit XML report (`weft-bench compare
 * --junit FILE`): one <testcase> per measurement, so that GitLab, Jenkins
 * and GitHub show a regression as a failed test. The format is the one
 * those tools read (the Ant JUnit task's): <testsuites>, one <testsuite>
 * with its counts and <properties>, and per case <failure message= type=>
 * or <skipped message=>, with the details in <system-out>.
 */
#define _POSIX_C_SOURCE 200809L
#include "compare.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/*
 * Text and attribute values, escaped. XML 1.0 cannot hold most control
 * characters even escaped: they become '?'. Bytes of 0x80 and above pass
 * as they are (the file is UTF-8, as weft-bench's records are).
 */
static void put_escaped(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    switch (*p) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    case '\'':
      fputs("&apos;", f);
      break;
    default:
      if (*p < 0x20 && *p != '\n' && *p != '\t' && *p != '\r')
        fputc('?', f);
      else
        fputc(*p, f);
    }
  }
}

int wb_junit_write(const char *path, const char *suite, const char *const *properties,
                   const wb_junit_case *cases, size_t ncases) {
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    fprintf(stderr, "weft-bench compare: cannot write %s: %s\n", path, strerror(e));
    return -e;
  }
  size_t failures = 0, skipped = 0;
  double total = 0;
  for (size_t i = 0; i < ncases; i++) {
    failures += cases[i].failure != NULL;
    skipped += cases[i].skipped != NULL;
    total += cases[i].time_s;
  }
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);

  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"", f);
  put_escaped(f, suite);
  fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" skipped=\"%zu\" time=\"%.6f\">\n", ncases,
          failures, skipped, total);
  fputs("  <testsuite name=\"", f);
  put_escaped(f, suite);
  fprintf(f,
          "\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" skipped=\"%zu\" time=\"%.6f\" timestamp=\"%s\">\n",
          ncases, failures, skipped, total, stamp);
  if (properties && properties[0]) {
    fputs("    <properties>\n", f);
    for (size_t i = 0; properties[i] && properties[i + 1]; i += 2) {
      fputs("      <property name=\"", f);
      put_escaped(f, properties[i]);
      fputs("\" value=\"", f);
      put_escaped(f, properties[i + 1]);
      fputs("\"/>\n", f);
    }
    fputs("    </properties>\n", f);
  }
  for (size_t i = 0; i < ncases; i++) {
    const wb_junit_case *c = &cases[i];
    fputs("    <testcase classname=\"", f);
    put_escaped(f, c->classname);
    fputs("\" name=\"", f);
    put_escaped(f, c->name);
    fprintf(f, "\" time=\"%.6f\">\n", c->time_s);
    if (c->failure) {
      fputs("      <failure type=\"", f);
      put_escaped(f, c->failure);
      fputs("\" message=\"", f);
      put_escaped(f, c->message);
      fputs("\">", f);
      put_escaped(f, c->message);
      fputs("</failure>\n", f);
    } else if (c->skipped) {
      fputs("      <skipped message=\"", f);
      put_escaped(f, c->skipped);
      fputs("\"/>\n", f);
    }
    fputs("      <system-out>", f);
    put_escaped(f, c->message);
    if (c->output && c->output[0]) {
      fputc('\n', f);
      put_escaped(f, c->output);
    }
    fputs("</system-out>\n    </testcase>\n", f);
  }
  fputs("  </testsuite>\n</testsuites>\n", f);
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  if (bad) {
    fprintf(stderr, "weft-bench compare: cannot write %s\n", path);
    return -EIO;
  }
  return 0;
}
