// Command weft-go-sleep is the Go baseline of `weft-bench sleep`: N goroutines
// that each time.Sleep, joined by a sync.WaitGroup. It is what a Go
// programmer writes for the embroidery experiment, and what weft's fibers
// are measured against (`weft-bench sleep --backend go` runs it and reads
// its record).
//
//	weft-go-sleep -jobs N -sleep-ms MS [-sample-ms T]
//
// It prints one JSON object on one line, with weft-bench's names for the
// figures they share: elapsed_ms (from just before the first go statement
// to the return of wg.Wait), in_flight_peak (an atomic counter raised
// before each sleep and lowered after, its maximum kept), os_threads (the
// entries of /proc/self/task T ms into the run, counted by a goroutine, as
// weft-bench's sampler thread does), peak_rss_kb (VmHWM), and cpu_user_s,
// cpu_sys_s, minflt (getrusage over the run).
package main

import (
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"weftbench/internal/proc"
)

type record struct {
	Bench         string  `json:"bench"`
	Backend       string  `json:"backend"`
	Jobs          int64   `json:"jobs"`
	SleepMs       int64   `json:"sleep_ms"`
	Status        string  `json:"status"`
	ElapsedMs     float64 `json:"elapsed_ms"`
	InFlightPeak  int64   `json:"in_flight_peak"`
	OSThreads     *int    `json:"os_threads"` // null when /proc/self/task cannot be read
	OSThreadsAtMs float64 `json:"os_threads_at_ms"`
	PeakRSSKb     *int64  `json:"peak_rss_kb"`
	CPUUserS      float64 `json:"cpu_user_s"`
	CPUSysS       float64 `json:"cpu_sys_s"`
	MinFlt        int64   `json:"minflt"`
	GoVersion     string  `json:"go_version"`
	GoMaxProcs    int     `json:"gomaxprocs"`
}

// sample is the thread count and when it was taken, from the start of the run.
type sample struct {
	threads int
	at      time.Duration
}

func main() {
	jobs := flag.Int64("jobs", 1, "number of goroutines")
	sleepMs := flag.Int64("sleep-ms", 1000, "each goroutine's sleep in milliseconds")
	sampleMs := flag.Int64("sample-ms", -1, "when to count the OS threads (default: 250, or half the sleep when shorter)")
	flag.Parse()
	if flag.NArg() > 0 {
		proc.Fail("weft-go-sleep", 2, "unexpected argument '"+flag.Arg(0)+"'")
	}
	if *jobs < 1 || *sleepMs < 0 {
		proc.Fail("weft-go-sleep", 2, "-jobs must be at least 1 and -sleep-ms not negative")
	}
	if *sampleMs < 0 {
		// As weft-bench: 250 ms in, or halfway through one sleep, while the jobs still run.
		*sampleMs = 250
		if *sleepMs/2 < 250 {
			*sampleMs = *sleepMs / 2
		}
	}
	sleep := time.Duration(*sleepMs) * time.Millisecond

	var cur, peak int64 // jobs in flight now, and the most seen
	job := func(wg *sync.WaitGroup) {
		n := atomic.AddInt64(&cur, 1)
		for {
			p := atomic.LoadInt64(&peak)
			if n <= p || atomic.CompareAndSwapInt64(&peak, p, n) {
				break
			}
		}
		time.Sleep(sleep)
		atomic.AddInt64(&cur, -1)
		wg.Done()
	}

	before := proc.Now()
	t0 := time.Now()
	done := make(chan struct{})
	sampled := make(chan sample, 1)
	go func() {
		t := time.NewTimer(time.Duration(*sampleMs) * time.Millisecond)
		select {
		case <-t.C:
		case <-done: // the run ended first: count now, as weft-bench does
			t.Stop()
		}
		sampled <- sample{proc.Threads(), time.Since(t0)}
	}()
	var wg sync.WaitGroup
	wg.Add(int(*jobs))
	for i := int64(0); i < *jobs; i++ {
		go job(&wg)
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(done)
	s := <-sampled // joined before the results are read, like the sampler thread
	usage := proc.Now().Since(before)

	rec := record{
		Bench: "sleep", Backend: "go", Jobs: *jobs, SleepMs: *sleepMs, Status: "ok",
		ElapsedMs:     proc.Round(float64(elapsed)/1e6, 1e3),
		InFlightPeak:  atomic.LoadInt64(&peak),
		OSThreadsAtMs: proc.Round(float64(s.at)/1e6, 1e3),
		CPUUserS:      proc.Round(usage.UserS, 1e6),
		CPUSysS:       proc.Round(usage.SysS, 1e6),
		MinFlt:        usage.MinFlt,
		GoVersion:     runtime.Version(),
		GoMaxProcs:    runtime.GOMAXPROCS(0),
	}
	if s.threads >= 0 {
		rec.OSThreads = &s.threads
	}
	if kb := proc.PeakRSSKiB(); kb >= 0 {
		rec.PeakRSSKb = &kb
	}
	proc.PrintLine(rec)
}
