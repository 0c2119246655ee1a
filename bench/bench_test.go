package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestNewPlan(t *testing.T) {
	base := Settings{Scenarios: []string{"steady"}, Out: "out", TimeScale: 10, Exe: "/bin/shoal"}
	tests := []struct {
		name   string
		change func(*Settings)
		check  func(*testing.T, plan)
	}{
		{"the issue's sizes by default", func(*Settings) {}, func(t *testing.T, p plan) {
			if p.Workers != 10000 || p.Runs != 50 || p.duration != 5*time.Minute || !slices.Equal(p.StormSizes, []int{500, 5000, 20000}) ||
				p.ceilingDuration != 10*time.Second || p.CeilingClients != 64 || p.DurabilityRounds != 3 || p.durabilityLeg != time.Minute {
				t.Errorf("defaults: %+v", p)
			}
			if p.FleetProcesses != defaultFleetProcesses {
				t.Errorf("fleet processes %d, want %d", p.FleetProcesses, defaultFleetProcesses)
			}
			if p.Duration != "5m0s" || p.CeilingDuration != "10s" || p.DurabilityLeg != "1m0s" || p.Database != "embedded" {
				t.Errorf("the report's durations and database: %q %q %q %q", p.Duration, p.CeilingDuration, p.DurabilityLeg, p.Database)
			}
		}},
		{"--quick shrinks every size, the durability leg to the steady duration", func(s *Settings) { s.Quick = true }, func(t *testing.T, p plan) {
			if p.Workers != 500 || p.Runs != 5 || p.duration != 30*time.Second || !slices.Equal(p.StormSizes, []int{500}) ||
				p.ceilingDuration != 4*time.Second || p.DurabilityRounds != 1 || p.durabilityLeg != 30*time.Second {
				t.Errorf("quick: %+v", p)
			}
		}},
		{"flags win over --quick", func(s *Settings) {
			s.Quick, s.Workers, s.Runs, s.Duration, s.StormSizes = true, 60, 2, 20*time.Second, []int{60}
			s.DurabilityRounds, s.DurabilityLeg = 2, 45*time.Second
		}, func(t *testing.T, p plan) {
			if p.Workers != 60 || p.Runs != 2 || p.duration != 20*time.Second || !slices.Equal(p.StormSizes, []int{60}) ||
				p.DurabilityRounds != 2 || p.durabilityLeg != 45*time.Second {
				t.Errorf("overrides: %+v", p)
			}
		}},
		{"one fleet process when asked", func(s *Settings) { s.FleetProcesses = 1 }, func(t *testing.T, p plan) {
			if p.FleetProcesses != 1 {
				t.Errorf("fleet processes %d, want 1", p.FleetProcesses)
			}
		}},
		{"quick's durability leg follows a --duration given", func(s *Settings) { s.Quick, s.Duration = true, 20*time.Second }, func(t *testing.T, p plan) {
			if p.durabilityLeg != 20*time.Second {
				t.Errorf("durability leg %v, want the steady duration", p.durabilityLeg)
			}
		}},
		{"scenarios run once each, in the order given", func(s *Settings) { s.Scenarios = []string{"storm", "steady", "storm", "durability"} }, func(t *testing.T, p plan) {
			if !slices.Equal(p.Scenarios, []string{"storm", "steady", "durability"}) {
				t.Errorf("scenarios %v", p.Scenarios)
			}
		}},
		{"MongoDB says so in the report", func(s *Settings) { s.MongoURI = "mongodb://db:27017" }, func(t *testing.T, p plan) {
			if p.Database != "mongodb (fresh database per scenario)" || p.mongoURI != "mongodb://db:27017" {
				t.Errorf("database %q, uri %q", p.Database, p.mongoURI)
			}
		}},
		{"profiles go under the output directory by default", func(*Settings) {}, func(t *testing.T, p plan) {
			if p.profiles != filepath.Join("out", "profiles") {
				t.Errorf("profiles %q", p.profiles)
			}
		}},
		{"profiles off takes none", func(s *Settings) { s.Profiles = "off" }, func(t *testing.T, p plan) {
			if p.profiles != "" {
				t.Errorf("profiles %q, want none", p.profiles)
			}
		}},
		{"the servers' binary and directories come from the settings", func(s *Settings) { s.Keep = true }, func(t *testing.T, p plan) {
			if p.exe != "/bin/shoal" || p.serverExe != "/bin/shoal" || !p.keep {
				t.Errorf("exe %q, server exe %q, keep %v", p.exe, p.serverExe, p.keep)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.change(&s)
			p, err := newPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestNewPlanErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Settings)
		want   string
	}{
		{"negative workers", func(s *Settings) { s.Workers = -1 }, "--workers, --runs and --duration must be positive"},
		{"negative duration", func(s *Settings) { s.Duration = -time.Second }, "--workers, --runs and --duration must be positive"},
		{"a time scale under 1", func(s *Settings) { s.TimeScale = 0.5 }, "--time-scale must be at least 1"},
		{"a time scale that is not a number", func(s *Settings) { s.TimeScale = math.NaN() }, "--time-scale must be at least 1"},
		{"an unknown scenario", func(s *Settings) { s.Scenarios = []string{"steady", "nope"} }, `unknown scenario "nope" (want steady,storm,ceiling,critical-section,durability,capacity,reconnect)`},
		{"no scenario", func(s *Settings) { s.Scenarios = nil }, "no scenario given"},
		{"more fleet processes than workers", func(s *Settings) { s.Workers, s.FleetProcesses = 3, 4 }, "--fleet-processes 4: want 1 to the steady fleet's 3 workers"},
		{"negative fleet processes", func(s *Settings) { s.FleetProcesses = -1 }, "--fleet-processes -1"},
	}
	for _, tc := range tests {
		s := Settings{Scenarios: []string{"steady"}, Out: "out", TimeScale: 10}
		tc.change(&s)
		if _, err := newPlan(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// A server's time knobs follow the time scale it runs at, by config.Config.Compressed's rule.
func TestServerTimesAt(t *testing.T) {
	tests := []struct {
		scale float64
		want  ServerTimes
	}{
		{10, ServerTimes{12 * time.Second, 36 * time.Second, 6 * time.Second, 12 * time.Second}},
		{100, ServerTimes{1200 * time.Millisecond, 5 * time.Second, 600 * time.Millisecond, 1200 * time.Millisecond}},
		{1000, ServerTimes{120 * time.Millisecond, 5 * time.Second, 500 * time.Millisecond, 120 * time.Millisecond}},
	}
	for _, tc := range tests {
		if got := ServerTimesAt(tc.scale); got != tc.want {
			t.Errorf("ServerTimesAt(%g) = %+v, want %+v", tc.scale, got, tc.want)
		}
	}
}

func TestDefaultScenariosLeaveOutDurability(t *testing.T) {
	got := DefaultScenarios()
	if !slices.Equal(got, []string{"steady", "storm", "ceiling", "critical-section"}) {
		t.Errorf("DefaultScenarios = %v", got)
	}
	got[0] = "changed"
	if DefaultScenarios()[0] != "steady" {
		t.Error("DefaultScenarios hands out the package's own slice")
	}
}

func TestReportOrder(t *testing.T) {
	rep := &benchReport{Scenarios: map[string]*scenarioReport{}}
	for _, name := range []string{"durability-10-journal-off", "durability-2-journal-on", "durability-1-journal-off", "steady"} {
		rep.Scenarios[name] = &scenarioReport{}
	}
	got := reportOrder(rep)
	want := append(slices.Clone(reportedScenarios), "durability-1-journal-off", "durability-2-journal-on", "durability-10-journal-off")
	if !slices.Equal(got, want) {
		t.Errorf("reportOrder = %v, want %v", got, want)
	}
	if reportedScenarios[0] != yardstickScenario {
		t.Errorf("the yardstick, which every ratio divides by, is not reported first: %v", reportedScenarios)
	}
	if i := slices.Index(reportedScenarios, baselineScenario); i < 0 || reportedScenarios[i+1] != "steady" {
		t.Errorf("the baseline's steady is not reported just before steady: %v", reportedScenarios)
	}
}

func TestFiguresAndTargets(t *testing.T) {
	var sc scenarioReport
	sc.figure("nan", math.NaN(), "ms")
	sc.figure("inf", math.Inf(1), "ms")
	sc.figure("p99", 12.5, "ms")
	if v, ok := sc.value("nan"); !ok || v != 0 {
		t.Errorf("a NaN figure is %v (%v), want 0: JSON has no NaN", v, ok)
	}
	if v, ok := sc.value("inf"); !ok || v != 0 {
		t.Errorf("an infinite figure is %v (%v), want 0", v, ok)
	}
	if v, ok := sc.value("p99"); !ok || v != 12.5 {
		t.Errorf("value(p99) = %v, %v", v, ok)
	}
	if _, ok := sc.value("missing"); ok {
		t.Error("value of a missing figure is found")
	}

	sc.target("met", new(12.5), "ms", "< 25", below(25))
	sc.target("missed", new(30.0), "ms", "< 25", below(25))
	sc.target("at the limit", new(0.5), "ratio", ">= 0.5", atLeast(0.5))
	sc.target("not measured", nil, "ms", "< 25", below(25))
	sc.target("NaN", new(math.NaN()), "ms", "< 25", func(float64) bool { return true })
	want := []struct {
		met, measured bool
	}{{true, true}, {false, true}, {true, true}, {false, false}, {false, false}}
	for i, w := range want {
		tg := sc.Targets[i]
		if tg.Met != w.met || (tg.Figure != nil) != w.measured {
			t.Errorf("target %q: met %v, figure %v; want met %v, measured %v", tg.Name, tg.Met, tg.Figure, w.met, w.measured)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP shoal_scheduler_tasks_assigned_total Tasks handed out.
# TYPE shoal_scheduler_tasks_assigned_total counter
shoal_scheduler_tasks_assigned_total 42

shoal_scheduler_tasks_reclaimed_total{reason="dead"} 3
shoal_scheduler_tasks_reclaimed_total{reason="worker gone"} 1.5e+01
shoal_http_request_duration_seconds_bucket{route="/api/beat",le="+Inf"} 7
not_a_number{a="b"} x
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"shoal_scheduler_tasks_assigned_total":                                    42,
		`shoal_scheduler_tasks_reclaimed_total{reason="dead"}`:                    3,
		`shoal_scheduler_tasks_reclaimed_total{reason="worker gone"}`:             15,
		`shoal_http_request_duration_seconds_bucket{route="/api/beat",le="+Inf"}`: 7,
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("ParseMetrics = %v, want %v", m, want)
	}
	if got := metricSum(m, "shoal_scheduler_tasks_reclaimed_total"); got != 18 {
		t.Errorf("metricSum of every reason = %v, want 18", got)
	}
	if got := metricSum(m, "shoal_scheduler_tasks_reclaimed_total", `reason="dead"`); got != 3 {
		t.Errorf("metricSum of dead = %v, want 3", got)
	}
	if got := metricSum(m, "shoal_scheduler_tasks"); got != 0 {
		t.Errorf("metricSum of a prefix of a name = %v, want 0: names match whole", got)
	}
}

// histogram is the cumulative buckets of one series of shoal_http_request_duration_seconds, as
// /metrics shows them: counts by upper bound.
func histogram(m map[string]float64, route string, counts map[string]float64) {
	for le, n := range counts {
		m[`shoal_http_request_duration_seconds_bucket{code="200",route="`+route+`",le="`+le+`"}`] = n
	}
}

func TestHistQuantile(t *testing.T) {
	from, until := map[string]float64{}, map[string]float64{}
	// Before the window: 100 fast beats, which the quantiles must leave out.
	histogram(from, "/api/beat", map[string]float64{"0.005": 100, "0.01": 100, "0.05": 100, "+Inf": 100})
	// In the window: 100 more beats, 90 under 5 ms, 9 under 10 ms, 1 under 50 ms.
	histogram(until, "/api/beat", map[string]float64{"0.005": 190, "0.01": 199, "0.05": 200, "+Inf": 200})
	// Another route, whose slow requests must not count for beat.
	histogram(until, "/api/update_task", map[string]float64{"0.005": 0, "0.01": 0, "0.05": 0, "+Inf": 50})
	tests := []struct {
		name   string
		q      float64
		labels []string
		want   float64
		ok     bool
	}{
		{"the median beat", 0.5, []string{`route="/api/beat"`}, 0.005, true},
		{"p99 of beats", 0.99, []string{`route="/api/beat"`}, 0.01, true},
		{"the slowest beat", 1, []string{`route="/api/beat"`}, 0.05, true},
		{"a quantile in the +Inf bucket is unknown", 0.5, []string{`route="/api/update_task"`}, math.Inf(1), false},
		{"no requests, no quantile", 0.5, []string{`route="/api/request_task"`}, 0, false},
		{"every route together", 0.5, nil, 0.005, true},
	}
	for _, tc := range tests {
		got, ok := histQuantile(from, until, "shoal_http_request_duration_seconds", tc.q, tc.labels...)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: histQuantile = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSeriesMatches(t *testing.T) {
	tests := []struct {
		series, name string
		labels       []string
		want         bool
	}{
		{`m{a="1",b="2"}`, "m", []string{`a="1"`, `b="2"`}, true},
		{`m{a="1"}`, "m", []string{`b="2"`}, false},
		{`m_total{a="1"}`, "m", nil, false},
		{"m", "m", nil, true},
	}
	for _, tc := range tests {
		if got := seriesMatches(tc.series, tc.name, tc.labels); got != tc.want {
			t.Errorf("seriesMatches(%s, %s, %v) = %v", tc.series, tc.name, tc.labels, got)
		}
	}
}

func TestBenchLine(t *testing.T) {
	tests := []struct {
		line, name, ns string
	}{
		{"BenchmarkRequestTaskCriticalSection/runs=100-8         	   20000	     61234 ns/op	    1024 B/op", "BenchmarkRequestTaskCriticalSection/runs=100", "61234"},
		{"BenchmarkUpdateTask 	 1000	 1234.5 ns/op", "BenchmarkUpdateTask", "1234.5"},
		{"ok  	github.com/shoal-chess/shoal/scheduler	3.2s", "", ""},
	}
	for _, tc := range tests {
		m := benchLine.FindStringSubmatch(tc.line)
		switch {
		case tc.name == "" && m != nil:
			t.Errorf("%q read as a benchmark: %v", tc.line, m)
		case tc.name != "" && (m == nil || m[1] != tc.name || m[2] != tc.ns):
			t.Errorf("%q read as %v, want %s at %s ns/op", tc.line, m, tc.name, tc.ns)
		}
	}
}

func TestEndpointFiguresInNameOrder(t *testing.T) {
	var sc scenarioReport
	endpointFigures(&sc, "steady: ", map[string]fleet.EndpointReport{
		"update_task": {Requests: 20, P50MS: 2, P99MS: 9, MaxMS: 12},
		"beat":        {Requests: 100, P50MS: 1, P99MS: 4, MaxMS: 5},
	}, 10)
	var names []string
	for _, f := range sc.Figures {
		names = append(names, f.Name)
	}
	want := []string{"steady: beat rate", "steady: beat p50", "steady: beat p99", "steady: beat max",
		"steady: update_task rate", "steady: update_task p50", "steady: update_task p99", "steady: update_task max"}
	if !slices.Equal(names, want) {
		t.Errorf("figures %v, want %v", names, want)
	}
	if v, _ := sc.value("steady: beat rate"); v != 10 {
		t.Errorf("beat rate %v, want 100 requests over 10 s", v)
	}
}

func TestFleetFigures(t *testing.T) {
	var sc scenarioReport
	rep := &fleet.Report{ElapsedSeconds: 10, Requests: 500, TooBusy: 3, TransportErrors: 1, GamesReported: 1000,
		ExactlyOnce: true, HTTPErrors: map[string]int64{"500": 2, "503": 1, "400": 7},
		Runs: []fleet.RunReport{{ServerGames: 600, FleetGames: 598}, {ServerGames: 400, FleetGames: 400}}}
	if fiveXX := fleetFigures(&sc, rep); fiveXX != 3 {
		t.Errorf("5xx = %v, want 3 (the 400s are not)", fiveXX)
	}
	for name, want := range map[string]float64{"requests per second": 50, "too-busy replies": 3, "5xx replies": 3,
		"exactly-once check passed": 1, "server games minus fleet-accepted games": 2} {
		if v, ok := sc.value(name); !ok || v != want {
			t.Errorf("%s = %v (%v), want %v", name, v, ok, want)
		}
	}
}

func TestExplainUnmet(t *testing.T) {
	steady := func(serverBeat float64) *scenarioReport {
		sc := &scenarioReport{}
		sc.figure("steady: server-side beat p99 (bucket upper bound)", serverBeat, "ms")
		sc.figure("steady: server CPU per wall second", 0.8, "cores")
		sc.figure("steady: run write mean duration", 12, "ms")
		sc.figure("steady: run writes (run cache flushes)", 300, "writes")
		sc.target("beat p99 (steady window)", new(40.0), "ms", "< 25", below(25))
		sc.target("5xx replies", new(0.0), "replies", "= 0", below(0.5))
		return sc
	}
	set := plan{Workers: 500}

	sc := steady(10)
	sc.explainUnmet(set)
	if len(sc.Limits) != 1 {
		t.Fatalf("limits %q, want one: the met target has none", sc.Limits)
	}
	for _, want := range []string{"the fleet saw 40 ms", "no more than 10 ms", "the fleet's 500 workers", "the server used 0.80 cores", "300 writes of 12 ms"} {
		if !strings.Contains(sc.Limits[0], want) {
			t.Errorf("a fast handler's limit lacks %q:\n%s", want, sc.Limits[0])
		}
	}

	sc = steady(50)
	sc.explainUnmet(set)
	if len(sc.Limits) != 1 || !strings.Contains(sc.Limits[0], "the handler itself is over the target") {
		t.Errorf("a slow handler's limit: %q", sc.Limits)
	}

	sc = &scenarioReport{}
	sc.target("server resident memory (peak, steady window)", new(2048.0), "MiB", "< 1024", below(1024))
	sc.explainUnmet(set)
	if len(sc.Limits) != 1 || sc.Limits[0] != "server resident memory (peak, steady window): see the CPU profiles below." {
		t.Errorf("another target's limit: %q", sc.Limits)
	}

	// Allocations over the target are set beside what the yardstick allocated in the same run.
	sc = &scenarioReport{}
	sc.target(allocFigure, new(4200.0), "bytes", "<= 3000", atMost(allocLimitBytes))
	set.bare = &bareYardstick{cpuUS: 30, allocB: 7500}
	sc.explainUnmet(set)
	if len(sc.Limits) != 1 || !strings.Contains(sc.Limits[0], "allocated 7500 B a request in this run (2.50x the target)") {
		t.Errorf("the allocation target's limit: %q", sc.Limits)
	}
}

func TestExplainStorm(t *testing.T) {
	sc := &scenarioReport{}
	sc.figure("storm 500: server-side request_task p99 (bucket upper bound)", 25, "ms")
	sc.figure("storm 500: server CPU per wall second over the arrival", 0.9, "cores")
	sc.figure("storm 500: fleet CPU per wall second over the arrival", 0.7, "cores")
	sc.figure("storm 500: arrival (until 99 % were given a task)", 2.5, "s")
	sc.target("storm 500: request_task p99", new(400.0), "ms", "< 100", below(100))
	sc.explainUnmet(plan{})
	if len(sc.Limits) != 1 {
		t.Fatalf("limits %q", sc.Limits)
	}
	for _, want := range []string{"the fleet saw 400 ms", "no more than 25 ms", "the rest passed before the handler",
		"Over the 2.5 s the arrival took, the server used 0.90 of its core and the fleet 0.70 of its own"} {
		if !strings.Contains(sc.Limits[0], want) {
			t.Errorf("the storm's limit lacks %q:\n%s", want, sc.Limits[0])
		}
	}
}

func TestStormResultFigures(t *testing.T) {
	r := &stormResult{workers: 100, cpu: 3, arrival: 2 * time.Second, serverCores: 0.5, fleetCores: 0.25,
		serverP50MS: 5, serverP99MS: 50, rep: &fleet.Report{FirstTaskP99S: 1.5, FirstTaskP50S: 0.5, TooBusy: 50,
			TasksStarted: 100, ExactlyOnce: true, Endpoints: map[string]fleet.EndpointReport{"request_task": {P50MS: 8, P99MS: 80}}}}
	if got := r.tooBusyPerWorker(); got != 0.5 {
		t.Errorf("too-busy per worker %v, want 0.5", got)
	}
	var sc scenarioReport
	r.figures(&sc, "storm 100")
	for name, want := range map[string]float64{
		"storm 100: time until 99 % of the workers hold a task":        1.5,
		"storm 100: request_task p99":                                  80,
		"storm 100: server-side request_task p99 (bucket upper bound)": 50,
		"storm 100: server CPU per wall second over the arrival":       0.5,
		"storm 100: exactly-once check passed":                         1,
	} {
		if v, ok := sc.value(name); !ok || v != want {
			t.Errorf("%s = %v (%v), want %v", name, v, ok, want)
		}
	}
	// A storm whose workers did not all get a task says how many did not.
	r.rep.FirstTaskP99S, r.rep.WorkersUntasked = -1, 7
	sc = scenarioReport{}
	r.figures(&sc, "storm 100")
	if v, ok := sc.value("storm 100: workers without a task after the storm's limit (more than 1 %)"); !ok || v != 7 {
		t.Errorf("untasked workers %v (%v), want 7", v, ok)
	}
	if _, ok := sc.value("storm 100: time until 99 % of the workers hold a task"); ok {
		t.Error("a storm that never reached 99 % reports a time for it")
	}
}

func TestReadProcOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	u, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUSeconds < 0 || u.RSSMiB <= 0 || u.HWMMiB < u.RSSMiB {
		t.Errorf("readProc of this process: %+v", u)
	}
	if _, err := readProc(-1); err == nil {
		t.Error("readProc of no process: no error")
	}
}

func TestModuleRootIsShoals(t *testing.T) {
	root := moduleRoot()
	if root == "" {
		t.Fatal("moduleRoot found no Shoal source tree above the test's directory")
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "bench.go")); err != nil {
		t.Errorf("moduleRoot = %s, which holds no bench/bench.go: %v", root, err)
	}
}

// goldenReport is a report with every kind of section: a baseline, a skipped scenario, an
// error, a missed target and its limit, durability legs, and a profile.
func goldenReport() *benchReport {
	fig := func(v float64) *float64 { return &v }
	return &benchReport{
		Started: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), Elapsed: 321, Commit: "abc1234", Version: "v1.2.3",
		Machine: machineInfo{CPU: "Test CPU @ 3.0GHz", Cores: 2, MemoryMiB: 4096, OS: "linux/amd64", Go: "go1.26"},
		Settings: plan{Scenarios: []string{"steady", "critical-section", "durability"}, Quick: true, Database: "embedded",
			TimeScale: 10, Workers: 500, Runs: 5, Duration: "30s", StormSizes: []int{500}, CeilingDuration: "4s",
			CeilingClients: 64, Baseline: "/tmp/shoal-baseline", Pinning: "server on CPU 0, fleet on CPUs 1-1",
			FileLimit: "open-file limit 4096", DurabilityRounds: 1, DurabilityLeg: "30s"},
		Scenarios: map[string]*scenarioReport{
			"steady": {
				Figures: []benchFigure{{"beat p99", 31.25, "ms"}, {"server CPU", 12, "s"}},
				Targets: []benchTarget{{"beat p99 (steady window)", fig(31.25), "ms", "< 25", false},
					{"5xx replies", fig(0), "replies", "= 0", true}},
				Limits: []string{"beat p99 (steady window): see the CPU profiles below."},
				Profile: &profileSummary{CPUFile: "/tmp/profiles/steady-cpu.pprof", Seconds: 10, CPUSamples: 7.5,
					Top: []profileLine{{Function: "net/http.(*conn).serve", FlatPct: 0.5, CumPct: 80, CumSeconds: 6}}},
				FleetProfile: &profileSummary{Seconds: 10, Error: "profile: connection refused"},
			},
			baselineScenario:           {Error: "baseline: shoal serve exited before it was ready\nits log"},
			"critical-section":         {Skipped: "skipped: go is not on PATH", Targets: []benchTarget{{"request_task critical section at 100 runs (mean ns/op)", nil, "µs", "< 100", false}}},
			"durability":               {Figures: []benchFigure{{"ratio on / off: update_task p99 (median of the rounds)", 1.2, "x"}}},
			"durability-2-journal-on":  {Figures: []benchFigure{{"steady: update_task p99", 6, "ms"}}},
			"durability-1-journal-off": {Figures: []benchFigure{{"steady: update_task p99", 5, "ms"}}},
		},
	}
}

func TestBenchMarkdownGolden(t *testing.T) {
	got := benchMarkdown(goldenReport())
	golden := filepath.Join("testdata", "report.md")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("report.md differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

func TestWriteBenchReport(t *testing.T) {
	dir := t.TempDir()
	if err := writeBenchReport(dir, goldenReport()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"started": "2025-03-01T12:00:00Z"`, `"steady_workers": 500`, `"storm_sizes": [`,
		`"figure": null`, `"met": false`, `"top_cumulative": [`, `"baseline": "/tmp/shoal-baseline"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("report.json lacks %s:\n%s", want, data)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil || string(md) != benchMarkdown(goldenReport()) {
		t.Errorf("report.md is not benchMarkdown's: %v", err)
	}
}

// The steady ratios to a baseline are the geometric mean of two pairs run in opposite orders,
// so that a factor that comes with a leg's place in the run cancels out.
func TestPairedRatiosCancelTheOrder(t *testing.T) {
	leg := func(beatP99, cpu float64) *scenarioReport {
		sc := &scenarioReport{}
		sc.figure("steady: beat p99", beatP99, "ms")
		sc.figure("steady: server CPU per wall second", cpu, "cores")
		return sc
	}
	// The same build in all four legs, the second of each pair twice as slow.
	base1, this1, this2, base2 := leg(100, 0.5), leg(200, 0.5), leg(100, 0.5), leg(200, 0.5)
	pairedRatios(this1, base1, this2, base2)
	if got, _ := this1.value("ratio to the baseline: beat p99"); math.Abs(got-1) > 1e-9 {
		t.Errorf("A/A with an order factor of 2: beat p99 ratio %v, want 1", got)
	}
	// A build twice as fast, with the same order factor.
	base1, this1, this2, base2 = leg(100, 0.5), leg(100, 0.25), leg(50, 0.25), leg(200, 0.5)
	pairedRatios(this1, base1, this2, base2)
	if got, _ := this1.value("ratio to the baseline: beat p99"); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("a build twice as fast: beat p99 ratio %v, want 0.5", got)
	}
	if got, _ := this1.value("ratio to the baseline: server CPU per wall second"); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("half the CPU: ratio %v, want 0.5", got)
	}
	if _, ok := this1.value("ratio to the baseline: update_task p99"); ok {
		t.Error("a ratio of a figure the legs lack")
	}
}

// report.json puts each figure on a line of its own and says what the indented encoding says;
// a leg's profiles list their top functions only, the scenario's their whole summary.
func TestWriteBenchReportIsSmall(t *testing.T) {
	rep := goldenReport()
	var top []profileLine
	for i := range profileTop {
		top = append(top, profileLine{Function: fmt.Sprintf("f%d", i), CumPct: float64(profileTop - i)})
	}
	leg := &scenarioReport{Figures: []benchFigure{{Name: "beat p99", Value: 1.5, Unit: "ms"}},
		Profile: &profileSummary{Top: top}, FleetProfile: &profileSummary{Top: top}}
	rep.Scenarios["durability-1-journal-off"] = leg
	rep.Scenarios["steady"].Profile = &profileSummary{Top: top}
	dir := t.TempDir()
	if err := writeBenchReport(dir, rep); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*\{"name": "beat p99", "value": 1.5, "unit": "ms"\},?$`).Match(data) {
		t.Errorf("a figure is not a line of its own:\n%s", data)
	}
	var got, want map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	indented, _ := json.MarshalIndent(rep.withShortLegProfiles(), "", "  ")
	if err := json.Unmarshal(indented, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("report.json does not say what the indented report says")
	}
	if n := len(rep.Scenarios["durability-1-journal-off"].Profile.Top); n != profileTop {
		t.Errorf("writing the report cut the report's own leg profile to %d functions", n)
	}
	short := rep.withShortLegProfiles()
	if n, m := len(short.Scenarios["durability-1-journal-off"].Profile.Top), len(short.Scenarios["durability-1-journal-off"].FleetProfile.Top); n != legProfileTop || m != legProfileTop {
		t.Errorf("a leg's profiles list %d and %d functions, want %d", n, m, legProfileTop)
	}
	if n := len(short.Scenarios["steady"].Profile.Top); n != profileTop {
		t.Errorf("steady's profile lists %d functions, want all %d", n, profileTop)
	}
}
