// Command weft-go-echo is the Go baseline of `weft-bench echo`: in one
// process, a loopback TCP server (a goroutine per accepted connection,
// sending back whatever arrives) and C client goroutines, each connecting
// and making M round trips of B bytes (write B bytes, read B bytes back,
// check them). It is what a Go programmer writes for the measurement, and
// what `weft-bench echo --backend go` runs, once per repetition, and reads
// back.
//
//	weft-go-echo -connections C -messages M -size B [-timeout-ms T]
//	             [-warmup-connections WC] [-warmup-messages WM]
//
// It follows cmd_echo.c exactly: message m of connection c has the bytes
// byte(j*7 + m*13 + c*31), and the echo must match them; a round trip is
// timed from just before its write to the end of its read, and both have
// the deadline T from its start; connects retry with backoff (internal/netx);
// each connection ends with the client closing first; a failed connection
// is counted once and stops, never fatal. Go sets TCP_NODELAY on both ends
// by default, as weft-bench does. The server's reads have a deadline of T
// each, as weft-bench's have.
//
// First an untimed warm-up, on a server of its own (WC connections of WM
// messages; by default min(C, 50) and min(M, 10), weft-bench's warm-up):
// weft-bench warms each of its backends up once per run in its own process,
// and this process is fresh for every repetition. Then, on a fresh server
// (fresh port: the clients' ports of the warm-up sit in TIME_WAIT), the
// measured run: the wall time from just before the first client goroutine
// starts to the return of their wg.Wait, the process's CPU time over that
// (getrusage: both sides and the Go runtime), then the server's stop.
//
// It prints one JSON object on one line, with weft-bench's key names:
// elapsed_ms, messages_ok, failed_connections, server_errors, error (the
// first failure, clients' before the server's), connect_retries,
// listen_backlog (net.core.somaxconn: what Go asks listen(2) for),
// latency_ms_p50/p90/p99/max (nearest rank; null when no round trip came
// back), latency_ms_p99_first and _rest (the p99 of each connection's first
// round trip, and of the others), cpu_user_s, cpu_sys_s, peak_rss_kb, warmup_errors, go_version,
// gomaxprocs. Exit code 0 when everything came back right, 1 when a
// connection failed (the record has the figures and status "failed"), 2
// for usage.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"weftbench/internal/netx"
	"weftbench/internal/proc"
)

const prog = "weft-go-echo"

type record struct {
	Bench             string   `json:"bench"`
	Backend           string   `json:"backend"`
	Status            string   `json:"status"`
	Error             *string  `json:"error"` // the first failure; null when none
	Connections       int64    `json:"connections"`
	Messages          int64    `json:"messages"`
	Size              int64    `json:"size"`
	TimeoutMs         int64    `json:"timeout_ms"`
	ElapsedMs         float64  `json:"elapsed_ms"`
	MessagesOK        int64    `json:"messages_ok"`
	FailedConnections int64    `json:"failed_connections"`
	ServerErrors      int64    `json:"server_errors"`
	ConnectRetries    int64    `json:"connect_retries"`
	ListenBacklog     int      `json:"listen_backlog"`
	Listeners         int      `json:"listeners"`
	LatencyP50        *float64 `json:"latency_ms_p50"`
	LatencyP90        *float64 `json:"latency_ms_p90"`
	LatencyP99        *float64 `json:"latency_ms_p99"`
	LatencyMax        *float64 `json:"latency_ms_max"`
	LatencyP99First   *float64 `json:"latency_ms_p99_first"` // each connection's first round trip only
	LatencyP99Rest    *float64 `json:"latency_ms_p99_rest"`  // every round trip but the first
	CPUUserS          float64  `json:"cpu_user_s"`
	CPUSysS           float64  `json:"cpu_sys_s"`
	PeakRSSKb         *int64   `json:"peak_rss_kb"`
	WarmupConnections int64    `json:"warmup_connections"`
	WarmupMessages    int64    `json:"warmup_messages"`
	WarmupErrors      int64    `json:"warmup_errors"`
	FDLimit           uint64   `json:"fd_limit"`
	GoVersion         string   `json:"go_version"`
	GoMaxProcs        int      `json:"gomaxprocs"`
}

// server is a goroutine per accepted connection behind one or more loopback
// listeners on one port: as server.c's, enough of them (SO_REUSEPORT, at
// most 8) that their accept queues together hold every connection of the
// run, each with its own acceptor.
type server struct {
	lns     []net.Listener
	timeout time.Duration
	stop    int32 // atomic: set before the listeners close, so that their wake-up is no error
	conns   sync.WaitGroup
	done    sync.WaitGroup // the acceptors
	errors  netx.Errors
}

// soReusePort is Linux's SO_REUSEPORT (15 on x86-64 and arm64 alike), which
// package syscall does not name.
const soReusePort = 0xf

// listenerCount is server.c's: ceil(conns / backlog), between 1 and 8.
func listenerCount(conns int64) int {
	backlog := int64(netx.Somaxconn())
	if backlog <= 0 {
		backlog = 4096
	}
	n := (conns + backlog - 1) / backlog
	if n < 1 {
		n = 1
	}
	if n > 8 {
		n = 8
	}
	return int(n)
}

func startServer(timeout time.Duration, conns int64) (*server, error) {
	n := listenerCount(conns)
	lc := net.ListenConfig{}
	if n > 1 {
		lc.Control = func(network, address string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	s := &server{timeout: timeout}
	addr := "127.0.0.1:0"
	for i := 0; i < n; i++ {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			for _, l := range s.lns {
				l.Close()
			}
			return nil, err
		}
		s.lns = append(s.lns, ln)
		addr = ln.Addr().String() // the others share the first one's port
	}
	for _, ln := range s.lns {
		s.done.Add(1)
		go s.accept(ln)
	}
	return s, nil
}

// isOutOf says whether an accept failed for want of something that may come back
// once connections close (descriptors, buffers), as server.c's backoff does.
func isOutOf(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	return errno == syscall.EMFILE || errno == syscall.ENFILE || errno == syscall.ENOBUFS ||
		errno == syscall.ENOMEM || errno == syscall.EPERM
}

func (s *server) accept(ln net.Listener) {
	defer s.done.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if atomic.LoadInt32(&s.stop) != 0 {
				return
			}
			s.errors.Add("accept", netx.ErrText(err))
			if isOutOf(err) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		s.conns.Add(1)
		go s.serve(c)
	}
}

// serve sends back whatever arrives, until the client closes.
func (s *server) serve(c net.Conn) {
	defer s.conns.Done()
	defer c.Close()
	buf := make([]byte, 16384)
	for {
		deadline := time.Now().Add(s.timeout)
		c.SetReadDeadline(deadline)
		n, err := c.Read(buf)
		if n > 0 {
			c.SetWriteDeadline(deadline)
			if _, werr := c.Write(buf[:n]); werr != nil {
				s.errors.Add("server", netx.ErrText(werr))
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			s.errors.Add("server", netx.ErrText(err))
			return
		}
	}
}

// close stops accepting, then waits for every connection's goroutine (the
// clients have closed their side; each also ends at its read deadline).
func (s *server) close() {
	atomic.StoreInt32(&s.stop, 1)
	for _, ln := range s.lns {
		ln.Close()
	}
	s.done.Wait()
	s.conns.Wait()
}

// fill writes the bytes of message m of connection c (cmd_echo.c's fill).
func fill(p []byte, c, m int64) {
	for j := range p {
		p[j] = byte(int64(j)*7 + m*13 + c*31)
	}
}

// run is one set of clients against a fresh server.
type run struct {
	conns, messages, size int64
	timeout               time.Duration
	lat                   []float32 // conns x messages, microseconds; NaN when not done
	ok                    int64     // atomic: round trips that came back right
	errors                netx.Errors
	dialer                netx.Dialer
}

func (r *run) client(addr string, c int64) {
	lat := r.lat[c*r.messages : (c+1)*r.messages]
	sbuf := make([]byte, r.size)
	rbuf := make([]byte, r.size)
	conn, err := r.dialer.Dial("tcp", addr)
	if err != nil {
		r.errors.Add("connect", netx.ErrText(err))
		return
	}
	defer conn.Close()
	var ok int64
	for m := int64(0); m < r.messages; m++ {
		fill(sbuf, c, m)
		t0 := time.Now()
		conn.SetDeadline(t0.Add(r.timeout))
		if _, err := conn.Write(sbuf); err != nil {
			r.errors.Add("send", netx.ErrText(err))
			break
		}
		if _, err := io.ReadFull(conn, rbuf); err != nil {
			text := netx.ErrText(err)
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				text = "the server closed the connection early"
			}
			r.errors.Add("recv", text)
			break
		}
		t1 := time.Now()
		if !bytes.Equal(sbuf, rbuf) {
			r.errors.Add("echo", "a message came back different")
			break
		}
		lat[m] = float32(float64(t1.Sub(t0)) / 1e3)
		ok++
	}
	atomic.AddInt64(&r.ok, ok)
}

// result is what one measured set of clients gives.
type result struct {
	elapsed time.Duration
	usage   proc.Usage
	r       *run
	srv     *server
	lat     netx.Latency
	first   netx.Latency // of each connection's first round trip
	rest    netx.Latency // of the others
}

func measure(conns, messages, size int64, timeout time.Duration) (*result, error) {
	srv, err := startServer(timeout, conns)
	if err != nil {
		return nil, err
	}
	r := &run{conns: conns, messages: messages, size: size, timeout: timeout,
		lat: make([]float32, conns*messages)}
	r.dialer.Timeout = timeout
	nan := float32(math.NaN())
	for i := range r.lat {
		r.lat[i] = nan
	}
	addr := srv.lns[0].Addr().String()
	var wg sync.WaitGroup
	wg.Add(int(conns))
	before := proc.Now()
	t0 := time.Now()
	for c := int64(0); c < conns; c++ {
		go func(c int64) {
			r.client(addr, c)
			wg.Done()
		}(c)
	}
	wg.Wait()
	res := &result{elapsed: time.Since(t0), r: r, srv: srv}
	res.usage = proc.Now().Since(before)
	srv.close()
	// The split first: Summarize sorts what it is given.
	first := make([]float32, 0, conns)
	rest := make([]float32, 0, conns*messages)
	for c := int64(0); c < conns; c++ {
		first = append(first, r.lat[c*messages])
		rest = append(rest, r.lat[c*messages+1:(c+1)*messages]...)
	}
	res.first = netx.Summarize(first)
	res.rest = netx.Summarize(rest)
	res.lat = netx.Summarize(r.lat)
	return res, nil
}

func main() {
	conns := flag.Int64("connections", 1000, "concurrent connections")
	messages := flag.Int64("messages", 100, "round trips per connection")
	size := flag.Int64("size", 64, "bytes per message")
	timeoutMs := flag.Int64("timeout-ms", 30000, "limit of each round trip, and of connecting")
	wconns := flag.Int64("warmup-connections", -1, "connections of the untimed warm-up (default min(C, 50); 0: none)")
	wmsgs := flag.Int64("warmup-messages", -1, "round trips per warm-up connection (default min(M, 10))")
	flag.Parse()
	if flag.NArg() > 0 {
		proc.Fail(prog, 2, "unexpected argument '"+flag.Arg(0)+"'")
	}
	if *conns < 1 || *messages < 1 || *size < 1 || *timeoutMs < 1 {
		proc.Fail(prog, 2, "-connections, -messages, -size and -timeout-ms must be at least 1")
	}
	if *conns**messages > 50000000 {
		proc.Fail(prog, 2, "-connections x -messages is over 50000000 round trips")
	}
	if *wconns < 0 {
		*wconns = *conns
		if *wconns > 50 {
			*wconns = 50
		}
	}
	if *wmsgs < 0 {
		*wmsgs = *messages
		if *wmsgs > 10 {
			*wmsgs = 10
		}
	}
	if *wmsgs < 1 {
		*wmsgs = 1
	}
	limit := netx.RaiseNoFile()
	timeout := time.Duration(*timeoutMs) * time.Millisecond

	var warmupErrors int64
	if *wconns > 0 {
		w, err := measure(*wconns, *wmsgs, *size, timeout)
		if err != nil {
			proc.Fail(prog, 1, "loopback server: "+netx.ErrText(err))
		}
		warmupErrors = w.r.errors.Count() + w.srv.errors.Count()
	}
	res, err := measure(*conns, *messages, *size, timeout)
	if err != nil {
		proc.Fail(prog, 1, "loopback server: "+netx.ErrText(err))
	}

	rec := record{
		Bench: "echo", Backend: "go", Status: "ok",
		Connections: *conns, Messages: *messages, Size: *size, TimeoutMs: *timeoutMs,
		ElapsedMs:         proc.Round(float64(res.elapsed)/1e6, 1e6),
		MessagesOK:        atomic.LoadInt64(&res.r.ok),
		FailedConnections: res.r.errors.Count(),
		ServerErrors:      res.srv.errors.Count(),
		ConnectRetries:    atomic.LoadInt64(&res.r.dialer.Retries),
		ListenBacklog:     netx.Somaxconn(),
		Listeners:         len(res.srv.lns),
		LatencyP50:        res.lat.P50, LatencyP90: res.lat.P90, LatencyP99: res.lat.P99, LatencyMax: res.lat.Max,
		LatencyP99First: res.first.P99, LatencyP99Rest: res.rest.P99,
		CPUUserS:          proc.Round(res.usage.UserS, 1e6),
		CPUSysS:           proc.Round(res.usage.SysS, 1e6),
		WarmupConnections: *wconns, WarmupMessages: *wmsgs, WarmupErrors: warmupErrors,
		FDLimit:    limit,
		GoVersion:  runtime.Version(),
		GoMaxProcs: runtime.GOMAXPROCS(0),
	}
	first := res.r.errors.First()
	if first == "" {
		first = res.srv.errors.First()
	}
	if first != "" {
		rec.Status = "failed"
		rec.Error = &first
	}
	if kb := proc.PeakRSSKiB(); kb >= 0 {
		rec.PeakRSSKb = &kb
	}
	proc.PrintLine(rec)
	if rec.Status != "ok" {
		// The figures stand (weft-bench reads them); the exit code says that something failed.
		os.Exit(1)
	}
}
