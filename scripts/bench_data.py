#!/usr/bin/env python3
"""Read weft's benchmark results (scripts/bench.sh) and turn them into what
people read: the machine's metadata, the headline ratios, and the data files
that scripts/plots.sh hands to gnuplot. Standard library only.

  bench_data.py meta BUILD_DIR [PROFILE]  print meta.json (machine, build, load; PROFILE: full or quick)
  bench_data.py meta-finish META.tmp   add the load after the run; print it
  bench_data.py summary RESULTS_DIR    print the headline ratios and targets
  bench_data.py plots RESULTS_DIR OUT  write gnuplot data files (*.dat) into OUT, and
                                       OUT/warnings.tsv: the points too widely spread to trust

Google Benchmark files (bm_*.json) are read per repetition: the median of
each case is taken over its repetitions here, so the numbers do not depend
on which aggregates the run asked for. weft-bench files (*.jsonl) carry
their own medians (elapsed_ms) and every sample.
"""

import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def die(msg):
    sys.stderr.write("bench_data.py: %s\n" % msg)
    sys.exit(2)


# --- meta ------------------------------------------------------------------------


def read_first(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.split(":")[0].strip() == key:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def cmake_cache(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def cmd_meta(build, profile="full"):
    meta = {
        "profile": profile,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": " ".join(platform.uname()[i] for i in (0, 2, 4)),
        "cpu_model": read_first("/proc/cpuinfo", "model name") or read_first("/proc/cpuinfo", "Hardware"),
        "cores": len(os.sched_getaffinity(0)),
        "cpus_online": os.cpu_count(),
        "mem_total_kb": None,
        "loadavg_before": loadavg(),
        "build_type": cmake_cache(build, "CMAKE_BUILD_TYPE"),
        "c_compiler": cmake_cache(build, "CMAKE_C_COMPILER"),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("WEFT_", "OMP_", "GOMP_", "KMP_")) or k in ("GOMAXPROCS", "GOGC", "GODEBUG", "GOMEMLIMIT")},
    }
    mem = read_first("/proc/meminfo", "MemTotal")
    if mem:
        meta["mem_total_kb"] = int(mem.split()[0])
    gov = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    if os.path.exists(gov):
        with open(gov) as f:
            meta["cpufreq_governor"] = f.read().strip()
    # weft's own view of the build (version, OpenMP runtime, context switch,
    # git commit): one tiny weft-bench measurement carries all of it.
    wb = os.path.join(build, "benchmarks", "weft-bench", "weft-bench")
    try:
        out = subprocess.run([wb, "sleep", "--jobs", "1", "--sleep-ms", "1", "--json"], capture_output=True,
                             text=True, timeout=60).stdout
        rec = json.loads(out.splitlines()[0])
        for k in ("weft_version", "git_commit", "compiler", "compiler_flags", "build_type", "weft_compiler",
                  "openmp_runtime", "weft_openmp", "openmp_library", "fibers", "carriers", "context_switch",
                  "stack_size", "stack_guard", "io_uring", "affinity", "thp", "thp_defrag", "virtualization",
                  "container", "cpu_quota"):
            meta[k] = rec.get(k)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
        meta["weft_info_error"] = str(e)
    try:
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libbenchmark-dev"], capture_output=True,
                           text=True, timeout=30)
        meta["google_benchmark"] = v.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        meta["google_benchmark"] = None
    json.dump(meta, sys.stdout, indent=2)
    sys.stdout.write("\n")


def cmd_meta_finish(path):
    with open(path) as f:
        meta = json.load(f)
    meta["date_end"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta["loadavg_after"] = loadavg()
    json.dump(meta, sys.stdout, indent=2)
    sys.stdout.write("\n")


# --- reading results -------------------------------------------------------------------

NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


class GBench:
    """Per-case medians over the repetitions of one or more bm_*.json files."""

    def __init__(self, results):
        self.runs = {}  # run_name -> list of iteration entries
        for path in sorted(glob.glob(os.path.join(results, "bm_*.json"))):
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                sys.stderr.write("bench_data.py: %s: %s (skipped)\n" % (path, e))
                continue
            for b in doc.get("benchmarks", []):
                if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                    continue
                self.runs.setdefault(b.get("run_name", b["name"]), []).append(b)

    def names(self):
        return list(self.runs)

    def has(self, name):
        return name in self.runs

    def ns(self, name, agg=statistics.median):
        """Wall time per iteration in ns: the median of the repetitions (agg=min: the best)."""
        rs = self.runs.get(name)
        if not rs:
            return None
        return agg(r["real_time"] * NS.get(r.get("time_unit", "ns"), 1.0) for r in rs)

    def counter(self, name, key, agg=statistics.median):
        rs = [r for r in self.runs.get(name, []) if key in r]
        if not rs:
            return None
        return agg(r[key] for r in rs)

    def reps(self, name):
        return len(self.runs.get(name, []))


def read_jsonl(path):
    recs = []
    if not os.path.exists(path):
        return recs
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                sys.stderr.write("bench_data.py: %s:%d: %s (skipped)\n" % (path, n, e))
    return recs


def read_sleep(results):
    """weft-bench sleep records: fibers, threads and Go, then the fallback's file."""
    return (read_jsonl(os.path.join(results, "weft-bench-sleep.jsonl")) +
            read_jsonl(os.path.join(results, "weft-bench-sleep-fallback.jsonl")))


def read_sweep(results):
    """The scaling sweep (scripts/bench-sleep.sh, part sweep): fibers and Go, then the fallback."""
    return (read_jsonl(os.path.join(results, "weft-bench-sweep.jsonl")) +
            read_jsonl(os.path.join(results, "weft-bench-sweep-fallback.jsonl")))


def spread(r, key):
    """min and max of a figure over a record's repetitions (KEY_samples), else the figure itself."""
    v = [x for x in (r.get(key + "_samples") or []) if isinstance(x, (int, float))]
    if not v:
        return r.get(key), r.get(key)
    return min(v), max(v)


def fmt_ns(v):
    if v is None:
        return "-"
    if v >= 1e6:
        return "%.2f ms" % (v / 1e6)
    if v >= 1e3:
        return "%.2f us" % (v / 1e3)
    return "%.0f ns" % v


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt_x(v):
    return "-" if v is None else "%.2fx" % v


def verdict(v, ok):
    if v is None:
        return "n/a"
    return "MET" if ok(v) else "MISSED"


# --- summary ---------------------------------------------------------------------------

PMAP_SIZES = (100, 10000, 1000000)
PMAP_IMPLS = (("Seq", "sequential"), ("OmpFor", "omp parallel for"), ("OmpTaskloop", "omp taskloop"),
              ("Tbb", "tbb::parallel_for"), ("WeftPmap", "weft_pmap (auto grain)"))


def pmap_name(impl, n):
    return "BM_%s/n:%d/real_time" % (impl, n)


def best_grain(g, n):
    best = None
    prefix = "BM_WeftPmapGrain/n:%d/grain:" % n
    for name in g.names():
        if name.startswith(prefix):
            ips = g.counter(name, "items_per_second")
            grain = int(name[len(prefix):].split("/")[0])
            if ips and (best is None or ips > best[1]):
                best = (grain, ips)
    return best


def summary_pmap(g, out):
    if not g.has(pmap_name("Seq", 100)):
        return []
    targets = []
    out.append("CPU parallel map (bm_pmap), math kernel, items/s (median of %d repetitions)" %
               g.reps(pmap_name("Seq", 100)))
    out.append("  %-26s %14s %14s %14s" % ("", "n = 100", "n = 10^4", "n = 10^6"))
    for impl, label in PMAP_IMPLS:
        vals = [g.counter(pmap_name(impl, n), "items_per_second") for n in PMAP_SIZES]
        if all(v is None for v in vals):
            continue
        out.append("  %-26s %14s %14s %14s" % ((label,) + tuple("-" if v is None else "%.3g" % v for v in vals)))
    bests = [best_grain(g, n) for n in PMAP_SIZES]
    out.append("  %-26s %14s %14s %14s" % (("weft_pmap best fixed grain",) + tuple(
        "-" if b is None else "%.3g (g=%d)" % (b[1], b[0]) for b in bests)))
    out.append("  ratios of weft_pmap (auto) to each, same run:")
    weft = [g.counter(pmap_name("WeftPmap", n), "items_per_second") for n in PMAP_SIZES]
    for impl, label in PMAP_IMPLS[:-1]:
        base = [g.counter(pmap_name(impl, n), "items_per_second") for n in PMAP_SIZES]
        if all(v is None for v in base):
            continue
        out.append("    %-24s %14s %14s %14s" % (("vs " + label,) + tuple(fmt_x(ratio(w, b)) for w, b in zip(weft, base))))
    out.append("    %-24s %14s %14s %14s" % (("vs best fixed grain",) + tuple(
        fmt_x(ratio(w, b[1] if b else None)) for w, b in zip(weft, bests))))
    e_w, e_o = g.ns("BM_EmptyWeftPmap/real_time"), g.ns("BM_EmptyOmpFor/real_time")
    if e_w is not None:
        out.append("  empty call (one element per thread): weft_pmap %s, omp parallel for %s: %s" %
                   (fmt_ns(e_w), fmt_ns(e_o), fmt_x(ratio(e_w, e_o))))
    gl = {k: g.counter("BM_GparsLoop_%s/real_time" % k, "ns_per_call") for k in ("Seq", "Weft", "OmpFor")}
    out.append("  GPars loop, n = 100 called repeatedly: ns per call: seq %s, weft_pmap %s, omp parallel for %s" %
               (fmt_ns(gl["Seq"]), fmt_ns(gl["Weft"]), fmt_ns(gl["OmpFor"])))
    ips = lambda impl, agg=statistics.median: g.counter(pmap_name(impl, 10**6), "items_per_second", agg)
    npc = lambda impl, agg=statistics.median: g.counter("BM_GparsLoop_%s/real_time" % impl, "ns_per_call", agg)
    r1, b1 = ratio(ips("WeftPmap"), ips("OmpFor")), ratio(ips("WeftPmap", max), ips("OmpFor", max))
    r2, b2 = ratio(ips("WeftPmap"), ips("Seq")), ratio(ips("WeftPmap", max), ips("Seq", max))
    r3, b3 = ratio(npc("Weft"), npc("OmpFor")), ratio(npc("Weft", min), npc("OmpFor", min))
    targets.append(("weft_pmap >= 0.95x omp parallel for at n = 10^6 (throughput)", r1,
                    verdict(r1, lambda v: v >= 0.95), b1))
    targets.append(("weft_pmap >= 1.8x sequential at n = 10^6 (throughput)", r2, verdict(r2, lambda v: v >= 1.8), b2))
    targets.append(("GPars loop: weft time per call <= 1.5x omp parallel for", r3, verdict(r3, lambda v: v <= 1.5), b3))
    r4 = ratio(weft[2], bests[2][1] if bests[2] else None)
    targets.append(("auto grain vs best fixed grain at n = 10^6 (throughput; info)", r4, "info", None))
    out.append("")
    return targets


SMALL_SIZES = (10, 100, 1000, 10000, 100000, 1000000)


def summary_small_maps(g, out):
    """Issue 15: weft against the best of the others at every n, and EPCC's overhead figures."""
    if not g.has(pmap_name("Seq", 10)):
        return []
    out.append("CPU map at every size (bm_pmap), items/s (median): weft_pmap against the best of the others")
    out.append("  %-9s %11s %11s %11s %11s %11s  %-22s %s" % ("n", "sequential", "omp for", "taskloop", "tbb",
                                                              "weft_pmap", "best other", "weft / best"))
    targets = []
    worst_small, worst_large = None, None
    for n in SMALL_SIZES:
        vals = {impl: g.counter(pmap_name(impl, n), "items_per_second") for impl, _ in PMAP_IMPLS}
        others = [(v, label) for (impl, label) in PMAP_IMPLS[:-1] for v in [vals[impl]] if v is not None]
        best = max(others) if others else (None, "-")
        r = ratio(vals["WeftPmap"], best[0])
        cells = tuple("-" if vals[i] is None else "%.3g" % vals[i] for i, _ in PMAP_IMPLS)
        out.append("  %-9d %11s %11s %11s %11s %11s  %-22s %s" % ((n,) + cells + (best[1], fmt_x(r))))
        if r is not None:
            if n < 10000:
                worst_small = r if worst_small is None else min(worst_small, r)
            else:
                worst_large = r if worst_large is None else min(worst_large, r)
    targets.append(("weft >= 0.95x the best other at n = 10 .. 1000 (the worst n)", worst_small,
                    verdict(worst_small, lambda v: v >= 0.95), None))
    targets.append(("weft >= 0.98x the best other at n = 10^4 .. 10^6 (the worst n)", worst_large,
                    verdict(worst_large, lambda v: v >= 0.98), None))
    ov = {k: g.counter("BM_Epcc_%s/real_time" % k, "overhead_ns") for k in
          ("ParallelFor_Omp", "ParallelFor_Weft", "ParallelFor_WeftAuto", "Task_Omp", "MasterTask_Omp",
           "TaskMap_Weft", "MasterTask_WeftFuture")}
    if ov["ParallelFor_Omp"] is not None:
        out.append("  EPCC overhead (construct around a 0.1 us delay, less the delay), ns: PARALLEL FOR omp %s, "
                   "weft grain 1 %s, weft auto %s; TASK omp %s, MASTER TASK omp %s, weft task map %s, "
                   "weft futures %s" % tuple(fmt_ns(ov[k]) for k in ("ParallelFor_Omp", "ParallelFor_Weft",
                                                                       "ParallelFor_WeftAuto", "Task_Omp",
                                                                       "MasterTask_Omp", "TaskMap_Weft",
                                                                       "MasterTask_WeftFuture")))
        r = ratio(ov["ParallelFor_Weft"], ov["ParallelFor_Omp"])
        targets.append(("forced parallel call (grain 1): overhead <= 1.2x omp parallel for's", r,
                        verdict(r, lambda v: v <= 1.2), None))
    out.append("")
    return targets


FUTURE_CASES = (("BM_FutureCpu/real_time", "CPU future start+get (main thread)"),
                ("BM_FutureBlocking/real_time", "BLOCKING future start+get (main thread)"),
                ("BM_FiberSpawnJoin/real_time", "fiber spawn+join (from a fiber)"),
                ("BM_FiberSpawnJoinBatch/k:100/real_time", "fiber spawn+join, 100 at a time (per future)"),
                ("BM_FutureCpuFromFiber/real_time", "CPU future start+get (from a fiber)"),
                ("BM_PthreadCreateJoin/real_time", "pthread_create+join"))


def summary_future(g, out):
    if not g.has("BM_PthreadCreateJoin/real_time"):
        return []
    out.append("Futures (bm_future), ns per start+get (median of %d repetitions)" %
               g.reps("BM_PthreadCreateJoin/real_time"))
    pt = g.ns("BM_PthreadCreateJoin/real_time")
    for name, label in FUTURE_CASES:
        v = g.ns(name)
        if name.startswith("BM_FiberSpawnJoinBatch"):
            v = g.counter(name, "ns_per_future")
        out.append("  %-46s %12s   pthread_create+join / this: %s" % (label, fmt_ns(v), fmt_x(ratio(pt, v))))
    out.append("")
    r1 = ratio(pt, g.ns("BM_FutureCpu/real_time"))
    r2 = ratio(pt, g.ns("BM_FiberSpawnJoin/real_time"))
    ptb = g.ns("BM_PthreadCreateJoin/real_time", min)
    b1 = ratio(ptb, g.ns("BM_FutureCpu/real_time", min))
    b2 = ratio(ptb, g.ns("BM_FiberSpawnJoin/real_time", min))
    return [("CPU future start+get >= 5x faster than pthread_create+join", r1, verdict(r1, lambda v: v >= 5), b1),
            ("fiber spawn+join >= 50x faster than pthread_create+join", r2, verdict(r2, lambda v: v >= 50), b2)]


def summary_sleep(g, out):
    if not g.has("BM_SleepThreadNanosleep/d_ns:0/real_time"):
        return []
    out.append("Sleep lateness (bm_sleep), actual - requested, ns: median of the per-repetition medians [p99]")
    out.append("  %-28s %18s %18s %18s %18s" % ("", "d = 0 (yield)", "d = 10 us", "d = 100 us", "d = 1 ms"))
    for case, label in (("SleepFiber", "weft_sleep_ns on a fiber"), ("SleepThreadWeft", "weft_sleep_ns on a thread"),
                        ("SleepThreadNanosleep", "clock_nanosleep on a thread")):
        cells = []
        for d in (0, 10000, 100000, 1000000):
            name = "BM_%s/d_ns:%d/real_time" % (case, d)
            m, p = g.counter(name, "lateness_ns"), g.counter(name, "lateness_p99_ns")
            cells.append("-" if m is None else "%s [%s]" % (fmt_ns(m), fmt_ns(p)))
        out.append("  %-28s %18s %18s %18s %18s" % ((label,) + tuple(cells)))
    labels = {"weft": "weft_sleep_ns (parks the fiber)",
              "plain": "plain clock_nanosleep (pins the carrier), monitor on",
              "plain_nomonitor": "plain clock_nanosleep, monitor threshold out of reach"}
    for case in ("weft", "plain", "plain_nomonitor"):
        name = "BM_Pinned_%s/real_time" % case
        if g.has(name):
            out.append("  %d jobs of 100 ms on %d carriers, %-54s %9s = x%.2f one sleep; carriers at the end: %d" % (
                g.counter(name, "jobs") or 0, g.counter(name, "carriers") or 0, labels[case] + ":",
                fmt_ns(g.ns(name)), g.counter(name, "x_sleep") or 0, g.counter(name, "carriers_running") or 0))
    name = "BM_Pinned_plain_256/iterations:2/real_time"
    if g.has(name):
        out.append("  256 jobs of 200 ms on %d carriers, plain clock_nanosleep, monitor on (25.6 s without): %s; "
                   "carriers at the end: %d" % (g.counter(name, "carriers") or 0, fmt_ns(g.ns(name)),
                                                g.counter(name, "carriers_running") or 0))
    out.append("")
    return []


IO_CASES = (("BM_EchoFibers/carriers:1/manual_time", "two fibers, one carrier (weft_read/write)"),
            ("BM_EchoFibers/carriers:2/manual_time", "two fibers, two carriers (weft_read/write)"),
            ("BM_EchoThreads/manual_time", "two pthreads, blocking read/write"),
            ("BM_EchoWeftOnThreads/manual_time", "two pthreads, weft_read/write"),
            ("BM_EchoManyFibers/pairs:100/manual_time", "100 pairs, a fiber per side (all together)"),
            ("BM_EchoManyThreads/pairs:100/manual_time", "100 pairs, a pthread per side (all together)"))


def summary_io(g, results, out):
    """Echo I/O (bm_io): ns per 64-byte round trip over a socketpair, fibers against threads."""
    found = [name for name, _ in IO_CASES if g.has(name)]
    if not found:
        if os.path.exists(os.path.join(results, "bm_io.json")):
            out.append("Echo I/O (bm_io): no per-repetition results in bm_io.json (written with "
                       "--benchmark_report_aggregates_only?)")
            out.append("")
        return []
    out.append("Echo I/O (bm_io), ns per 64-byte round trip over a socketpair (median of %d repetitions)" %
               g.reps(found[0]))
    rt = {}
    for name, label in IO_CASES:
        rt[name] = g.counter(name, "ns_per_rt")
        if rt[name] is None:
            rt[name] = g.ns(name)
        out.append("  %-46s %12s" % (label, fmt_ns(rt[name])))
    r1 = ratio(rt[IO_CASES[2][0]], rt[IO_CASES[0][0]])
    r2 = ratio(rt[IO_CASES[5][0]], rt[IO_CASES[4][0]])
    out.append("  threads / fibers, one pair (one carrier): %s; 100 pairs: %s (above 1: fibers faster)" %
               (fmt_x(r1), fmt_x(r2)))
    out.append("")
    return []


def summary_weft_bench(results, out):
    emb = read_jsonl(os.path.join(results, "weft-bench-embroidery.jsonl"))
    if emb:
        out.append("weft-bench embroidery (jobs sleeping 1000 ms), median ms [threads]")
        for r in emb:
            extra = ""
            if r.get("extrapolated_ms_at_1000") is not None:
                extra = "  (slept %s ms; extrapolated to 1000 ms: ~%.0f s, an estimate)" % (
                    r.get("sleep_ms"), r["extrapolated_ms_at_1000"] / 1000)
            out.append("  %-14s jobs %5s: %10.1f ms  [%s threads]%s" % (r.get("backend"), r.get("jobs"),
                                                                        r.get("elapsed_ms") or -1, r.get("os_threads"), extra))
        out.append("")
    gp = read_jsonl(os.path.join(results, "weft-bench-gpars.jsonl"))
    if gp:
        out.append("weft-bench gpars (calls of a map over N elements), median")
        for r in gp:
            out.append("  %-6s %-22s %5s calls x %4s items: %10.1f ms  %12.0f calls/s  %10s/call  %sx sequential" % (
                r.get("case"), r.get("label"), r.get("loops"), r.get("items"), r.get("elapsed_ms") or -1,
                r.get("per_s") or 0, fmt_ns(r.get("ns_per_call")), r.get("speedup")))
        out.append("")
    sl = read_sleep(results)
    if sl:
        table, cols = {}, []
        for r in sl:
            key = (series_of(r), r.get("sleep_ms"))
            table.setdefault(r.get("jobs"), {})[key] = r
            if key not in cols:
                cols.append(key)
        order = {"fibers": 0, "threads": 1, "go": 2, "fallback": 3}
        cols.sort(key=lambda k: (order.get(k[0], 4), -(k[1] or 0)))
        names = {"fibers": "fibers", "threads": "thread/job", "go": "Go", "fallback": "fallback"}
        out.append("weft-bench sleep: N jobs that each sleep, median ms [OS threads]")
        out.append("  %8s" % "jobs" + "".join("%22s" % ("%s %s ms" % (names.get(c[0], c[0]), c[1])) for c in cols))
        for jobs in sorted(table):
            cells = []
            for c in cols:
                r = table[jobs].get(c)
                cells.append("-" if r is None else ("failed" if r.get("status") != "ok" else "%.1f [%s]" % (
                    r.get("elapsed_ms"), r.get("os_threads"))))
            out.append("  %8s" % jobs + "".join("%22s" % x for x in cells))
        out.append("")
    sw = read_sweep(results)
    if sw:
        table = {}
        for r in sw:
            table.setdefault(r.get("jobs"), {})[series_of(r)] = r
        out.append("weft-bench sleep, scaling sweep (1 s sleeps): median ms [peak RSS MiB] {most jobs in flight}")
        out.append("  %8s %30s %30s %34s" % ("jobs", "weft fibers", "Go goroutines", "fallback (WEFT_FIBERS=0)"))
        for jobs in sorted(table):
            cells = []
            for s in ("fibers", "go", "fallback"):
                r = table[jobs].get(s)
                if r is None:
                    cells.append("-")
                elif r.get("status") != "ok":
                    cells.append("failed")
                else:
                    ms = r.get("elapsed_ms") or 0
                    est = ""
                    if r.get("sleep_ms") and r["sleep_ms"] != 1000:
                        # Rounds of sleeps: the time scales with the sleep (an estimate, labelled).
                        est = " ~%.0f s est. from %s ms" % (ms * 1000.0 / r["sleep_ms"] / 1000.0, r["sleep_ms"])
                    cells.append("%.0f%s [%.0f] {%s}" % (ms, est, (r.get("peak_rss_kb") or 0) / 1024.0,
                                                         r.get("in_flight_peak", "-")))
            out.append("  %8s %30s %30s %34s" % ((jobs,) + tuple(cells)))
        out.append("")
    gr = [r for r in read_jsonl(os.path.join(results, "weft-bench-grain.jsonl")) if r.get("status") == "ok"]
    if gr:
        out.append("weft-bench grain: minimum effective task granularity, METG(50%%) (Task Bench), %s workers" %
                   gr[0].get("workers"))
        seen = []
        for r in gr:
            if r.get("backend") in seen:
                continue
            seen.append(r.get("backend"))
            bound = {"at_most": "at most ", "not_reached": "not reached (above the largest task size)"}.get(
                r.get("metg_bound"), "")
            out.append("  %-14s %s%s" % (r.get("backend"), bound,
                                          "" if r.get("metg_ns") is None else fmt_ns(r.get("metg_ns"))))
        out.append("")
    sp = read_jsonl(os.path.join(results, "weft-bench-spawn.jsonl"))
    if sp:
        out.append("weft-bench spawn: start an empty task and wait for it, ns per task (median [min]), weft / Go")
        for r in sp:
            if r.get("status") != "ok":
                out.append("  %-22s failed: %s" % (r.get("case"), r.get("error")))
                continue
            vs = ""
            if r.get("vs_go") is not None:
                vs = "  %.2fx %s" % (r["vs_go"], r.get("vs_go_case"))
            out.append("  %-22s %-5s %10.1f [%.1f]%s" % (r.get("case"), r.get("backend"), r.get("ns_per_op") or 0,
                                                         r.get("ns_per_op_min") or 0, vs))
        out.append("")


def cmd_summary(results):
    g = GBench(results)
    out, targets = [], []
    meta_path = os.path.join(results, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            m = json.load(f)
        out.append("Machine: %s, %s cores, %s; weft %s (%s), OpenMP %s; load average before %s, after %s" % (
            m.get("cpu_model"), m.get("cores"), m.get("kernel"), m.get("weft_version"), m.get("git_commit"),
            m.get("openmp_runtime"), m.get("loadavg_before"), m.get("loadavg_after")))
        out.append("")
    targets += summary_pmap(g, out)
    targets += summary_small_maps(g, out)
    targets += summary_future(g, out)
    targets += summary_sleep(g, out)
    targets += summary_io(g, results, out)
    summary_weft_bench(results, out)
    if targets:
        out.append("Targets (ratios within this run: of the medians, the headline; and of the best repetitions)")
        out.append("  %-66s %8s  %-7s %s" % ("", "median", "", "best"))
        for label, v, verd, best in targets:
            out.append("  %-66s %8s  %-7s %s" % (label, fmt_x(v), verd, fmt_x(best)))
    print("\n".join(out))


# --- plot data ---------------------------------------------------------------------------
#
# Every point of every plot is a median of interleaved repetitions, drawn with
# its spread (the fastest and slowest repetition). A point whose repetitions
# are too far apart to trust is flagged in its data file (a column "wide", 1
# or 0) and listed in OUT/warnings.tsv, which plots.sh prints on stderr and
# circles on the plot. "Too far apart": the spread (max - min) / median of
# the repetitions is above SPREAD_MAX (PLOT_SPREAD_MAX, default 0.5); for a
# ratio to a baseline of the same run (a speed-up over the sequential loop),
# the larger of the two spreads.

SPREAD_MAX = float(os.environ.get("PLOT_SPREAD_MAX", "0.5"))


def spread_of(values):
    """(max - min) / median of the numbers among values; None without a positive median."""
    v = [x for x in values if isinstance(x, (int, float))]
    if not v:
        return None
    m = statistics.median(v)
    return (max(v) - min(v)) / m if m > 0 else None


class Warnings:
    """The points too widely spread to trust, per plot: OUT/warnings.tsv (plot, point, spread)."""

    def __init__(self):
        self.rows = []

    def flag(self, plot, point, spread):
        """1 (and a warning) when spread is over SPREAD_MAX, else 0."""
        if spread is None or spread <= SPREAD_MAX:
            return 0
        self.rows.append((plot, point, spread))
        return 1

    def write(self, outdir):
        with open(os.path.join(outdir, "warnings.tsv"), "w") as f:
            f.write("# plot\tpoint\tspread (max-min)/median; threshold %g\n" % SPREAD_MAX)
            for plot, point, sp in self.rows:
                f.write("%s\t%s\t%.3g\n" % (plot, point, sp))


def series_of(r):
    if r.get("backend") == "threads":
        return "threads"
    if r.get("backend") == "weft":
        return "fibers" if r.get("fibers") else "fallback"
    return r.get("backend")


def write(path, header, rows):
    with open(path, "w") as f:
        f.write("# " + header + "\n")
        for row in rows:
            f.write(" ".join(str(x) for x in row) + "\n")


def samples(r, key):
    """A record's samples of a figure (KEY_samples, or samples_ms for elapsed_ms), else the figure alone."""
    v = r.get("samples_ms" if key == "elapsed_ms" else key + "_samples")
    if isinstance(v, list) and v:
        return v
    return [r.get(key)]


SERIES_NAMES = {"fibers": "weft fibers", "threads": "a thread per job", "go": "Go goroutines", "fallback": "fallback"}


def plot_sleep(results, outdir, warn, made):
    """sleep-elapsed.png and sleep-threads.png: one file per series and sleep, sleep-<series>-<ms>.dat."""
    sl = [r for r in read_sleep(results) if r.get("status") == "ok"]
    keys = []
    for r in sl:
        k = (series_of(r), r.get("sleep_ms"))
        if k not in keys:
            keys.append(k)
    for s, ms in keys:
        rows = []
        for r in sorted((r for r in sl if (series_of(r), r.get("sleep_ms")) == (s, ms)), key=lambda r: r["jobs"]):
            point = "%s (%s ms sleeps), %s jobs" % (SERIES_NAMES.get(s, s), ms, r["jobs"])
            we = warn.flag("sleep-elapsed.png", point, spread_of(samples(r, "elapsed_ms")))
            wt = warn.flag("sleep-threads.png", point, spread_of(samples(r, "os_threads")))
            rows.append((r["jobs"], r["elapsed_ms"], r.get("elapsed_ms_min", r["elapsed_ms"]),
                         r.get("elapsed_ms_max", r["elapsed_ms"]), r.get("os_threads", 0), r.get("sleep_ms"), we, wt))
        name = "sleep-%s-%s.dat" % (s, ms)
        write(os.path.join(outdir, name), "jobs median_ms min_ms max_ms os_threads sleep_ms wide_ms wide_threads", rows)
        made.append(name)
    if sl:
        write(os.path.join(outdir, "sleep-meta.dat"), "cores", [(sl[0].get("cores") or 1,)])


def plot_sweep(results, outdir, warn, made):
    """sleep-sweep.png: elapsed (scaled to 1 s sleeps) and peak RSS against jobs, sweep-<series>-<ms>.dat."""
    sw = [r for r in read_sweep(results) if r.get("status") == "ok"]
    keys = []
    for r in sw:
        k = (series_of(r), r.get("sleep_ms"))
        if k not in keys:
            keys.append(k)
    mib = lambda v: "%.6g" % (v / 1024.0) if isinstance(v, (int, float)) else "NaN"
    for s, ms in keys:
        rows = []
        for r in sorted((r for r in sw if (series_of(r), r.get("sleep_ms")) == (s, ms)), key=lambda r: r["jobs"]):
            # Rounds of sleeps: a 10 ms fallback run scaled by 100 estimates the 1 s one.
            scale = 1000.0 / ms / 1000.0 if ms else 0.0
            lo, hi = r.get("elapsed_ms_min", r["elapsed_ms"]), r.get("elapsed_ms_max", r["elapsed_ms"])
            rlo, rhi = spread(r, "peak_rss_kb")
            point = "%s (%s ms sleeps), %s jobs" % (SERIES_NAMES.get(s, s), ms, r["jobs"])
            wt = warn.flag("sleep-sweep.png", point + ", wall time", spread_of(samples(r, "elapsed_ms")))
            wr = warn.flag("sleep-sweep.png", point + ", peak RSS", spread_of(samples(r, "peak_rss_kb")))
            rows.append((r["jobs"], "%.6g" % (r["elapsed_ms"] * scale), "%.6g" % (lo * scale), "%.6g" % (hi * scale),
                         mib(r.get("peak_rss_kb")), mib(rlo), mib(rhi), ms, r.get("in_flight_peak", "NaN"), wt, wr))
        name = "sweep-%s-%s.dat" % (s, ms)
        write(os.path.join(outdir, name), "jobs elapsed_s_at_1s(median) min max peak_rss_mib(median) min max "
              "sleep_ms in_flight_peak wide_time wide_rss", rows)
        made.append(name)
    if sw:
        write(os.path.join(outdir, "sweep-meta.dat"), "cores", [(sw[0].get("cores") or 1,)])


def gbench_spread(g, name, key=None):
    """The spread of one Google Benchmark case over its repetitions (real time, or a counter)."""
    rs = g.runs.get(name, [])
    return spread_of([r.get(key) if key else r["real_time"] for r in rs])


def plot_pmap(g, outdir, warn, made):
    """pmap-speedup.png (pmap-n-<impl>.dat) and pmap-grain.png (pmap-grain-<n>.dat)."""
    if not g.has(pmap_name("Seq", 100)):
        return
    seq = {n: g.counter(pmap_name("Seq", n), "items_per_second") for n in PMAP_SIZES}
    seq_sp = {n: gbench_spread(g, pmap_name("Seq", n), "items_per_second") for n in PMAP_SIZES}
    wider = lambda a, b: None if a is None and b is None else max(x for x in (a, b) if x is not None)
    labels = dict(PMAP_IMPLS)
    for impl, _ in PMAP_IMPLS:
        rows = []
        for n in PMAP_SIZES:
            v = g.counter(pmap_name(impl, n), "items_per_second")
            if v and seq[n]:
                # The spread: the slowest and fastest repetition, over the same median sequential.
                lo = g.counter(pmap_name(impl, n), "items_per_second", min)
                hi = g.counter(pmap_name(impl, n), "items_per_second", max)
                sp = gbench_spread(g, pmap_name(impl, n), "items_per_second")
                # The sequential loop is the baseline, not a drawn point: its spread counts in every ratio.
                w = 0 if impl == "Seq" else warn.flag("pmap-speedup.png", "%s at n = %d" % (labels[impl], n),
                                                      wider(sp, seq_sp[n]))
                rows.append((n, v / seq[n], lo / seq[n], hi / seq[n], w))
        if rows:
            write(os.path.join(outdir, "pmap-n-%s.dat" % impl),
                  "n speedup_over_seq(median) slowest_repetition fastest_repetition wide", rows)
            made.append("pmap-n-%s.dat" % impl)
    for n in PMAP_SIZES:
        prefix = "BM_WeftPmapGrain/n:%d/grain:" % n
        rows = []
        for name in g.names():
            if not name.startswith(prefix):
                continue
            v = g.counter(name, "items_per_second")
            if v and seq[n]:
                grain = int(name[len(prefix):].split("/")[0])
                lo, hi = g.counter(name, "items_per_second", min), g.counter(name, "items_per_second", max)
                w = warn.flag("pmap-grain.png", "grain %d at n = %d" % (grain, n),
                              wider(gbench_spread(g, name, "items_per_second"), seq_sp[n]))
                rows.append((grain, v / seq[n], lo / seq[n], hi / seq[n], w))
        if rows:
            auto = g.counter(pmap_name("WeftPmap", n), "items_per_second")
            omp = g.counter(pmap_name("OmpFor", n), "items_per_second")
            rows.sort()
            # Columns 3 and 4 repeat the auto grain's and omp's speed-up on every row: flat lines.
            rows = [(gr, s, (auto or 0) / seq[n], (omp or 0) / seq[n], lo, hi, w) for gr, s, lo, hi, w in rows]
            write(os.path.join(outdir, "pmap-grain-%d.dat" % n),
                  "grain speedup auto_speedup omp_speedup slowest fastest wide", rows)
            made.append("pmap-grain-%d.dat" % n)


def plot_gpars(results, outdir, warn, made):
    """gpars.png: time per call of each backend and case, as clustered bars with their spread."""
    gp = [r for r in read_jsonl(os.path.join(results, "weft-bench-gpars.jsonl")) if r.get("status") == "ok"]
    if not gp:
        return
    cases, labels = [], []
    for r in gp:
        if r.get("case") not in cases:
            cases.append(r.get("case"))
        if r.get("label") not in labels:
            labels.append(r.get("label"))
    rows, wide = [], []
    for i, lab in enumerate(labels):
        row = ['"%s"' % lab]
        for j, c in enumerate(cases):
            r = next((r for r in gp if r.get("label") == lab and r.get("case") == c), None)
            if not r or not r.get("ns_per_call"):
                row += ["NaN", "NaN", "NaN"]
                continue
            per = lambda ms: "%.6g" % (ms * 1000.0 / r["loops"])  # microseconds per call
            row += ["%.6g" % (r["ns_per_call"] / 1000.0), per(r.get("elapsed_ms_min", r["elapsed_ms"])),
                    per(r.get("elapsed_ms_max", r["elapsed_ms"]))]
            if warn.flag("gpars.png", "%s, %s" % (c, lab), spread_of(samples(r, "elapsed_ms"))):
                wide.append((i, j, per(r.get("elapsed_ms_max", r["elapsed_ms"]))))
        rows.append(row)
    header = "backend " + " ".join("%s_us_per_call(%s_items) min max" % (c, next(
        (r.get("items") for r in gp if r.get("case") == c), "?")) for c in cases)
    write(os.path.join(outdir, "gpars.dat"), header, rows)
    write(os.path.join(outdir, "gpars-cases.dat"), "case items loops",
          [(c, next((r.get("items") for r in gp if r.get("case") == c), "?"),
            next((r.get("loops") for r in gp if r.get("case") == c), "?")) for c in cases])
    write(os.path.join(outdir, "gpars-wide.dat"), "row case_index max_us (the bars too widely spread)", wide)
    made.append("gpars.dat")


def plot_future(g, outdir, warn, made):
    """future.png: ns per start+get, as bars with the fastest and slowest repetition."""
    if not g.has("BM_PthreadCreateJoin/real_time"):
        return
    rows = []
    for name, label in FUTURE_CASES:
        key = "ns_per_future" if "Batch" in name else None
        v = g.counter(name, key) if key else g.ns(name)
        if not v:
            continue
        lo = g.counter(name, key, min) if key else g.ns(name, min)
        hi = g.counter(name, key, max) if key else g.ns(name, max)
        w = warn.flag("future.png", label, gbench_spread(g, name, key))
        rows.append(('"%s"' % label, "%.6g" % v, '"%s"' % fmt_ns(v), "%.6g" % lo, "%.6g" % hi, w))
    write(os.path.join(outdir, "future.dat"), "case ns label min_ns max_ns wide", rows)
    made.append("future.dat")


def plot_grain(results, outdir, warn, made):
    """grain.png: efficiency against task granularity per backend (grain-<backend>.dat), and each METG."""
    gr = [r for r in read_jsonl(os.path.join(results, "weft-bench-grain.jsonl")) if r.get("status") == "ok"]
    if not gr:
        return
    backends = []
    for r in gr:
        if r.get("backend") not in backends:
            backends.append(r.get("backend"))
    metg = []
    for b in backends:
        rows = []
        for r in sorted((r for r in gr if r.get("backend") == b), key=lambda r: r["task_ns"]):
            w = warn.flag("grain.png", "%s, %s ns tasks" % (b, r["task_ns"]), spread_of(samples(r, "efficiency")))
            rows.append((r["granularity_ns"], r["efficiency"], r.get("efficiency_min", r["efficiency"]),
                         r.get("efficiency_max", r["efficiency"]), r["task_ns"], w))
        write(os.path.join(outdir, "grain-%s.dat" % b),
              "granularity_ns efficiency(median) min max task_ns wide", rows)
        made.append("grain-%s.dat" % b)
        last = [r for r in gr if r.get("backend") == b][-1]
        metg.append((b, last.get("metg_ns") if last.get("metg_ns") is not None else "NaN",
                     last.get("metg_bound") or "none"))
    write(os.path.join(outdir, "grain-metg.dat"), "backend metg_ns bound", metg)
    write(os.path.join(outdir, "grain-meta.dat"), "workers iter_ns", [(gr[0].get("workers"), gr[0].get("iter_ns"))])


def cmd_plots(results, outdir):
    os.makedirs(outdir, exist_ok=True)
    made, warn = [], Warnings()
    g = GBench(results)
    plot_sleep(results, outdir, warn, made)
    plot_sweep(results, outdir, warn, made)
    plot_pmap(g, outdir, warn, made)
    plot_gpars(results, outdir, warn, made)
    plot_future(g, outdir, warn, made)
    plot_grain(results, outdir, warn, made)
    warn.write(outdir)
    print(" ".join(made))


def main(argv):
    if len(argv) < 2:
        die("usage: bench_data.py meta BUILD [PROFILE] | meta-finish FILE | summary RESULTS | plots RESULTS OUT")
    cmd = argv[1]
    if cmd == "meta" and len(argv) in (3, 4):
        cmd_meta(*argv[2:])
    elif cmd == "meta-finish" and len(argv) == 3:
        cmd_meta_finish(argv[2])
    elif cmd == "summary" and len(argv) == 3:
        cmd_summary(argv[2])
    elif cmd == "plots" and len(argv) == 4:
        cmd_plots(argv[2], argv[3])
    else:
        die("usage: bench_data.py meta BUILD [PROFILE] | meta-finish FILE | summary RESULTS | plots RESULTS OUT")


if __name__ == "__main__":
    main(sys.argv)
