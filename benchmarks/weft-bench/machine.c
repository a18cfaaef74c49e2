/*
 * This file contains the machine's part of every record's environment
 * fingerprint: what ran the measurement, as far as a program can tell
 * without privileges. `weft-bench compare` refuses to compare two runs whose
 * fingerprints differ (docs/weft-bench.md), so every value here must be the
 * same on two runs of one machine and say what changed when it is not:
 *
 *   cores, affinity, cpus_online  the CPUs this process may use (what weft sizes
 *                                 itself by), as a count and a list, and those online
 *   cpu_model                     "model name" of /proc/cpuinfo (or its Arm cousins)
 *   kernel                        uname: system, release, machine
 *   thp, thp_defrag               transparent huge pages: the chosen setting of
 *                                 /sys/kernel/mm/transparent_hugepage/{enabled,defrag}
 *   virtualization                the hypervisor: CPUID's signature on x86 (kvm, xen,
 *                                 vmware, hyperv, qemu, ...), "none" when CPUID says there
 *                                 is none, else /sys/hypervisor or DMI, else "unknown"
 *   container                     docker, podman or $container's value; null when none is seen
 *   cpu_quota                     the cgroup's CPU limit: cgroup v2 cpu.max ("max 100000",
 *                                 "150000 100000") or v1's quota and period; null when unreadable
 *
 * Nothing here depends on the time, the load or the process.
 */
/* CPU lists come from sched_getaffinity, a GNU extension: Linux first. */
#define _GNU_SOURCE 1
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* The first line of a file, without its newline; false when it cannot be read or is empty. */
static bool read_line(const char *path, char *out, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(out, (int)len, f) != NULL;
  fclose(f);
  if (!ok) return false;
  size_t n = strlen(out);
  while (n && isspace((unsigned char)out[n - 1])) out[--n] = '\0';
  return n > 0;
}

/* The first value of one of keys in /proc/cpuinfo ("model name" on x86, others on Arm). */
static void cpu_model(char *out, size_t len) {
  static const char *const keys[] = {"model name", "Hardware", "Processor", "cpu model", "uarch"};
  snprintf(out, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  size_t best = sizeof keys / sizeof keys[0];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    for (size_t k = 0; k < best; k++) {
      size_t kl = strlen(keys[k]);
      if (strncmp(line, keys[k], kl) != 0 || (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':'))
        continue;
      char *v = colon + 1;
      while (isspace((unsigned char)*v)) v++;
      size_t n = strlen(v);
      while (n && isspace((unsigned char)v[n - 1])) v[--n] = '\0';
      if (n) {
        snprintf(out, len, "%s", v);
        best = k; /* keep looking only for a better key */
      }
      break;
    }
    if (best == 0) break;
  }
  fclose(f);
}

/* The setting in brackets of a sysfs choice file ("always [madvise] never" gives "madvise"); false without.
 */
static bool sysfs_choice(const char *path, char *out, size_t len) {
  char line[256];
  if (!read_line(path, line, sizeof line)) return false;
  char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
  if (!a || !b) return false;
  snprintf(out, len, "%.*s", (int)(b - a - 1), a + 1);
  return true;
}

/* The hypervisor's name from CPUID, "none", or NULL when this is not x86. */
static const char *virt_cpuid(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
  if (!(c & (1u << 31))) return "none"; /* the "hypervisor present" bit */
  __cpuid(0x40000000, a, b, c, d);
  char sig[13];
  memcpy(sig, &b, 4);
  memcpy(sig + 4, &c, 4);
  memcpy(sig + 8, &d, 4);
  sig[12] = '\0';
  static const struct {
    const char *sig, *name;
  } known[] = {
      {"KVMKVMKVM", "kvm"},          {"Microsoft Hv", "hyperv"}, {"VMwareVMware", "vmware"},
      {"XenVMMXenVMM", "xen"},       {"TCGTCGTCGTCG", "qemu"},   {"bhyve bhyve ", "bhyve"},
      {" lrpepyh  vr", "parallels"}, {"ACRNACRNACRN", "acrn"},   {"VBoxVBoxVBox", "virtualbox"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strncmp(sig, known[i].sig, strlen(known[i].sig)) == 0) return known[i].name;
  return "other";
#else
  return NULL;
#endif
}

static void virtualization(char *out, size_t len) {
  const char *v = virt_cpuid();
  char line[128];
  if (v) {
    snprintf(out, len, "%s", v);
  } else if (read_line("/sys/hypervisor/type", line, sizeof line)) {
    snprintf(out, len, "%.*s", (int)len - 1, line); /* a short word; cut to fit if not */
  } else if (read_line("/sys/class/dmi/id/sys_vendor", line, sizeof line)) {
    /* DMI names the maker; a few makers are hypervisors. Anything else is a machine we cannot place. */
    static const struct {
      const char *vendor, *name;
    } known[] = {{"QEMU", "qemu"}, {"VMware", "vmware"},      {"Microsoft Corporation", "hyperv"},
                 {"Xen", "xen"},   {"innotek", "virtualbox"}, {"Amazon EC2", "kvm"}};
    snprintf(out, len, "unknown");
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
      if (strncmp(line, known[i].vendor, strlen(known[i].vendor)) == 0)
        snprintf(out, len, "%s", known[i].name);
  } else {
    snprintf(out, len, "unknown");
  }
}

static const char *container(void) {
  const char *c = getenv("container"); /* systemd-nspawn, LXC, podman set it for the container's processes */
  if (c && *c) return c;
  if (access("/run/.containerenv", F_OK) == 0) return "podman";
  if (access("/.dockerenv", F_OK) == 0) return "docker";
  return NULL;
}

/* The cgroup's CPU limit, or false when there is none to read. */
static bool cpu_quota(char *out, size_t len) {
  char line[512], path[640];
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f) {
    /* cgroup v2: "0::/the/path" */
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "0::", 3) != 0) continue;
      line[strcspn(line, "\n")] = '\0';
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(line + 3, "/") == 0 ? "" : line + 3);
      fclose(f);
      if (read_line(path, out, len)) return true;
      return read_line("/sys/fs/cgroup/cpu.max", out, len);
    }
    fclose(f);
  }
  char q[64], p[64];
  if (read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", q, sizeof q) &&
      read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", p, sizeof p)) {
    snprintf(out, len, "%s %s", strcmp(q, "-1") == 0 ? "max" : q, p);
    return true;
  }
  return false;
}

int wb_machine_add(json_t *rec) {
  char model[256], kernel[512], affinity[512], thp[64], defrag[64], virt[64], quota[128];
  cpu_model(model, sizeof model);
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(kernel, sizeof kernel, "%s %s %s", u.sysname, u.release, u.machine);
  else
    snprintf(kernel, sizeof kernel, "unknown");
  wb_affinity_list(affinity, sizeof affinity);
  virtualization(virt, sizeof virt);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  bool have_thp = sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
  bool have_defrag = sysfs_choice("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof defrag);
  bool have_quota = cpu_quota(quota, sizeof quota);

  int rc = wb_json_set_int(rec, "cores", wb_cores());
  if (rc == 0) rc = wb_json_set_str(rec, "affinity", affinity);
  if (rc == 0)
    rc = online > 0 ? wb_json_set_int(rec, "cpus_online", online) : wb_json_set_null(rec, "cpus_online");
  if (rc == 0) rc = wb_json_set_str(rec, "cpu_model", model);
  if (rc == 0) rc = wb_json_set_str(rec, "kernel", kernel);
  if (rc == 0) rc = wb_json_set_str(rec, "thp", have_thp ? thp : NULL);
  if (rc == 0) rc = wb_json_set_str(rec, "thp_defrag", have_defrag ? defrag : NULL);
  if (rc == 0) rc = wb_json_set_str(rec, "virtualization", virt);
  if (rc == 0) rc = wb_json_set_str(rec, "container", container());
  if (rc == 0) rc = wb_json_set_str(rec, "cpu_quota", have_quota ? quota : NULL);
  return rc;
}
