package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// profileSummary is what a scenario's server profiles show: where the files are (kept out of
// git) and the functions that took the most CPU, so the report can say what limits a target.
type profileSummary struct {
	CPUFile    string        `json:"cpu_file,omitempty"`
	AllocsFile string        `json:"allocs_file,omitempty"`
	Seconds    float64       `json:"cpu_seconds_profiled"`
	CPUSamples float64       `json:"cpu_seconds_sampled"`
	Top        []profileLine `json:"top_cumulative"`
	Error      string        `json:"error,omitempty"`
}

// profileLine is one function of a CPU profile: the share of the sampled CPU spent in it
// (flat) and in it and what it called (cumulative).
type profileLine struct {
	Function   string  `json:"function"`
	FlatPct    float64 `json:"flat_pct"`
	CumPct     float64 `json:"cum_pct"`
	CumSeconds float64 `json:"cum_s"`
}

// profileTop is how many functions a summary lists.
const profileTop = 25

// cut is p listing its top n functions at most; p is unchanged, and nil stays nil.
func (p *profileSummary) cut(n int) *profileSummary {
	if p == nil || len(p.Top) <= n {
		return p
	}
	short := *p
	short.Top = p.Top[:n]
	return &short
}

// captureProfiles records, from the server's pprof listener, a CPU profile for d (at least a
// second) and, over the same time, its block and mutex profiles (what goroutines waited for, and
// on which locks) and, if withTrace, an execution trace of the first traceFor of it; then its
// allocation profile. They go into dir as <name>-cpu.pprof, <name>-block.pprof, <name>-mutex.pprof,
// <name>.trace and <name>-allocs.pprof; the CPU profile is summarised. It blocks for d. Failures
// are recorded in the summary, not returned: a missing profile costs the report a section, not
// the scenario.
func captureProfiles(ctx context.Context, s *benchServer, dir, name string, d time.Duration, withTrace bool) *profileSummary {
	d = max(d, time.Second)
	sum := &profileSummary{Seconds: d.Seconds()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		sum.Error = err.Error()
		return sum
	}
	secs := int(d.Round(time.Second) / time.Second)
	var wg sync.WaitGroup
	side := func(file, url string, timeout time.Duration) {
		wg.Go(func() {
			if data, err := fetchProfile(ctx, url, timeout); err == nil {
				_ = os.WriteFile(filepath.Join(dir, file), data, 0o644)
			}
		})
	}
	side(name+"-block.pprof", fmt.Sprintf("%s/debug/pprof/block?seconds=%d", s.pprof, secs), d+30*time.Second)
	side(name+"-mutex.pprof", fmt.Sprintf("%s/debug/pprof/mutex?seconds=%d", s.pprof, secs), d+30*time.Second)
	if withTrace {
		tsecs := int(min(traceFor, d).Round(time.Second) / time.Second)
		side(name+".trace", fmt.Sprintf("%s/debug/pprof/trace?seconds=%d", s.pprof, tsecs), d+30*time.Second)
	}
	cpu, err := fetchProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.pprof, secs), d+30*time.Second)
	wg.Wait()
	if err != nil {
		sum.Error = err.Error()
		return sum
	}
	if allocs, err := fetchProfile(ctx, s.pprof+"/debug/pprof/allocs", 30*time.Second); err == nil {
		sum.AllocsFile = filepath.Join(dir, name+"-allocs.pprof")
		if err := os.WriteFile(sum.AllocsFile, allocs, 0o644); err != nil {
			sum.Error = err.Error()
		}
	}
	summariseCPU(sum, filepath.Join(dir, name+"-cpu.pprof"), cpu)
	return sum
}

// traceFor bounds the execution trace captureProfiles takes: a trace of a busy server grows
// by megabytes a second, and its start and stop hold back the requests around them
// (docs/benchmarks/README.md, "At 500,000"). A run judged whole is traced no more.
const traceFor = 5 * time.Second

// captureFleet records a CPU profile of this process (the fleet and the load generator) for d,
// into dir as <name>-fleet-cpu.pprof, and summarises it: the client side of the latencies the
// fleet measures. If withTrace, over the first traceFor of it, the window of the server's trace,
// it records an execution trace as <name>-fleet.trace, so that a pause in the server's arrivals
// can be looked for in the fleet that sends them. At its end it writes the process's heap
// profile as <name>-fleet-heap.pprof (fleet.ProfileProcess). Like captureProfiles it records
// failures in the summary.
func captureFleet(ctx context.Context, dir, name string, d time.Duration, withTrace bool) *profileSummary {
	sum := &profileSummary{Seconds: d.Seconds()}
	var tracedFor time.Duration
	if withTrace {
		tracedFor = traceFor
	}
	cpu, err := fleet.ProfileProcess(ctx, dir, name, d, tracedFor)
	if err != nil {
		sum.Error = err.Error()
		return sum
	}
	summariseWritten(sum, fleet.CPUProfileFile(dir, name), cpu)
	return sum
}

// summariseShardProfile summarises the CPU profile the first process of a split fleet took as
// p asked (fleet.ShardProfile): one process's share of the fleet's workers.
func summariseShardProfile(p fleet.ShardProfile) *profileSummary {
	sum := &profileSummary{Seconds: p.For.Seconds()}
	file := fleet.CPUProfileFile(p.Dir, p.Name)
	cpu, err := os.ReadFile(file)
	if err != nil {
		sum.Error = "the fleet's first process left no CPU profile: " + err.Error()
		return sum
	}
	summariseWritten(sum, file, cpu)
	return sum
}

// summariseCPU writes the CPU profile cpu to file and lists its top functions in sum.
func summariseCPU(sum *profileSummary, file string, cpu []byte) {
	if err := os.WriteFile(file, cpu, 0o644); err != nil {
		sum.CPUFile, sum.Error = file, err.Error()
		return
	}
	summariseWritten(sum, file, cpu)
}

// summariseWritten lists in sum the top functions of cpu, the CPU profile already in file.
func summariseWritten(sum *profileSummary, file string, cpu []byte) {
	sum.CPUFile = file
	p, err := profile.Parse(bytes.NewReader(cpu))
	if err != nil {
		sum.Error = fmt.Sprintf("parse CPU profile: %v", err)
		return
	}
	sum.CPUSamples, sum.Top = topFunctions(p, profileTop)
}

// profileDuring runs captureProfiles for d after a delay, in the background (profileLater).
func profileDuring(ctx context.Context, s *benchServer, set plan, name string, after, d time.Duration) <-chan *profileSummary {
	return profileLater(ctx, set, after, func() *profileSummary { return captureProfiles(ctx, s, set.profiles, name, d, !set.wholeRun) })
}

// profileFleet runs captureFleet for d after a delay, in the background (profileLater).
func profileFleet(ctx context.Context, set plan, name string, after, d time.Duration) <-chan *profileSummary {
	return profileLater(ctx, set, after, func() *profileSummary { return captureFleet(ctx, set.profiles, name, d, !set.wholeRun) })
}

// profileLater runs capture after a delay, in the background; the channel delivers its
// summary, or nil when profiles are off or the delay was cut short.
func profileLater(ctx context.Context, set plan, after time.Duration, capture func() *profileSummary) <-chan *profileSummary {
	out := make(chan *profileSummary, 1)
	if set.profiles == "" {
		out <- nil
		return out
	}
	go func() {
		select {
		case <-ctx.Done():
			out <- nil
			return
		case <-time.After(after):
		}
		out <- capture()
	}()
	return out
}

// fetchProfile GETs a profile from the server's pprof listener, giving up after timeout.
func fetchProfile(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := httpGet(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return data, nil
}

// topFunctions returns the sampled CPU seconds of a CPU profile and its n functions with the
// most cumulative time (a function counted once per sample however deep its recursion).
func topFunctions(p *profile.Profile, n int) (float64, []profileLine) {
	vi := len(p.SampleType) - 1 // cpu nanoseconds, after samples/count
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	flat, cum := map[string]int64{}, map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		seen := map[string]bool{}
		for li, loc := range s.Location {
			for lj, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				fn := line.Function.Name
				// The leaf is the first line of the first location (inlined frames come
				// first within a location).
				if li == 0 && lj == 0 {
					flat[fn] += v
				}
				if !seen[fn] {
					seen[fn] = true
					cum[fn] += v
				}
			}
		}
	}
	if total == 0 {
		return 0, nil
	}
	names := make([]string, 0, len(cum))
	for fn := range cum {
		names = append(names, fn)
	}
	slices.SortFunc(names, func(a, b string) int {
		if cum[a] != cum[b] {
			if cum[a] > cum[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var top []profileLine
	for _, fn := range names {
		if len(top) == n {
			break
		}
		top = append(top, profileLine{Function: fn, FlatPct: pct(flat[fn], total), CumPct: pct(cum[fn], total),
			CumSeconds: float64(cum[fn]) / 1e9})
	}
	return float64(total) / 1e9, top
}

func pct(v, total int64) float64 { return float64(int64(1000*float64(v)/float64(total)+0.5)) / 10 }

// profileMarkdown is a scenario's profile section of report.md; what is "Server" or "Fleet".
func profileMarkdown(b *strings.Builder, what string, p *profileSummary) {
	if p == nil {
		return
	}
	fmt.Fprintf(b, "\n**%s CPU profile** (%.0f s profiled, %.1f CPU s sampled", what, p.Seconds, p.CPUSamples)
	if p.CPUFile != "" {
		fmt.Fprintf(b, "; `go tool pprof %s`", filepath.Base(p.CPUFile))
	}
	b.WriteString(")")
	if p.Error != "" {
		fmt.Fprintf(b, ": %s", p.Error)
	}
	b.WriteString("\n\n")
	if len(p.Top) == 0 {
		return
	}
	b.WriteString("| Function | Cumulative | Flat |\n|---|---:|---:|\n")
	for _, l := range p.Top {
		fmt.Fprintf(b, "| `%s` | %.1f %% | %.1f %% |\n", l.Function, l.CumPct, l.FlatPct)
	}
}
