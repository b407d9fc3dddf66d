package main

// CPU per operation, beside throughput. On a small shared machine a
// throughput median swings by a fifth from one run to the next, but how
// much CPU one cycle costs, in the client and in the server, moves much
// less: it is what a change to the statements or to the executor's own
// work shows up in first (BENCHMARKS.md, where a cycle's time goes).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clientCPU is the CPU time this process used so far.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU, when the bench's server runs on this machine, returns the CPU
// time its processes used so far: the postmaster's, its live children's
// (the pools' backends, the background workers) and its exited children's.
// It is nil for a server elsewhere.
var serverCPU func() time.Duration

// watchServer sets serverCPU when the server behind pool is a local
// process this user can read in /proc.
func watchServer(ctx context.Context, pool *pgxpool.Pool) {
	var backend int
	if pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend) != nil {
		return
	}
	st, ok := procStat(backend)
	if !ok || !strings.Contains(st.comm, "postgres") {
		return
	}
	postmaster := st.ppid
	tick := time.Second / 100 // USER_HZ on Linux
	serverCPU = func() time.Duration {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return 0
		}
		var ticks int64
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			st, ok := procStat(pid)
			switch {
			case !ok:
			case pid == postmaster:
				ticks += st.utime + st.stime + st.cutime + st.cstime
			case st.ppid == postmaster:
				ticks += st.utime + st.stime
			}
		}
		return time.Duration(ticks) * tick
	}
}

// walCounters are pg_stat_wal's cumulative WAL bytes and full-page
// images.
type walCounters struct{ bytes, fpi int64 }

// walPool reads pg_stat_wal; nil until watchWAL.
var walPool *pgxpool.Pool

// watchWAL makes measured runs count the WAL they write through pool's
// server: bytes per operation, and the full-page images among them (the
// first change of each page after a checkpoint writes the whole 8 kB
// page), the part of a write path's WAL that depends on how many distinct
// pages it touches, and so on the size of the table it writes to.
func watchWAL(pool *pgxpool.Pool) { walPool = pool }

// walStats returns the server's WAL counters, zero when not watched or
// unreadable.
func walStats() walCounters {
	var w walCounters
	if walPool != nil {
		_ = walPool.QueryRow(context.Background(), `SELECT wal_bytes::int8, wal_fpi FROM pg_stat_wal`).Scan(&w.bytes, &w.fpi)
	}
	return w
}

// serverCounters are the server's CPU time (zero when not measured) and
// WAL counters at one instant.
type serverCounters struct {
	cpu time.Duration
	wal walCounters
}

func serverNow() serverCounters {
	c := serverCounters{wal: walStats()}
	if serverCPU != nil {
		c.cpu = serverCPU()
	}
	return c
}

// since sets r's server CPU and WAL to what the server did from c until
// now.
func (c serverCounters) since(r *rawRun) {
	now := serverNow()
	r.server = now.cpu - c.cpu
	r.wal = walCounters{bytes: now.wal.bytes - c.wal.bytes, fpi: now.wal.fpi - c.wal.fpi}
}

type stat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/PID/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return stat{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return stat{}, false
	}
	var st stat
	st.comm = s[open+1 : end]
	st.ppid, _ = strconv.Atoi(f[1])
	st.utime, _ = strconv.ParseInt(f[11], 10, 64)
	st.stime, _ = strconv.ParseInt(f[12], 10, 64)
	st.cutime, _ = strconv.ParseInt(f[13], 10, 64)
	st.cstime, _ = strconv.ParseInt(f[14], 10, 64)
	return st, true
}

// medianOf returns the median of one figure over the series' samples.
func (s *series) medianOf(f func(sample) time.Duration) time.Duration {
	v := make([]time.Duration, len(s.samples))
	for i, x := range s.samples {
		v[i] = f(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// medianOfFloat is medianOf for a figure that is not a duration.
func (s *series) medianOfFloat(f func(sample) float64) float64 {
	v := make([]float64, len(s.samples))
	for i, x := range s.samples {
		v[i] = f(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// cpuLine prints the median CPU per operation of each series (pgbench's:
// the server's alone, its client being another process).
func cpuLine(ss ...*series) {
	for _, s := range ss {
		client := s.medianOf(func(x sample) time.Duration { return x.client }).Round(time.Microsecond).String()
		if strings.HasSuffix(s.name, "(pgbench)") {
			client = "n/a" // another process
		}
		server := "n/a (remote server)"
		if serverCPU != nil {
			server = s.medianOf(func(x sample) time.Duration { return x.server }).Round(time.Microsecond).String()
		}
		wal := ""
		if walPool != nil {
			b := s.medianOfFloat(func(x sample) float64 { return x.wal })
			fpi := s.medianOfFloat(func(x sample) float64 { return x.fpi })
			wal = fmt.Sprintf("  wal %5.0f B (%.2f full pages)", b, fpi)
		}
		fmt.Printf("cpu per op  %-50s client %7s  server %s%s\n", s.name, client, server, wal)
	}
}
