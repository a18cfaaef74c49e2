#!/usr/bin/env python3
"""Simulate weft_mpi_pmap's DYNAMIC claims, and its result gather, at scale.

docs/mpi.md ("At 1,000 nodes") rests on this model; this machine has two
cores, so nothing beyond 4 ranks can be measured here. The claim protocol is
the one in src/mpi/claims.c, step for step: a counter per home block on its
owner; the owner claims its own block first, then visits the others in turn
reading every other counter at once (MPI_NO_OP fetches, one flush) and taking
from the block with the most left, again until none has any; the automatic chunk starts at one index per
core, aims at TARGET of work, grows at most twofold, and never takes more than
half of what is left (nor less than one index per core). The
alternative it is compared with is the textbook MPI-3 shared counter: one
counter on rank 0 that every claim goes to.

The model (its constants are options):
  - a claim on the claimer's own counter costs `local_us`;
  - a claim (or read) on another rank's counter costs the network's `latency_us` there
    and back, plus its turn at the target, which serves atomics one at a time,
    `service_us` each (a NIC's atomic unit, or the owner's progress engine): a
    queue per target, so contention shows up as waiting;
  - each claim runs as one local weft_pmap: `start_us` to start and join it,
    then the chunk's work divided by min(chunk, the rank's `cores`);
  - work: n indices, uniform or with index i costing i*i units ("skew"), scaled
    so that the ideal time (all work spread evenly) is `ideal_s`.

The gather (analytic, LogGP-style): root ingress bound, n * elem bytes over
`bw_gbs`, plus per-message latency: linear (every rank to the root) or a
binomial tree (log2 P rounds); WEFT_MPI_ALL adds a pipelined broadcast.

Usage: sim_scale.py [--ranks 4,64,1000] [--n 10000000] [--json]
Prints one line per (ranks, work, scheme); --json prints JSON lines instead.
Standard library only.
"""
import argparse
import heapq
import json
import math


def block(n, p, r):
    q, rem = divmod(n, p)
    lo = q * r + min(r, rem)
    return lo, q + (1 if r < rem else 0)


class Work:
    """Prefix sums of the cost of indices, in seconds of one core."""

    def __init__(self, n, kind, total_core_s):
        self.n = n
        self.kind = kind
        if kind == "uniform":
            self.unit = total_core_s / n
        else:  # index i costs i*i units
            self.unit = total_core_s / self._sq(n)

    @staticmethod
    def _sq(k):  # sum of i*i for i < k
        return (k - 1) * k * (2 * k - 1) / 6 if k > 0 else 0.0

    def cost(self, lo, hi):
        if self.kind == "uniform":
            return (hi - lo) * self.unit
        return (self._sq(hi) - self._sq(lo)) * self.unit


def simulate(p, work, a, scheme):
    """Makespan and claim statistics of one run. scheme: 'home' (weft) or 'central'."""
    n = work.n
    target = a.target_ms / 1e3
    lat = a.latency_us / 1e6
    svc = a.service_us / 1e6
    loc = a.local_us / 1e6
    issue = a.issue_us / 1e6
    start = a.start_us / 1e6
    if scheme == "home":
        blocks = [block(n, p, r) for r in range(p)]
    else:
        blocks = [(0, n)]
    counters = [0] * len(blocks)
    busy_until = [0.0] * len(blocks)  # each target's atomic unit
    served = [0] * len(blocks)
    stats = {"local": 0, "remote": 0, "wait": 0.0, "scans": 0}

    def atomic(t, r, v):
        """Time at which rank r's atomic on counter v completes, issued at t."""
        if v == r:
            stats["local"] += 1
            return t + loc
        stats["remote"] += 1
        arrive = t + lat / 2
        begin = max(arrive, busy_until[v])
        stats["wait"] += begin - arrive
        busy_until[v] = begin + svc
        served[v] += 1
        return begin + svc + lat / 2

    # A rank's state: the block it takes from (or None: scan next), what it knows is taken of it,
    # its automatic chunk size, the blocks it has seen empty.
    state = [{"v": r if scheme == "home" else 0, "seen": 0, "c": float(a.cores), "empty": set()} for r in range(p)]
    finish = [0.0] * p
    events = [(0.0, r) for r in range(p)]
    heapq.heapify(events)
    while events:
        t, r = heapq.heappop(events)
        s = state[r]
        if s["v"] is None:
            if scheme != "home":
                finish[r] = t
                continue
            # Read every block not yet seen empty, all at once (one flush), and take the richest.
            stats["scans"] += 1
            done = t
            best, best_left = None, 0
            for k, v in enumerate(x for x in range(p) if x != r and x not in s["empty"]):
                done = max(done, atomic(t + k * issue, r, v))
                left = blocks[v][1] - min(counters[v], blocks[v][1])
                if left == 0:
                    s["empty"].add(v)
                elif left > best_left:
                    best, best_left = v, left
            if best is None:
                finish[r] = done
                continue
            s["v"], s["seen"] = best, blocks[best][1] - best_left
            heapq.heappush(events, (done, r))
            continue
        v = s["v"]
        lo, length = blocks[v]
        left = length - s["seen"]
        if left <= 0:
            s["v"] = None
            if v != r:
                s["empty"].add(v)
            heapq.heappush(events, (t, r))
            continue
        half = (left + 1) // 2
        c = min(max(a.cores, min(int(s["c"]), half)), left)
        t = atomic(t, r, v)
        old = counters[v]
        counters[v] += c
        if old >= length:
            s["seen"] = length
            heapq.heappush(events, (t, r))
            continue
        take = min(c, length - old)
        dt = start + work.cost(lo + old, lo + old + take) / min(take, a.cores)
        # Time-based sizing, as claims.c: aim at `target`, at most twofold growth.
        s["c"] = max(float(a.cores), min(2 * s["c"], target * take / dt))
        s["seen"] = old + take
        heapq.heappush(events, (t + dt, r))

    return {
        "makespan_s": max(finish),
        "claims_local": stats["local"],
        "claims_remote": stats["remote"],
        "scans": stats["scans"],
        "max_served_by_one_target": max(served) if served else 0,
        "mean_atomic_wait_us": 1e6 * stats["wait"] / stats["remote"] if stats["remote"] else 0.0,
    }


def static_makespan(p, work, a):
    t = 0.0
    for r in range(p):
        lo, length = block(work.n, p, r)
        t = max(t, a.start_us / 1e6 + work.cost(lo, lo + length) / a.cores)
    return t


def gather_cost(p, a, elem, n, all_ranks):
    """Seconds for the results to reach the root (or every rank)."""
    bytes_total = n * elem
    bw = a.bw_gbs * 1e9
    alpha = a.latency_us / 1e6
    linear = bytes_total / bw + (p - 1) * alpha * 0.1 + alpha  # the root posts p-1 receives; latencies overlap
    tree = bytes_total / bw + math.ceil(math.log2(max(p, 2))) * alpha
    out = {"gather_linear_s": linear, "gather_tree_s": tree}
    if all_ranks:
        out["bcast_pipelined_s"] = bytes_total / bw + math.ceil(math.log2(max(p, 2))) * alpha
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="4,64,1000")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--ideal-s", type=float, default=1.0, help="the ideal run time, all work spread evenly")
    ap.add_argument("--cores", type=int, default=32, help="cores per rank (one rank per node)")
    ap.add_argument("--target-ms", type=float, default=1.0)
    ap.add_argument("--latency-us", type=float, default=2.0, help="network round trip of an atomic")
    ap.add_argument("--service-us", type=float, default=0.25, help="one atomic's turn at its target")
    ap.add_argument("--local-us", type=float, default=0.1, help="an atomic on one's own counter")
    ap.add_argument("--issue-us", type=float, default=0.1, help="issuing one fetch of a batched scan")
    ap.add_argument("--start-us", type=float, default=5.0, help="a local weft_pmap's start and join")
    ap.add_argument("--bw-gbs", type=float, default=12.5, help="the root's link, GB/s (100 Gb/s)")
    ap.add_argument("--elem", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for p in [int(x) for x in a.ranks.split(",")]:
        for kind in ("uniform", "skew"):
            work = Work(a.n, kind, a.ideal_s * p * a.cores)
            st = static_makespan(p, work, a)
            rows = [("STATIC", {"makespan_s": st})]
            for scheme in ("home", "central"):
                rows.append(("DYNAMIC " + ("(counters per block)" if scheme == "home" else "(one counter on rank 0)"),
                             simulate(p, work, a, scheme)))
            g = gather_cost(p, a, a.elem, a.n, True)
            for name, r in rows:
                rec = {"ranks": p, "work": kind, "scheme": name, "ideal_s": a.ideal_s, **r, **g}
                if a.json:
                    print(json.dumps(rec))
                else:
                    extra = ""
                    if "claims_remote" in r:
                        extra = ("  atomics %d local / %d remote, at most %d on one target, %.2f us queued"
                                 % (r["claims_local"], r["claims_remote"], r["max_served_by_one_target"],
                                    r["mean_atomic_wait_us"]))
                    print("%5d ranks  %-7s  %-38s %7.3f s (ideal %.3f)%s" % (p, kind, name, r["makespan_s"],
                                                                           a.ideal_s, extra))
            if not a.json:
                print("%5d ranks  gather of %d x %d B: linear %.4f s, tree %.4f s; broadcast to all %.4f s"
                      % (p, a.n, a.elem, g["gather_linear_s"], g["gather_tree_s"], g["bcast_pipelined_s"]))


if __name__ == "__main__":
    main()
