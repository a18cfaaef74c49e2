// Command weft-go-spawn is the Go baseline of `weft-bench spawn`: what it
// costs to start an empty goroutine and wait for it, the figure weft's
// fiber futures are held against.
//
//	weft-go-spawn [-case single|batch|both] [-count N] [-batch K] [-reps R] [-warmup W]
//
//	single  one at a time: wg.Add(1); go func() { wg.Done() }(); wg.Wait()
//	batch   K at a time: wg.Add(K), K go statements, one wg.Wait()
//
// Each repetition starts N goroutines (rounded down to whole batches, at
// least one) and prints one JSON object on one line: elapsed_ms, ops (the
// goroutines started) and ns_per_op. The first W repetitions of each case
// are warm-ups, run and not printed: a fresh process has no free goroutines
// or stacks to reuse yet, and weft-bench discards its own first repetition
// for the same reason.
package main

import (
	"flag"
	"runtime"
	"sync"
	"time"

	"weftbench/internal/proc"
)

type record struct {
	Bench      string  `json:"bench"`
	Backend    string  `json:"backend"`
	Case       string  `json:"case"`
	Status     string  `json:"status"`
	Ops        int64   `json:"ops"`
	Batch      *int64  `json:"batch"` // null for one at a time
	Rep        int     `json:"rep"`
	ElapsedMs  float64 `json:"elapsed_ms"`
	NsPerOp    float64 `json:"ns_per_op"`
	GoVersion  string  `json:"go_version"`
	GoMaxProcs int     `json:"gomaxprocs"`
}

func single(n int64) time.Duration {
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := int64(0); i < n; i++ {
		wg.Add(1)
		go func() { wg.Done() }()
		wg.Wait()
	}
	return time.Since(t0)
}

func batch(batches, k int64) time.Duration {
	var wg sync.WaitGroup
	t0 := time.Now()
	for b := int64(0); b < batches; b++ {
		wg.Add(int(k))
		for j := int64(0); j < k; j++ {
			go func() { wg.Done() }()
		}
		wg.Wait()
	}
	return time.Since(t0)
}

func main() {
	which := flag.String("case", "both", "single, batch or both")
	count := flag.Int64("count", 1000000, "goroutines per repetition")
	k := flag.Int64("batch", 1000, "goroutines per wg.Wait in the batch case")
	reps := flag.Int("reps", 5, "repetitions printed")
	warmup := flag.Int("warmup", 1, "repetitions run first and not printed")
	flag.Parse()
	if flag.NArg() > 0 {
		proc.Fail("weft-go-spawn", 2, "unexpected argument '"+flag.Arg(0)+"'")
	}
	if *count < 1 || *k < 1 || *reps < 0 || *warmup < 0 {
		proc.Fail("weft-go-spawn", 2, "-count and -batch must be at least 1, -reps and -warmup not negative")
	}
	var cases []string
	switch *which {
	case "single", "batch":
		cases = []string{*which}
	case "both":
		cases = []string{"single", "batch"}
	default:
		proc.Fail("weft-go-spawn", 2, "-case: unknown case '"+*which+"' (single, batch, both)")
	}
	batches := *count / *k
	if batches < 1 {
		batches = 1
	}
	for r := 0; r < *warmup+*reps; r++ {
		// Cases alternate within a repetition, so that a slow moment of the machine spreads over both.
		for _, c := range cases {
			rec := record{Bench: "spawn", Backend: "go", Status: "ok", Rep: r - *warmup,
				GoVersion: runtime.Version(), GoMaxProcs: runtime.GOMAXPROCS(0)}
			var d time.Duration
			if c == "single" {
				rec.Case, rec.Ops = "go-single", *count
				d = single(*count)
			} else {
				rec.Case, rec.Ops, rec.Batch = "go-batch", batches**k, k
				d = batch(batches, *k)
			}
			if r < *warmup {
				continue
			}
			rec.ElapsedMs = proc.Round(float64(d)/1e6, 1e3)
			rec.NsPerOp = proc.Round(float64(d)/float64(rec.Ops), 1e3)
			proc.PrintLine(rec)
		}
	}
}
