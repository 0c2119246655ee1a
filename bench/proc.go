package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procUsage is a process's CPU time and memory, from /proc.
type procUsage struct {
	CPUSeconds     float64
	RSSMiB, HWMMiB float64
	// ChildCPUSeconds is the part of CPUSeconds that readServer found in the server's child
	// processes (the embedded database).
	ChildCPUSeconds float64
	// ReapedCPUSeconds is the CPU of the process's children that have exited and been waited
	// for (cutime + cstime): in the bench process, the processes of a split fleet once it ends.
	ReapedCPUSeconds float64
}

// readProc reads /proc/pid/stat (utime + stime and cutime + cstime, in clock ticks of 1/100 s, Linux's USER_HZ on
// every common architecture) and /proc/pid/status (VmRSS, VmHWM).
func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	u.CPUSeconds = (utime + stime) / 100
	if len(f) >= 15 {
		cutime, _ := strconv.ParseFloat(f[13], 64)
		cstime, _ := strconv.ParseFloat(f[14], 64)
		u.ReapedCPUSeconds = (cutime + cstime) / 100
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for line := range strings.Lines(string(status)) {
		key, val, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		switch key {
		case "VmRSS":
			u.RSSMiB = kb / 1024
		case "VmHWM":
			u.HWMMiB = kb / 1024
		}
	}
	return u, nil
}

// readFleet is readProc of this process (the bench, and the fleet when it runs here), with the
// CPU of its children that have ended added: the processes of a split fleet, once it has run.
func readFleet() (procUsage, error) {
	u, err := readProc(os.Getpid())
	u.CPUSeconds += u.ReapedCPUSeconds
	return u, err
}

// readServer is readProc of the server's process and its children, summed: the embedded
// database runs as a child process of the server (embedded_db_process), and its CPU and memory
// are the server's.
func readServer(pid int) (procUsage, error) {
	u, err := readProc(pid)
	if err != nil {
		return u, err
	}
	// Each thread lists the children it started.
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, l := range lists {
		b, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if c, err := readProc(child); err == nil { // a child may have exited meanwhile
				u.CPUSeconds += c.CPUSeconds
				u.ChildCPUSeconds += c.CPUSeconds
				u.RSSMiB += c.RSSMiB
				u.HWMMiB += c.HWMMiB
			}
		}
	}
	return u, nil
}

// procWindow is what watchProc saw of a process over a window: the cores it used (CPU seconds
// per wall second) and its peak resident memory over samples taken every half second, if any
// sample was taken.
type procWindow struct {
	// cores are CPU seconds per wall second, dbCores the embedded database's part of them.
	cores, dbCores, peakRSS float64
	sampled                 bool
	// metrics are the server's /metrics at both ends (nil if a scrape failed).
	metricsFrom, metricsUntil map[string]float64
}

// watchProc samples process pid's resident memory every half second from `from` to `until`
// after now, and its CPU time at both ends; the channel delivers the result at until (or
// when ctx ends).
func watchProc(ctx context.Context, s *benchServer, from, until time.Duration) <-chan procWindow {
	pid := s.cmd.Process.Pid
	out := make(chan procWindow, 1)
	go func() {
		var w procWindow
		defer func() { out <- w }()
		start := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-time.After(from):
		}
		first, err := readServer(pid)
		if err != nil {
			return
		}
		w.metricsFrom, _ = scrapeMetrics(ctx, s.base)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last := first
		for time.Since(start) < until {
			if u, err := readServer(pid); err == nil {
				last = u
				w.peakRSS = max(w.peakRSS, u.RSSMiB)
				w.sampled = true
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		secs := max(time.Since(start)-from, time.Millisecond).Seconds()
		w.cores = (last.CPUSeconds - first.CPUSeconds) / secs
		w.dbCores = (last.ChildCPUSeconds - first.ChildCPUSeconds) / secs
		w.metricsUntil, _ = scrapeMetrics(ctx, s.base)
	}()
	return out
}
