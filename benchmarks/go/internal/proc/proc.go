// Package proc holds what both Go baselines measure about their own process,
// the same things weft-bench measures about its own (benchmarks/weft-bench/proc.c):
// OS threads (/proc/self/task), peak RSS (VmHWM), CPU time and minor page
// faults (getrusage), and the one-line JSON record they print.
//
// Only APIs that old Go releases have too (os.File.Readdirnames, the atomic
// functions rather than atomic.Int64), so that any Debian golang-go builds it.
package proc

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Threads is the number of entries of /proc/self/task, or -1.
func Threads() int {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return -1
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names)
}

// PeakRSSKiB is VmHWM from /proc/self/status in KiB, or -1.
func PeakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "VmHWM:") {
			fields := strings.Fields(line[len("VmHWM:"):])
			if len(fields) > 0 {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb
				}
			}
		}
	}
	return -1
}

// Usage is the process's CPU time and minor page faults so far (RUSAGE_SELF:
// every thread of the process, the Go runtime's included).
type Usage struct {
	UserS, SysS float64
	MinFlt      int64
}

func Now() Usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return Usage{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return Usage{UserS: tv(ru.Utime), SysS: tv(ru.Stime), MinFlt: int64(ru.Minflt)}
}

// Since is u minus an earlier reading: what the run in between cost.
func (u Usage) Since(before Usage) Usage {
	return Usage{UserS: u.UserS - before.UserS, SysS: u.SysS - before.SysS, MinFlt: u.MinFlt - before.MinFlt}
}

// Round keeps a number to the microsecond (for milliseconds) or the
// microsecond of a second, as weft-bench writes them.
func Round(v float64, scale float64) float64 {
	if v < 0 {
		return float64(int64(v*scale-0.5)) / scale
	}
	return float64(int64(v*scale+0.5)) / scale
}

// PrintLine writes v as one JSON object on one line on stdout: the record
// weft-bench reads back (fields in the struct's order).
func PrintLine(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		os.Stderr.WriteString("cannot write the record: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.Write(append(b, '\n'))
}

// Fail prints "PROG: message" on stderr and exits with code (2: usage, 1: a failed run).
func Fail(prog string, code int, msg string) {
	os.Stderr.WriteString(prog + ": " + msg + "\n")
	os.Exit(code)
}
