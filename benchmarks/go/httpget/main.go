// Command weft-go-httpget is the Go baseline of `weft-bench http`: R GETs of
// one URL with net/http's client, at most C in flight: C goroutines, each
// taking the next request from a shared counter as it finishes one (what
// weft's weft_pmap with max_parallel = C does with its fibers). It is what a
// Go programmer writes for the measurement, and what `weft-bench http
// --backend go` runs, once per repetition, against weft-bench's own
// loopback server (or --url's), and reads back.
//
//	weft-go-httpget -url URL [-requests R] [-concurrency C] [-timeout-ms T]
//	                [-keepalive] [-warmup W] [-expect-bytes N]
//
// One http.Transport: no proxy, no compression asked for (weft-bench's
// client sends no Accept-Encoding), HTTP/1.1 only, MaxIdleConnsPerHost = C
// and MaxConnsPerHost 0 (no bound), so that with -keepalive every goroutine
// keeps its connection; without it, DisableKeepAlives (each request says
// "Connection: close", as weft-bench's client does by default). Its dials
// retry with backoff as weft-bench's do (internal/netx). http.Client.Timeout
// is T: one request, connect and body included. A request reads its body to
// the end and closes it; a status other than 200, a transport error, or
// (with -expect-bytes) a body of another length is one error, counted,
// never fatal.
//
// First an untimed warm-up of W requests (default max(100, C), at most R,
// as weft-bench's), so that the runtime, the transport's pool and the
// server are warm; then the measured R: the wall time from just before the
// first goroutine starts to the return of their wg.Wait, the process's CPU
// time over that (getrusage), latencies from the start of client.Get to the
// body's close.
//
// It prints one JSON object on one line, with weft-bench's key names:
// elapsed_ms, requests_ok, errors, error (the first one), connect_retries,
// connections_opened (dials that succeeded: with -keepalive about C),
// latency_ms_p50/p90/p99/max (nearest rank; null when none succeeded),
// cpu_user_s, cpu_sys_s, peak_rss_kb, warmup_requests, warmup_errors,
// go_version, gomaxprocs. Exit code 0 when every request succeeded, 1 when
// one failed (the record has the figures and status "failed"), 2 for usage.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"weftbench/internal/netx"
	"weftbench/internal/proc"
)

const prog = "weft-go-httpget"

type record struct {
	Bench             string   `json:"bench"`
	Backend           string   `json:"backend"`
	Status            string   `json:"status"`
	Error             *string  `json:"error"`
	URL               string   `json:"url"`
	Requests          int64    `json:"requests"`
	Concurrency       int64    `json:"concurrency"`
	Keepalive         bool     `json:"keepalive"`
	TimeoutMs         int64    `json:"timeout_ms"`
	ElapsedMs         float64  `json:"elapsed_ms"`
	RequestsOK        int64    `json:"requests_ok"`
	Errors            int64    `json:"errors"`
	ConnectRetries    int64    `json:"connect_retries"`
	ConnectionsOpened int64    `json:"connections_opened"`
	LatencyP50        *float64 `json:"latency_ms_p50"`
	LatencyP90        *float64 `json:"latency_ms_p90"`
	LatencyP99        *float64 `json:"latency_ms_p99"`
	LatencyMax        *float64 `json:"latency_ms_max"`
	CPUUserS          float64  `json:"cpu_user_s"`
	CPUSysS           float64  `json:"cpu_sys_s"`
	PeakRSSKb         *int64   `json:"peak_rss_kb"`
	WarmupRequests    int64    `json:"warmup_requests"`
	WarmupErrors      int64    `json:"warmup_errors"`
	FDLimit           uint64   `json:"fd_limit"`
	GoVersion         string   `json:"go_version"`
	GoMaxProcs        int      `json:"gomaxprocs"`
}

// getter is the client all requests share.
type getter struct {
	url         string
	client      *http.Client
	dialer      *netx.Dialer
	expectBytes int64 // -1: any length
}

// get makes one request: an error's text ("stage: what"), or "" on success.
func (g *getter) get() (stage, text string) {
	resp, err := g.client.Get(g.url)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return "request", netx.ErrText(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return "recv", netx.ErrText(err)
	}
	if resp.StatusCode != 200 {
		return "response", fmt.Sprintf("HTTP status %d", resp.StatusCode)
	}
	if g.expectBytes >= 0 && n != g.expectBytes {
		return "response", fmt.Sprintf("body of %d bytes, expected %d", n, g.expectBytes)
	}
	return "", ""
}

// result is what one set of R requests gives.
type result struct {
	elapsed time.Duration
	usage   proc.Usage
	ok      int64
	errors  netx.Errors
	lat     netx.Latency
}

// run makes n requests with at most c in flight.
func (g *getter) run(n, c int64) *result {
	res := &result{}
	lat := make([]float32, n)
	nan := float32(math.NaN())
	var next int64 = -1 // atomic: the last request claimed
	var wg sync.WaitGroup
	if c > n {
		c = n
	}
	wg.Add(int(c))
	before := proc.Now()
	t0 := time.Now()
	for w := int64(0); w < c; w++ {
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1)
				if i >= n {
					return
				}
				start := time.Now()
				if stage, text := g.get(); stage != "" {
					lat[i] = nan
					res.errors.Add(stage, text)
					continue
				}
				lat[i] = float32(float64(time.Since(start)) / 1e3)
				atomic.AddInt64(&res.ok, 1)
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.usage = proc.Now().Since(before)
	res.lat = netx.Summarize(lat)
	return res
}

func main() {
	target := flag.String("url", "", "http://host[:port][/path] to GET")
	requests := flag.Int64("requests", 10000, "GETs of the measured run")
	concurrency := flag.Int64("concurrency", 1000, "most requests in flight")
	timeoutMs := flag.Int64("timeout-ms", 10000, "limit of one request, connect included")
	keepalive := flag.Bool("keepalive", false, "reuse connections (default: a connection per request)")
	warmup := flag.Int64("warmup", -1, "requests of the untimed warm-up (default max(100, C), at most R; 0: none)")
	expect := flag.Int64("expect-bytes", -1, "the body length every response must have (-1: any)")
	flag.Parse()
	if flag.NArg() > 0 {
		proc.Fail(prog, 2, "unexpected argument '"+flag.Arg(0)+"'")
	}
	if *requests < 1 || *concurrency < 1 || *timeoutMs < 1 {
		proc.Fail(prog, 2, "-requests, -concurrency and -timeout-ms must be at least 1")
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		proc.Fail(prog, 2, "-url must be http://host[:port][/path]")
	}
	if *warmup < 0 {
		*warmup = *concurrency
		if *warmup < 100 {
			*warmup = 100
		}
		if *warmup > *requests {
			*warmup = *requests
		}
	}
	limit := netx.RaiseNoFile()
	timeout := time.Duration(*timeoutMs) * time.Millisecond

	dialer := &netx.Dialer{Timeout: timeout}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		DisableKeepAlives:   !*keepalive,
		DisableCompression:  true,
		MaxIdleConns:        int(*concurrency),
		MaxIdleConnsPerHost: int(*concurrency),
		MaxConnsPerHost:     0,
		ForceAttemptHTTP2:   false,
	}
	g := &getter{url: *target, client: &http.Client{Transport: tr, Timeout: timeout}, dialer: dialer,
		expectBytes: *expect}

	var warmupErrors int64
	if *warmup > 0 {
		warmupErrors = g.run(*warmup, *concurrency).errors.Count()
	}
	retries0 := atomic.LoadInt64(&dialer.Retries)
	dials0 := atomic.LoadInt64(&dialer.Dials)
	res := g.run(*requests, *concurrency)
	tr.CloseIdleConnections()

	rec := record{
		Bench: "http", Backend: "go", Status: "ok",
		URL: *target, Requests: *requests, Concurrency: *concurrency, Keepalive: *keepalive,
		TimeoutMs:         *timeoutMs,
		ElapsedMs:         proc.Round(float64(res.elapsed)/1e6, 1e6),
		RequestsOK:        atomic.LoadInt64(&res.ok),
		Errors:            res.errors.Count(),
		ConnectRetries:    atomic.LoadInt64(&dialer.Retries) - retries0,
		ConnectionsOpened: atomic.LoadInt64(&dialer.Dials) - dials0,
		LatencyP50:        res.lat.P50, LatencyP90: res.lat.P90, LatencyP99: res.lat.P99, LatencyMax: res.lat.Max,
		CPUUserS:       proc.Round(res.usage.UserS, 1e6),
		CPUSysS:        proc.Round(res.usage.SysS, 1e6),
		WarmupRequests: *warmup,
		WarmupErrors:   warmupErrors,
		FDLimit:        limit,
		GoVersion:      runtime.Version(),
		GoMaxProcs:     runtime.GOMAXPROCS(0),
	}
	if first := res.errors.First(); first != "" {
		rec.Status = "failed"
		rec.Error = &first
	}
	if kb := proc.PeakRSSKiB(); kb >= 0 {
		rec.PeakRSSKb = &kb
	}
	proc.PrintLine(rec)
	if rec.Status != "ok" {
		os.Exit(1) // the figures stand (weft-bench reads them); the exit code says that something failed
	}
}
