// Package fleet runs many simulated workers in one process against a Shoal (or fishtest) server,
// for end-to-end tests, demos and load tests: each worker is a real worker.Worker with its own
// unique_key and worker_info, playing games from a worker.SimSource, and all of them share one
// HTTP connection pool. Run injects failures on request (workers that vanish mid-task, workers
// that send bad data), shows live progress, and ends with a Report: per-endpoint request counts
// and latency percentiles, errors by kind, tasks started and abandoned, games reported, and the
// exactly-once check of every run the fleet touched. Several fleets may run at once; each has
// its own connection pool. A large fleet may be split over several processes (Options.Processes,
// split.go), each running a share of the workers with its own heap and collector, and report as
// one. Against a plain http:// server the pool is the fleet's own
// lightTransport, which does each request in the worker's goroutine, so that the fleet's CPU and
// scheduling delays stay small next to the server's.
//
// The package imports only the standard library, worker and protocol.
package fleet

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/shoal-chess/shoal/worker"
)

// Arrival is how the fleet's workers start.
type Arrival string

const (
	// Storm starts every worker at once, like a fleet reconnecting after a server restart.
	Storm Arrival = "storm"
	// Ramp starts them one by one, evenly over Options.Ramp.
	Ramp Arrival = "ramp"
)

// stcGameSeconds is the length of one STC (10+0.1) game as fishtest estimates it
// ((10 + 0.1*68) * 2 * 0.92 s): the default game length, before time compression.
const stcGameSeconds = 30.912

// The fleet's background rates of faults, per game: a healthy machine's losses on time and
// engine crashes at fishtest's short time control, where both are rare (the server's quarantine
// measures its rule against these, docs/QUARANTINE.md), and a bad machine's losses on time.
const (
	DefaultTimeLossRate    = 2e-4
	DefaultCrashRate       = 5e-5
	DefaultBadTimeLossRate = 0.02
)

// keyPrefix is worker i's unique_key prefix, the last part of its short name.
func keyPrefix(i int) string { return fmt.Sprintf("fl%06d", i) }

// MachineName is worker i's short name, as the server names the machine: the user, the cores
// and the unique key's prefix.
func MachineName(opts Options, i int) string {
	return fmt.Sprintf("%s-%dcores-%s", opts.Username, max(opts.Concurrency, 1), keyPrefix(i))
}

// MaxWorkers is the largest fleet: worker i's unique_key prefix is "fl" and i in six digits
// (a prefix has at most 8 characters).
const MaxWorkers = 1_000_000

// Options configure a fleet. Zero values get the defaults named.
type Options struct {
	// ServerURL, Username and Password: where the workers connect and as whom. The user's
	// machine limit must allow Workers tasks from one address (`shoal user add --machine-limit`).
	ServerURL, Username, Password string
	// Workers is the number of simulated workers (required, at most MaxWorkers).
	Workers int
	// Concurrency is the cores each worker announces in worker_info (default 1).
	Concurrency int
	// Elo is the true Elo difference of the tested engine over its base; DrawRatio the share of
	// drawn games; both go to every worker's SimSource.
	Elo, DrawRatio float64
	// SPSAOptimum is each tuned parameter's best value for SimSource (SPSA runs), and
	// SPSAEloPerStep the Elo a step c closer to it is worth (SimSource's default when 0).
	SPSAOptimum    map[string]float64
	SPSAEloPerStep float64
	// TimeScale compresses time: every worker's protocol clock (heartbeat, backoff) is divided
	// by it, and so is the default pair time. Default 1. The server's time knobs should be
	// compressed by the same factor (task_duration 1800 s / TimeScale keeps tasks as long, in
	// games, as fishtest's).
	TimeScale float64
	// RetryDelay is every worker's worker.Config.RetryDelay (0: 15 s / TimeScale).
	RetryDelay time.Duration
	// PairTime is the wall time a worker takes to play one game pair (SimSource.GameTime); default
	// two STC games (2 * 30.9 s) / Concurrency / TimeScale, as a worker plays Concurrency games at
	// once.
	PairTime time.Duration
	// Arrival is Storm (default) or Ramp, over Ramp (required for Ramp).
	Arrival Arrival
	Ramp    time.Duration
	// StopRamp spreads the fleet's stop: the workers are told to stop one after another, in
	// the order they started, evenly over StopRamp, as workers of a real fleet stop at their
	// own moments; each then finishes and reports its batch within StopGrace. 0 tells every
	// worker at once, a burst of final reports no real fleet sends.
	StopRamp time.Duration
	// Vanish is the fraction of workers that vanish mid-task: each cancels its own context right
	// after its first accepted update that leaves its task alive, and sends nothing more. Their
	// tasks are left for the server to reclaim after its dead-task timeout.
	Vanish float64
	// BadData is the fraction of workers that send bad data: a quarter of their update_task
	// calls carry stats the server must refuse (an odd number of games, an inconsistent
	// pentanomial, or fewer games than before). The corruption is made on the wire, after the
	// worker's own check of its batch, so that the server's validation is what is tested.
	BadData float64
	// TimeLossRate and CrashRate are a healthy worker's chances, per game, of a loss on time and
	// of an engine crash, which it reports in update_task's stats as fishtest's worker does: 0
	// takes DefaultTimeLossRate and DefaultCrashRate, a negative value none.
	TimeLossRate, CrashRate float64
	// BadWorkers is how many workers are bad machines, chosen from Seed among those that
	// neither vanish nor send bad data: they lose on time with BadTimeLossRate, crash with
	// BadCrashRate and fail a batch (failed_task) with BadFailRate instead of the healthy rates
	// (all three 0: BadTimeLossRate is DefaultBadTimeLossRate). The report names them
	// (BadMachines).
	BadWorkers                                 int
	BadTimeLossRate, BadCrashRate, BadFailRate float64
	// Duration bounds the run (0: no bound). UntilFinished lists runs whose end ends the fleet
	// (polled through GET /api/get_run). With neither, the fleet runs until ctx ends.
	Duration      time.Duration
	UntilFinished []string
	// Seed makes the games, the arrival and the choice of failing workers reproducible (as far
	// as scheduling allows); 0 picks a random seed.
	Seed uint64
	// Progress, if set, gets a progress line every ProgressPeriod (default 1 s). Terminal makes
	// it one line rewritten in place instead of a line per period.
	Progress       io.Writer `json:"-"`
	Terminal       bool      `json:"-"`
	ProgressPeriod time.Duration
	// Logger gets every worker's log (very verbose for a big fleet); nil discards it. The
	// workers of a split fleet (Processes) log nothing.
	Logger *slog.Logger `json:"-"`
	// StopGrace is how long workers get, at the end, to finish and report the batch they are
	// playing before they are cut off (default 30 s).
	StopGrace time.Duration
	// HTTPTimeout bounds each request, its reply's body included (default 30 s, as fishtest's
	// worker).
	HTTPTimeout time.Duration
	// IdleConnTimeout is how long a kept-alive connection waits for reuse before the fleet
	// closes it (default 60 s; against an http:// server, an older one is closed when the pool
	// is next used, never reused). It must be shorter than the server's idle timeout, so that
	// the fleet, not the server, closes an idle connection: a request sent on a connection the
	// server is closing at that moment fails (or, on the fleet's own transport, is sent once
	// more, see lightTransport.RoundTrip).
	IdleConnTimeout time.Duration
	// SlowBeat, if positive, asks for the report's Timeline: second by second, the beats and
	// those that took longer than SlowBeat or failed. It needs a Duration.
	SlowBeat time.Duration
	// Window asks for the report's Window section: the requests that start WindowFrom or later
	// after the first arrival and end before the fleet begins to stop. It can leave out the
	// arrival burst (WindowFrom past the ramp), and always leaves out the burst of final
	// reports and failed tasks of a fleet stopping all at once.
	Window     bool
	WindowFrom time.Duration
	// Processes splits the fleet over this many processes (0 or 1: all in this one), worker i
	// in process i modulo Processes, each with its own connection pool, heap and collector:
	// a collection then holds back a share of the workers, for the time it takes to mark a
	// share of the heap. Each is started with ShardCommand, a command that hands its standard
	// input and output to ServeShard (`shoal-bench fleet-shard`), and inherits this process's
	// collector setting and GOMAXPROCS. This process checks the server, paces the run and
	// merges what they recorded into one report, as if one process had run them all.
	Processes    int      `json:"-"`
	ShardCommand []string `json:"-"`
	// ShardProfile, with Processes, has the first process profile itself (see ShardProfile).
	ShardProfile *ShardProfile `json:"-"`
}

// validate checks o and fills its defaults.
func (o *Options) validate() error {
	u, err := url.Parse(o.ServerURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("invalid server URL %q: want http://HOST[:PORT] or https://...", o.ServerURL)
	case o.Username == "" || o.Password == "":
		return errors.New("a username and a password are required")
	case o.Workers < 1 || o.Workers > MaxWorkers:
		return fmt.Errorf("invalid number of workers %d: want 1 to %d", o.Workers, MaxWorkers)
	case o.Concurrency < 0:
		return fmt.Errorf("invalid concurrency %d: must be positive", o.Concurrency)
	case math.IsNaN(o.Elo) || math.Abs(o.Elo) > 1000:
		return fmt.Errorf("invalid Elo %v: want -1000 to 1000", o.Elo)
	case math.IsNaN(o.SPSAEloPerStep) || o.SPSAEloPerStep < 0:
		return fmt.Errorf("invalid SPSA Elo per step %v: must not be negative", o.SPSAEloPerStep)
	case !(o.DrawRatio >= 0 && o.DrawRatio < 1):
		return fmt.Errorf("invalid draw ratio %v: want 0 <= d < 1", o.DrawRatio)
	case o.TimeScale < 0 || math.IsNaN(o.TimeScale) || math.IsInf(o.TimeScale, 0):
		return fmt.Errorf("invalid time scale %v: must be a positive number", o.TimeScale)
	case o.PairTime < 0:
		return fmt.Errorf("invalid pair time %v: must not be negative", o.PairTime)
	case o.Arrival != "" && o.Arrival != Storm && o.Arrival != Ramp:
		return fmt.Errorf("invalid arrival %q: want storm or ramp", o.Arrival)
	case o.Arrival == Ramp && o.Ramp <= 0:
		return fmt.Errorf("invalid ramp %v: a ramp arrival needs a positive duration", o.Ramp)
	case !(o.Vanish >= 0 && o.Vanish <= 1):
		return fmt.Errorf("invalid vanish fraction %v: want 0 to 1", o.Vanish)
	case !(o.BadData >= 0 && o.BadData <= 1):
		return fmt.Errorf("invalid bad-data fraction %v: want 0 to 1", o.BadData)
	case o.Vanish+o.BadData > 1:
		return fmt.Errorf("vanish (%v) and bad-data (%v) fractions add up to more than 1", o.Vanish, o.BadData)
	case !(o.TimeLossRate < 1 && o.CrashRate < 1):
		return fmt.Errorf("invalid time-loss or crash rate (%v, %v): want below 1 (negative: none)", o.TimeLossRate, o.CrashRate)
	case o.BadWorkers < 0 || o.BadWorkers > o.Workers-int(math.Round(o.Vanish*float64(o.Workers)))-int(math.Round(o.BadData*float64(o.Workers))):
		return fmt.Errorf("invalid number of bad workers %d: want 0 to the workers that neither vanish nor send bad data", o.BadWorkers)
	case !(o.BadTimeLossRate >= 0 && o.BadTimeLossRate <= 1 && o.BadCrashRate >= 0 && o.BadCrashRate <= 1 && o.BadFailRate >= 0 && o.BadFailRate <= 1):
		return fmt.Errorf("invalid bad workers' rates (%v, %v, %v): want 0 to 1", o.BadTimeLossRate, o.BadCrashRate, o.BadFailRate)
	case o.Processes < 0 || o.Processes > o.Workers:
		return fmt.Errorf("invalid number of processes %d: want 1 to the number of workers (%d)", o.Processes, o.Workers)
	case o.Processes > 1 && len(o.ShardCommand) == 0:
		return errors.New("a fleet split over processes needs the command that runs one (ShardCommand)")
	case o.SlowBeat > 0 && o.Duration == 0:
		return errors.New("a timeline (slow beat) needs a duration")
	case o.SlowBeat < 0 || o.Duration < 0 || o.Ramp < 0 || o.StopRamp < 0 || o.ProgressPeriod < 0 || o.StopGrace < 0 || o.HTTPTimeout < 0 || o.IdleConnTimeout < 0 || o.WindowFrom < 0:
		return errors.New("durations must not be negative")
	}
	for _, id := range o.UntilFinished {
		if id == "" || strings.ContainsAny(id, "/?#") {
			return fmt.Errorf("invalid run id %q", id)
		}
	}
	o.ServerURL = strings.TrimRight(o.ServerURL, "/")
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.TimeLossRate == 0 {
		o.TimeLossRate = DefaultTimeLossRate
	}
	if o.CrashRate == 0 {
		o.CrashRate = DefaultCrashRate
	}
	o.TimeLossRate, o.CrashRate = max(o.TimeLossRate, 0), max(o.CrashRate, 0)
	if o.BadTimeLossRate == 0 && o.BadCrashRate == 0 && o.BadFailRate == 0 {
		o.BadTimeLossRate = DefaultBadTimeLossRate
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if o.PairTime == 0 {
		o.PairTime = time.Duration(2 * stcGameSeconds / float64(o.Concurrency) / o.TimeScale * float64(time.Second))
	}
	if o.Arrival == "" {
		o.Arrival = Storm
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.ProgressPeriod == 0 {
		o.ProgressPeriod = time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = 30 * time.Second
	}
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = 60 * time.Second
	}
	if o.HTTPTimeout == 0 {
		o.HTTPTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// fleet is one Run's state.
type fleet struct {
	opts   Options
	rec    *recorder
	client *http.Client // shared by every well-behaved worker
	// direct is the fleet's own transport when client has it (nil with net/http's): it bounds
	// each call itself, and the server redirects no worker call, so the workers call it
	// directly (worker.Config.RoundTripper).
	direct http.RoundTripper

	stop chan struct{} // closed when the fleet starts stopping

	mu         sync.Mutex
	started    []*worker.Worker
	launchDone chan struct{} // closed once the launcher has started every worker it will
	stopping   bool
	progGames  int64         // games at the last progress line, for the rate
	progAt     time.Duration // when it was written
}

// Run starts opts.Workers workers, lets them work until opts.Duration has passed, every run of
// opts.UntilFinished is finished, every worker has quit or ctx ends, then stops them gracefully
// (each finishes and reports its batch, within opts.StopGrace) and returns the report, with the
// exactly-once check of every run touched. The error is for invalid options and for a server
// that cannot be used at all (unreachable, credentials refused, an unknown run to wait for);
// everything that goes wrong once the fleet runs is in the report. With opts.Processes above
// one the workers run in that many processes (see runSplit) and the report is of them all.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f, closeIdle := newFleet(opts)
	defer closeIdle()
	if err := f.preflight(ctx); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if opts.Processes > 1 {
		return f.runSplit(ctx)
	}
	roles, nBad := assignRoles(opts)
	rep := newReport(opts, nBad)

	// The workers do not stop when ctx does: ctx ending starts the graceful stop below, and
	// workersCtx is cancelled only when the grace is over.
	workersCtx, cancelWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWorkers()
	start := time.Now()
	f.begin(start)
	allDone := f.startWorkers(workersCtx, start, roles, 0, 1)
	rep.StoppedBecause = f.watch(ctx, start, allDone, f.snapshot)
	stopAt := time.Now()
	f.end(ctx, allDone, stopAt, cancelWorkers)
	elapsed := time.Since(start)
	f.progress(elapsed, true, f.snapshot())
	f.complete(ctx, rep, stopAt.Sub(start), elapsed, f.startedCount())
	return rep, nil
}

// newFleet is a fleet of opts (validated) with its own connection pool, and what closes the
// pool's idle connections.
func newFleet(opts Options) (*fleet, func()) {
	client, closeIdle := newClient(opts)
	f := &fleet{
		opts:   opts,
		rec:    newRecorder(),
		client: client,
		stop:   make(chan struct{}),
	}
	if _, light := client.Transport.(*lightTransport); light {
		f.direct = client.Transport
	}
	return f, closeIdle
}

// assignRoles picks, from opts.Seed, the workers that vanish ('v'), those that send bad data
// ('b') and the bad machines ('q'), by index over the whole fleet, so that every process of a
// split fleet picks the same; nBad is how many send bad data.
func assignRoles(opts Options) (roles []byte, nBad int) {
	rng := rand.New(rand.NewPCG(opts.Seed, 0))
	order := rng.Perm(opts.Workers)
	nVanish := int(math.Round(opts.Vanish * float64(opts.Workers)))
	nBad = int(math.Round(opts.BadData * float64(opts.Workers)))
	roles = make([]byte, opts.Workers)
	for i, w := range order {
		switch {
		case i < nVanish:
			roles[w] = 'v'
		case i < nVanish+nBad:
			roles[w] = 'b'
		case i < nVanish+nBad+opts.BadWorkers:
			roles[w] = 'q'
		}
	}
	return roles, nBad
}

// newReport is the report of a fleet of opts, before it runs.
func newReport(opts Options, nBad int) *Report {
	rep := &Report{Workers: opts.Workers, Concurrency: opts.Concurrency, Arrival: string(opts.Arrival),
		TimeScale: opts.TimeScale, Elo: opts.Elo, DrawRatio: opts.DrawRatio, BadDataWorkers: nBad}
	roles, _ := assignRoles(opts)
	for i, r := range roles {
		if r == 'q' {
			rep.BadMachines = append(rep.BadMachines, MachineName(opts, i))
		}
	}
	return rep
}

// begin readies the recorder for a fleet whose first worker starts at start: the window, the
// timeline and the scheduling latencies over the window.
func (f *fleet) begin(start time.Time) {
	opts := f.opts
	if opts.Window {
		f.rec.winStart.Store(start.Add(opts.WindowFrom).UnixNano())
		f.rec.sched.startAt(start.Add(opts.WindowFrom))
	}
	f.rec.timeline = opts.timeline(start)
}

// timeline is the timeline of a fleet of o whose first worker starts at start, nil unless
// SlowBeat asks for one: the run, its stop and grace, and a second to spare.
func (o Options) timeline(start time.Time) *timeline {
	if o.SlowBeat <= 0 {
		return nil
	}
	return newTimeline(start, o.SlowBeat, int((o.Duration+o.StopRamp+o.StopGrace)/time.Second)+2)
}

// startWorkers starts, on schedule from start, the workers whose index is shard modulo shards
// (all of them with shards = 1), with the roles assignRoles gave them. The channel is closed
// once every worker it started, and the launcher, have returned.
func (f *fleet) startWorkers(ctx context.Context, start time.Time, roles []byte, shard, shards int) <-chan struct{} {
	opts := f.opts
	var wg sync.WaitGroup
	launchDone, allDone := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.launchDone = launchDone
	f.mu.Unlock()
	wg.Add(1)
	go func() { // the launcher; joined through wg
		defer wg.Done()
		defer close(launchDone)
		for i := shard; i < opts.Workers; i += shards {
			if opts.Arrival == Ramp {
				at := start.Add(time.Duration(float64(opts.Ramp) * float64(i) / float64(opts.Workers)))
				timer := time.NewTimer(time.Until(at))
				select {
				case <-timer.C:
				case <-f.stop:
					timer.Stop()
					return
				}
			}
			if !f.launch(ctx, &wg, i, roles[i]) {
				return
			}
		}
	}()
	go func() { wg.Wait(); close(allDone) }() // returns once every worker and the launcher have
	return allDone
}

// end stops the workers startWorkers started (allDone is its channel): it closes the window at
// stopAt, asks every worker to finish its batch and quit (spread over StopRamp unless ctx has
// ended), and cuts off those still working after StopGrace (cancelWorkers).
func (f *fleet) end(ctx context.Context, allDone <-chan struct{}, stopAt time.Time, cancelWorkers func()) {
	f.rec.winEnd.Store(stopAt.UnixNano())
	f.rec.sched.stop()
	f.stopAll(ctx, allDone)
	grace := time.NewTimer(f.opts.StopGrace)
	select {
	case <-allDone:
		grace.Stop()
	case <-grace.C:
		cancelWorkers()
		<-allDone
	}
}

// complete fills rep from the recorder: the figures of a fleet that ran for elapsed, began to
// stop at stopped (both from the first arrival) and started started workers, then the
// exactly-once check of every run touched.
func (f *fleet) complete(ctx context.Context, rep *Report, stopped, elapsed time.Duration, started int) {
	opts := f.opts
	rep.fill(f.rec, elapsed, started)
	if opts.Window && stopped > opts.WindowFrom {
		rep.fillWindow(f.rec, opts.WindowFrom, stopped)
	}
	if f.rec.timeline != nil {
		rep.Timeline = f.rec.timeline.seconds(elapsed)
	}
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	rep.checkRuns(checkCtx, f.rec, f.client, opts.ServerURL, opts.UntilFinished)
}

// startedCount is how many workers the fleet started.
func (f *fleet) startedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

// newClient is the HTTP client the fleet's workers share, and what closes its idle connections.
// A plain http:// server reached without a proxy gets lightTransport, which bounds each request
// itself; https, or a proxy from the environment, keeps net/http's transport.
func newClient(opts Options) (*http.Client, func()) {
	if u, err := url.Parse(opts.ServerURL); err == nil && u.Scheme == "http" {
		if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err == nil && proxy == nil {
			t := &lightTransport{idleTimeout: opts.IdleConnTimeout, maxIdle: opts.Workers + 16, timeout: opts.HTTPTimeout}
			return &http.Client{Transport: t}, t.CloseIdleConnections
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = opts.Workers + 16
	t.MaxIdleConnsPerHost = opts.Workers + 16
	t.IdleConnTimeout = opts.IdleConnTimeout
	return &http.Client{Transport: t, Timeout: opts.HTTPTimeout}, t.CloseIdleConnections
}

// preflight makes sure the server answers and accepts the credentials, and that every run to
// wait for exists, so that a mistake fails at once instead of in a thousand workers.
func (f *fleet) preflight(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"password": f.opts.Password, "worker_info": map[string]string{"username": f.opts.Username}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.opts.ServerURL+"/api/request_version", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the server: %w", err)
	}
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	var m struct {
		Error   string `json:"error"`
		Version *int   `json:"version"`
	}
	if err := json.Unmarshal(reply, &m); err != nil || resp.StatusCode != http.StatusOK || m.Error != "" || m.Version == nil {
		msg := m.Error
		if msg == "" {
			msg = strings.TrimSpace(string(reply))
		}
		return fmt.Errorf("request_version as %s: %s: %s", f.opts.Username, resp.Status, msg)
	}
	for _, id := range f.opts.UntilFinished {
		if _, err := getRun(ctx, f.client, f.opts.ServerURL, id); err != nil {
			return err
		}
	}
	return nil
}

// launch creates and starts worker i, unless the fleet is stopping.
func (f *fleet) launch(ctx context.Context, wg *sync.WaitGroup, i int, role byte) bool {
	o := f.opts
	src := &worker.SimSource{Elo: o.Elo, DrawRatio: o.DrawRatio, GameTime: o.PairTime,
		Rand: rand.New(rand.NewPCG(o.Seed, uint64(i)+1)), SPSAOptimum: o.SPSAOptimum,
		SPSAEloPerStep: o.SPSAEloPerStep, TimeLossRate: o.TimeLossRate, CrashRate: o.CrashRate,
		FaultRand: rand.New(rand.NewPCG(o.Seed, uint64(i)+1<<33))}
	if role == 'q' {
		src.TimeLossRate, src.CrashRate, src.FailRate = o.BadTimeLossRate, o.BadCrashRate, o.BadFailRate
	}
	wctx, vanish := context.WithCancel(ctx)
	obs := &workerObserver{rec: f.rec, arrived: time.Now()}
	if role == 'v' {
		obs.vanish = vanish
	}
	client, rt := f.client, f.direct
	if role == 'b' {
		spoil := &spoiler{base: f.client.Transport, rec: f.rec, rand: rand.New(rand.NewPCG(o.Seed, uint64(i)+1<<32))}
		if rt != nil {
			rt = spoil
		} else {
			client = &http.Client{Timeout: f.client.Timeout, Transport: spoil}
		}
	}
	w, err := worker.New(worker.Config{
		ServerURL: o.ServerURL, Username: o.Username, Password: o.Password,
		Concurrency: o.Concurrency, UniqueKey: worker.NewUniqueKey(keyPrefix(i)),
		WorkerArch: "x86-64-avx2", ARCH: "x86-64-avx2", Uname: "Linux shoal-fleet",
		TimeScale: o.TimeScale, RetryDelay: o.RetryDelay, HTTPClient: client, RoundTripper: rt,
		Logger: o.Logger, Observer: obs,
		// The fleet's compression is the bench generator's cost, not the server's.
		PGNCompression: gzip.BestSpeed,
	}, src)
	if err != nil {
		vanish()
		f.rec.workerExited(err)
		return true
	}
	f.mu.Lock()
	if f.stopping {
		f.mu.Unlock()
		vanish()
		return false
	}
	f.started = append(f.started, w)
	wg.Add(1)
	f.mu.Unlock()
	f.rec.running.Add(1)
	go func() { // joined through wg
		defer wg.Done()
		defer vanish()
		err := w.Run(wctx)
		f.rec.running.Add(-1)
		obs.stopped()
		f.rec.workerExited(err)
	}()
	return true
}

// stopAll asks every started worker to finish its batch and quit, spread over Options.StopRamp
// unless ctx has ended or every worker has quit already (allDone), and stops the launcher. It is
// called once.
func (f *fleet) stopAll(ctx context.Context, allDone <-chan struct{}) {
	close(f.stop)
	f.mu.Lock()
	f.stopping = true
	started := f.started
	f.mu.Unlock()
	start := time.Now()
	for i, w := range started {
		if ramp := f.opts.StopRamp; ramp > 0 && ctx.Err() == nil {
			at := start.Add(time.Duration(float64(ramp) * float64(i) / float64(len(started))))
			timer := time.NewTimer(time.Until(at))
			select {
			case <-timer.C:
			case <-ctx.Done(): // interrupted: the rest stop at once
				timer.Stop()
			case <-allDone: // every worker has quit: nothing is left to spread
				timer.Stop()
				return
			}
		}
		w.Stop()
	}
}

// snapshot is how a fleet stands, for its progress line and its watch: every count is of the
// whole fleet, or of one process's share of a split fleet.
type snapshot struct {
	Started      int64 `json:"started"` // workers started
	Running      int64 `json:"running"` // workers whose Run has not returned
	Busy         int64 `json:"busy"`    // workers holding a task
	TasksStarted int64 `json:"tasks"`
	Games        int64 `json:"games"`
	TooBusy      int64 `json:"too_busy"`
	HTTPErrors   int64 `json:"http_errors"`
	Transport    int64 `json:"transport_errors"`
	AppErrors    int64 `json:"app_errors"`
	// Launched is whether every worker that will start has.
	Launched bool `json:"launched"`
}

// add sums two snapshots: Launched holds for the sum when it holds for both.
func (s snapshot) add(o snapshot) snapshot {
	return snapshot{Started: s.Started + o.Started, Running: s.Running + o.Running, Busy: s.Busy + o.Busy,
		TasksStarted: s.TasksStarted + o.TasksStarted, Games: s.Games + o.Games, TooBusy: s.TooBusy + o.TooBusy,
		HTTPErrors: s.HTTPErrors + o.HTTPErrors, Transport: s.Transport + o.Transport, AppErrors: s.AppErrors + o.AppErrors,
		Launched: s.Launched && o.Launched}
}

// snapshot is how this process's workers stand.
func (f *fleet) snapshot() snapshot {
	r := f.rec
	httpErrs, transport, app := r.errorsSoFar()
	s := snapshot{Running: r.running.Load(), Busy: r.busy.Load(), TasksStarted: r.tasksStarted.Load(),
		Games: r.games.Load(), TooBusy: r.tooBusy.Load(), HTTPErrors: httpErrs, Transport: transport, AppErrors: app}
	f.mu.Lock()
	s.Started = int64(len(f.started))
	launchDone := f.launchDone
	f.mu.Unlock()
	if launchDone != nil {
		select {
		case <-launchDone:
			s.Launched = true
		default:
		}
	}
	return s
}

// watch prints progress until it is time to stop, and says why; status says how the fleet
// stands.
func (f *fleet) watch(ctx context.Context, start time.Time, allDone <-chan struct{}, status func() snapshot) string {
	tick := time.NewTicker(f.opts.ProgressPeriod)
	defer tick.Stop()
	var deadline <-chan time.Time
	if f.opts.Duration > 0 {
		t := time.NewTimer(f.opts.Duration - time.Since(start))
		defer t.Stop()
		deadline = t.C
	}
	var poll <-chan time.Time
	if len(f.opts.UntilFinished) > 0 {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-deadline:
			return "duration"
		case <-allDone:
			return "workers exited"
		case <-tick.C:
			s := status()
			f.progress(time.Since(start), false, s)
			if s.Launched && s.Running == 0 {
				return "workers exited"
			}
		case <-poll:
			if f.runsFinished(ctx) {
				return "runs finished"
			}
		}
	}
}

// runsFinished reports whether every run of UntilFinished is finished. A run that cannot be
// read counts as not finished: the next poll tries again.
func (f *fleet) runsFinished(ctx context.Context) bool {
	for _, id := range f.opts.UntilFinished {
		rs, err := getRun(ctx, f.client, f.opts.ServerURL, id)
		if err != nil || !rs.Finished {
			return false
		}
	}
	return true
}

// progress writes one progress line of s; final ends the in-place line of a terminal.
func (f *fleet) progress(elapsed time.Duration, final bool, s snapshot) {
	w := f.opts.Progress
	if w == nil {
		return
	}
	f.mu.Lock()
	rate := 0.0
	if dt := (elapsed - f.progAt).Seconds(); dt > 0 {
		rate = float64(s.Games-f.progGames) / dt
	}
	f.progGames, f.progAt = s.Games, elapsed
	f.mu.Unlock()
	if final && elapsed > 0 {
		rate = float64(s.Games) / elapsed.Seconds()
	}
	line := fmt.Sprintf("[%5.0fs] workers %s/%s running, %s busy | tasks %s | games %s (%s/s) | too busy %s | errors: http %s, transport %s, app %s",
		elapsed.Seconds(), humanize.Comma(s.Running), humanize.Comma(s.Started), humanize.Comma(s.Busy),
		humanize.Comma(s.TasksStarted), humanize.Comma(s.Games), humanize.Comma(int64(rate+0.5)), humanize.Comma(s.TooBusy),
		humanize.Comma(s.HTTPErrors), humanize.Comma(s.Transport), humanize.Comma(s.AppErrors))
	if final {
		line = strings.Replace(line, "/s)", "/s overall)", 1)
	}
	if f.opts.Terminal {
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(w, "\r\033[K%s%s", line, end)
		return
	}
	fmt.Fprintln(w, line)
}
