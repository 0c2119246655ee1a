//go:build !race

// The bench end to end: the real shoal-bench runs the real shoal next to it as the server and
// drives it with a fleet, in --quick sizes. It takes about a minute, so it runs in make test's race-free pass.

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestE2EBenchQuickWritesReport(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	// The product binary is its own baseline: the mechanism of --baseline is what is checked here.
	cmd := exec.Command(bin, "bench", "--quick", "--scenarios", "steady,storm,ceiling", "--out", out, "--duration", "20s",
		"--storm-workers", "60", "--baseline", filepath.Join(filepath.Dir(bin), "shoal"))
	cmd.Dir = t.TempDir()
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("shoal-bench bench: %v\n%s", err, text)
	}
	t.Logf("shoal-bench bench:\n%s", text)

	rep := readBenchReport(t, out)
	if rep.Machine.Cores < 1 || rep.Commit == "" {
		t.Errorf("machine or commit missing: %+v %q", rep.Machine, rep.Commit)
	}
	// Steady against the baseline runs four legs, alternating: baseline, this build, this
	// build again, baseline again; its own leg is judged against the baseline's too, where its
	// window had the call (a 20 s run's window has no request_task). Steady runs before the
	// ceiling, so the bare handler is measured alone first, as the yardstick.
	steadyTargets := 4
	for _, call := range []string{"beat", "update_task", "request_task"} {
		if _, ok := rep.Scenarios["steady"].figures()["ratio to the baseline: "+call+" p99"]; ok {
			steadyTargets++
		}
	}
	want := map[string]int{"yardstick": 0, "steady": steadyTargets, "storm": 4, "ceiling": 2, "steady-baseline": 4, "steady-again": 4, "steady-baseline-again": 4}
	if len(rep.Scenarios) != len(want) {
		t.Errorf("scenarios %v, want the yardstick, steady's four legs, storm and ceiling", rep.Scenarios)
	}
	if steadyTargets < 6 {
		t.Errorf("steady judged %d calls against the baseline, want beat and update_task at least", steadyTargets-4)
	}
	if y := rep.Scenarios["yardstick"].figures(); y["bare net/http CPU per request"] <= 0 {
		t.Errorf("the yardstick has no CPU per request: %v", y)
	}
	for name, n := range want {
		sc, ok := rep.Scenarios[name]
		if !ok {
			t.Errorf("scenario %s missing", name)
			continue
		}
		if sc.Error != "" {
			t.Errorf("%s: %s", name, sc.Error)
		}
		if len(sc.Targets) != n {
			t.Errorf("%s: %d targets, want %d", name, len(sc.Targets), n)
		}
		for _, tg := range sc.Targets {
			for _, key := range []string{"name", "figure", "unit", "target", "met"} {
				if _, ok := tg[key]; !ok {
					t.Errorf("%s: target %s has no %q", name, tg["name"], key)
				}
			}
			var met any
			if err := json.Unmarshal(tg["met"], &met); err != nil {
				t.Errorf("%s: target %s: met: %v", name, tg["name"], err)
			}
			if _, ok := met.(bool); !ok {
				t.Errorf("%s: target %s: met is %s, want a boolean", name, tg["name"], tg["met"])
			}
			if string(tg["figure"]) == "null" {
				t.Errorf("%s: target %s was not measured", name, tg["name"])
			}
		}
	}
	// The storm, against the baseline and this build: every worker got a task, and the
	// waits, too-busy replies and ratios are reported.
	storm := rep.Scenarios["storm"].figures()
	// Against the baseline each size runs four times, alternating.
	for _, label := range []string{"storm 60", "storm 60 baseline", "storm 60 again", "storm 60 baseline again"} {
		if v, ok := storm[label+": time until 99 % of the workers hold a task"]; !ok || v <= 0 {
			t.Errorf("%s: time until 99 %% hold a task %v (reported %v), want a positive time", label, v, ok)
		}
		if v := storm[label+": tasks handed out"]; v < 60 {
			t.Errorf("%s: %v tasks handed out to 60 workers", label, v)
		}
		if v := storm[label+": exactly-once check passed"]; v != 1 {
			t.Errorf("%s: exactly-once check %v", label, v)
		}
		// Where the latency went: the server's own view, and how busy each side was.
		for _, f := range []string{"server-side request_task p99 (bucket upper bound)",
			"server CPU per wall second over the arrival", "fleet CPU per wall second over the arrival"} {
			if v := storm[label+": "+f]; v <= 0 {
				t.Errorf("%s: %s = %v, want positive", label, f, v)
			}
		}
	}
	if _, ok := storm["storm 60: ratio to the baseline: tasks handed out"]; !ok {
		t.Errorf("storm: no ratio to the baseline in %v", storm)
	}
	figures := rep.Scenarios["steady"].figures()
	for _, name := range []string{"beat p99", "server CPU", "server resident memory (peak over the whole run, VmHWM)",
		"steady: server resident memory (peak, sampled every 0.5 s)", "tasks assigned",
		"ratio to the baseline: beat p99", "ratio to the baseline: update_task p99", "ratio to the baseline: server CPU per wall second",
		"server CPU per request", "server CPU per request: the embedded database's part", "fleet CPU per request (the bench process and its fleet processes)",
		"steady: server CPU per request"} {
		if figures[name] <= 0 {
			t.Errorf("steady: figure %q = %v, want positive", name, figures[name])
		}
	}
	// The ceiling's CPU per request, of Shoal's beat and of the bare handler in its own process.
	ceiling := rep.Scenarios["ceiling"].figures()
	for _, name := range []string{"bare net/http CPU per request", "shoal CPU per beat", "shoal CPU per beat / bare CPU per request"} {
		if ceiling[name] <= 0 {
			t.Errorf("ceiling: figure %q = %v, want positive", name, ceiling[name])
		}
	}
	// Where a target is missed the report names what limits it: the server's CPU profile.
	for name, p := range map[string]*benchProfileJSON{"steady": rep.Scenarios["steady"].Profile,
		"ceiling": rep.Scenarios["ceiling"].Profile, "steady's fleet": rep.Scenarios["steady"].FleetProfile,
		"storm's fleet": rep.Scenarios["storm"].FleetProfile} {
		if p == nil || len(p.Top) == 0 {
			t.Errorf("%s: no CPU profile summary: %+v", name, p)
			continue
		}
		if _, err := os.Stat(p.CPUFile); err != nil {
			t.Errorf("%s: profile file: %v", name, err)
		}
		if p.Top[0].CumPct <= 0 || p.Top[0].CumPct > 100 {
			t.Errorf("%s: top function %s at %v %%", name, p.Top[0].Function, p.Top[0].CumPct)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil || !strings.Contains(string(md), "## steady") || !strings.Contains(string(md), "## ceiling") ||
		!strings.Contains(string(md), "## steady-baseline") {
		t.Errorf("report.md: %v\n%s", err, md)
	}
}

// benchReportJSON is what the tests read of report.json.
type benchReportJSON struct {
	Machine struct {
		Cores int `json:"cores"`
	} `json:"machine"`
	Commit    string                       `json:"commit"`
	Scenarios map[string]benchScenarioJSON `json:"scenarios"`
}

// benchScenarioJSON is one scenario of report.json. Its targets are kept as written, for a test
// of their shape.
type benchScenarioJSON struct {
	Error   string `json:"error"`
	Figures []struct {
		Name  string  `json:"name"`
		Value float64 `json:"value"`
	} `json:"figures"`
	Targets      []map[string]json.RawMessage `json:"targets"`
	Profile      *benchProfileJSON            `json:"profile"`
	FleetProfile *benchProfileJSON            `json:"fleet_profile"`
}

// figures are the scenario's figures by name.
func (sc benchScenarioJSON) figures() map[string]float64 {
	m := make(map[string]float64, len(sc.Figures))
	for _, f := range sc.Figures {
		m[f.Name] = f.Value
	}
	return m
}

// target is the scenario's target named name: its figure (nil if not measured) and whether it
// was met; found is false when there is none.
func (sc benchScenarioJSON) target(name string) (figure *float64, met, found bool) {
	for _, tg := range sc.Targets {
		var n string
		if json.Unmarshal(tg["name"], &n) == nil && n == name {
			_ = json.Unmarshal(tg["figure"], &figure)
			_ = json.Unmarshal(tg["met"], &met)
			return figure, met, true
		}
	}
	return nil, false, false
}

// readBenchReport reads report.json from the bench's output directory.
func readBenchReport(t *testing.T, out string) benchReportJSON {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReportJSON
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report.json: %v\n%s", err, data)
	}
	return rep
}

// benchProfileJSON is a profile summary of report.json.
type benchProfileJSON struct {
	CPUFile string `json:"cpu_file"`
	Top     []struct {
		Function string  `json:"function"`
		CumPct   float64 `json:"cum_pct"`
	} `json:"top_cumulative"`
}

// The reconnect scenario restarts the server under a fleet whose workers all hold tasks: the
// restart loses nothing (every acknowledged game in the runs once, no task held twice, lost by
// its worker or declared dead), and the report says how long the server was away and when the
// beats were steady again.
func TestE2EBenchReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	cmd := exec.Command(bin, "bench", "--quick", "--scenarios", "reconnect", "--workers", "60", "--out", out)
	cmd.Dir = t.TempDir()
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("shoal-bench bench: %v\n%s", err, text)
	}
	rep := readBenchReport(t, out)
	sc, ok := rep.Scenarios["reconnect"]
	if !ok || sc.Error != "" {
		t.Fatalf("reconnect: present %v, error %q\n%s", ok, sc.Error, text)
	}
	figures := sc.figures()
	if v := figures["restart: the server away (told to stop to serving as the primary again)"]; v <= 0 {
		t.Errorf("the server away for %v s, want a positive time: %v", v, figures)
	}
	if v := figures["workers holding a task the second before the restart"]; v != 60 {
		t.Errorf("%v workers held a task before the restart, want all 60", v)
	}
	if _, ok := figures["beats steady again after the restart (equivalent time)"]; !ok {
		t.Errorf("no recovery time: %v", figures)
	}
	// What a restart must not do, whatever the machine's speed.
	for _, name := range []string{"exactly-once check", "tasks held by two workers",
		"tasks lost by their workers (failed or abandoned)", "false dead tasks"} {
		figure, met, found := sc.target(name)
		if !found {
			t.Errorf("no target %q", name)
		} else if figure == nil || !met {
			t.Errorf("%s: figure %v, met %v\n%s", name, figure, met, text)
		}
	}
}

// buildBinary builds shoal-bench and, next to it, the product's shoal, which the bench runs as
// its servers by default, and returns shoal-bench's path.
func buildBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ name, pkg string }{{"shoal-bench", "."}, {"shoal", "../shoal"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.name), b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "shoal-bench")
}
