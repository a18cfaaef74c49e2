// Package netx holds what the network baselines (weft-go-echo,
// weft-go-httpget) share with weft-bench's network commands
// (benchmarks/weft-bench/sock.c, latency.c): the descriptor limit raised to
// the hard limit, a connect that retries with backoff as wb_net_connect
// does, nearest-rank latency percentiles over the round trips that counted,
// and error texts without Go's "dial tcp 127.0.0.1:...:" prefixes, so that
// a record's first error reads like weft-bench's own.
//
// Only APIs of old Go releases (see internal/proc).
package netx

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// RaiseNoFile sets RLIMIT_NOFILE's soft limit to its hard limit and returns
// the soft limit in force afterwards (0 when it cannot be read). Go 1.19
// and later do this at start-up too; older ones do not.
func RaiseNoFile() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = want.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			rl.Cur = want.Cur
		}
	}
	return rl.Cur
}

// Somaxconn is net.core.somaxconn, the listen backlog Go asks for (and the
// kernel's cap on any backlog), or -1 when unreadable.
func Somaxconn() int {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return -1
	}
	var v int
	for _, c := range strings.TrimSpace(string(b)) {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

// AttemptTimeout bounds one connect attempt, as WB_CONNECT_ATTEMPT_NS does:
// a SYN dropped by a full accept queue is resent after 1 s.
const AttemptTimeout = 3 * time.Second

// Dialer connects as wb_net_connect does: an attempt that times out (or
// finds no free local port or buffer) is retried on a fresh socket after a
// backoff of 10 ms, doubling, at most 1 s, until the overall limit has
// passed; anything else (a refused connection) fails at once. Retries
// counts the retries of every Dial, and Dials the connections made.
type Dialer struct {
	Timeout time.Duration // the limit of the whole connect, retries included
	Retries int64         // atomic
	Dials   int64         // atomic: connections opened
}

// retryable is what a busy loopback server causes (see sock.c).
func retryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno == syscall.EAGAIN || errno == syscall.EADDRNOTAVAIL || errno == syscall.ENOBUFS ||
			errno == syscall.ETIMEDOUT
	}
	return false
}

// DialContext is Dial under a context (an http.Transport's DialContext).
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	deadline := time.Now().Add(d.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	backoff := 10 * time.Millisecond
	for {
		until := time.Now().Add(AttemptTimeout)
		if until.After(deadline) {
			until = deadline
		}
		nd := net.Dialer{Deadline: until}
		c, err := nd.DialContext(ctx, network, addr)
		if err == nil {
			atomic.AddInt64(&d.Dials, 1)
			return c, nil
		}
		if !retryable(err) || ctx.Err() != nil || !time.Now().Add(backoff).Before(deadline) {
			return nil, err
		}
		atomic.AddInt64(&d.Retries, 1)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// Dial is DialContext without a context.
func (d *Dialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// ErrText is err as weft-bench words it: the system's message for an errno
// ("connection refused"), "timed out" for a deadline, "end of stream"
// for EOF, else Go's text.
func ErrText(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// Errors counts failures from many goroutines and keeps the first one's text.
type Errors struct {
	count int64 // atomic
	taken int32 // atomic: the first text was claimed
	first atomic.Value
}

// Add counts one failure, "stage: text".
func (e *Errors) Add(stage, text string) {
	atomic.AddInt64(&e.count, 1)
	if atomic.CompareAndSwapInt32(&e.taken, 0, 1) {
		e.first.Store(stage + ": " + text)
	}
}

// Count is the failures so far.
func (e *Errors) Count() int64 { return atomic.LoadInt64(&e.count) }

// First is the first failure's text, or "".
func (e *Errors) First() string {
	if s, ok := e.first.Load().(string); ok {
		return s
	}
	return ""
}

// Latency is the summary weft-bench writes, in milliseconds; nil pointers
// (JSON null) when no sample counted.
type Latency struct {
	P50, P90, P99, Max *float64
	N                  int
}

// ms is microseconds as milliseconds, to the nanosecond.
func ms(us float32) float64 { return math.Round(float64(us)*1e3) / 1e6 }

// Summarize takes latencies in microseconds, NaN for an operation that
// failed, and returns nearest-rank percentiles of the others, as
// wb_latency_summary does. It sorts us (the NaNs moved out first).
func Summarize(us []float32) Latency {
	k := 0
	for _, v := range us {
		if !math.IsNaN(float64(v)) {
			us[k] = v
			k++
		}
	}
	v := us[:k]
	if k == 0 {
		return Latency{}
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	rank := func(p float64) *float64 {
		r := int(math.Ceil(p / 100 * float64(k)))
		if r < 1 {
			r = 1
		}
		x := ms(v[r-1])
		return &x
	}
	mx := ms(v[k-1])
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: &mx, N: k}
}
