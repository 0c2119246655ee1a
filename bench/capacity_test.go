package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

func TestParseScales(t *testing.T) {
	got, err := ParseScales("10, 20,50.5")
	if err != nil || !slices.Equal(got, []float64{10, 20, 50.5}) {
		t.Errorf("ParseScales = %v, %v", got, err)
	}
	for _, bad := range []string{"", "10,,20", "10,fast", "10;20"} {
		if _, err := ParseScales(bad); err == nil || !strings.Contains(err.Error(), "--capacity-scales") {
			t.Errorf("ParseScales(%q): %v, want an error naming the flag", bad, err)
		}
	}
}

func TestCheckScales(t *testing.T) {
	if err := checkScales([]float64{1, 10, 20.5}); err != nil {
		t.Errorf("a rising ladder: %v", err)
	}
	for _, tc := range []struct {
		scales []float64
		want   string
	}{
		{nil, "empty"},
		{[]float64{0.5, 10}, "0.5 is under 1"},
		{[]float64{10, 10}, "must rise: 10 after 10"},
		{[]float64{20, 10}, "must rise: 10 after 20"},
	} {
		if err := checkScales(tc.scales); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkScales(%v) = %v, want an error containing %q", tc.scales, err, tc.want)
		}
	}
}

// The ladder's defaults climb from 100,000 to 1,000,000 equivalent workers at 10,000 workers,
// quick's two tiny steps, and flags win.
func TestNewPlanCapacity(t *testing.T) {
	base := Settings{Scenarios: []string{"capacity"}, Out: "out", TimeScale: 10}
	p, err := newPlan(base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.CapacityScales, []float64{10, 20, 30, 50, 75, 100}) || p.capacityLeg != 2*time.Minute || p.CapacityLeg != "2m0s" {
		t.Errorf("defaults: scales %v, leg %v", p.CapacityScales, p.capacityLeg)
	}
	if got := equivalentFleets(p.Workers, p.CapacityScales); got[0] != 100000 || got[len(got)-1] != 1000000 {
		t.Errorf("the default ladder's equivalent fleets %v, want 100000 to 1000000", got)
	}
	s := base
	s.Quick, s.Duration = true, 20*time.Second
	if p, _ = newPlan(s); !slices.Equal(p.CapacityScales, []float64{10, 20}) || p.capacityLeg != 20*time.Second {
		t.Errorf("quick: scales %v, leg %v (want the steady duration)", p.CapacityScales, p.capacityLeg)
	}
	s.CapacityScales, s.CapacityLeg = []float64{5, 10}, 30*time.Second
	if p, _ = newPlan(s); !slices.Equal(p.CapacityScales, []float64{5, 10}) || p.capacityLeg != 30*time.Second {
		t.Errorf("flags: scales %v, leg %v", p.CapacityScales, p.capacityLeg)
	}
	for _, tc := range []struct {
		change func(*Settings)
		want   string
	}{
		{func(s *Settings) { s.CapacityScales = []float64{20, 10} }, "--capacity-scales must rise"},
		{func(s *Settings) { s.CapacityScales = []float64{} }, "--capacity-scales is empty"},
		{func(s *Settings) { s.CapacityLeg = -time.Second }, "--capacity-leg must be positive"},
	} {
		s := base
		tc.change(&s)
		if _, err := newPlan(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error containing %q", err, tc.want)
		}
	}
}

// capacityLeg is a step's report as benchSteady leaves it, with the whole run's figures.
func capacityLeg(beat, update, request, upload float64, tooBusy, requests int64) *scenarioReport {
	sc := &scenarioReport{Endpoints: map[string]fleet.EndpointReport{
		"beat": {Requests: 1000, P99MS: beat}, "update_task": {Requests: 500, P99MS: update},
		"request_task": {Requests: requests, P99MS: request}}}
	if upload >= 0 {
		sc.Endpoints["upload_pgn"] = fleet.EndpointReport{Requests: 10, P99MS: upload}
	}
	sc.figure("equivalent workers (workers x time scale)", 200000, "workers")
	endpointFigures(sc, "", sc.Endpoints, 10)
	sc.figure("too-busy replies", float64(tooBusy), "replies")
	sc.figure("5xx replies", 0, "replies")
	sc.figure("false dead tasks (reclaimed, worker alive)", 0, "tasks")
	sc.figure("server CPU per wall second", 0.7, "cores")
	sc.figure("server resident memory (peak over the whole run, VmHWM)", 300, "MiB")
	return sc
}

func TestJudgeCapacityStep(t *testing.T) {
	leg := capacityLeg(10, 20, 40, 100, 5, 1000)
	v := judgeCapacityStep(leg)
	if !v.held() || len(v.unmeasured) != 0 {
		t.Errorf("a step within every target: %+v", v)
	}
	if len(leg.Targets) != len(capacityTargets) {
		t.Errorf("targets %d, want one per capacity target", len(leg.Targets))
	}
	if got, _ := leg.value(capacityTooBusy); got != 0.5 {
		t.Errorf("too-busy share %v %%, want 5 of 1000 request_task calls: 0.5 %%", got)
	}

	// beat p99 over its limit, too-busy at 2 %, and a 5xx: each said, with by how much.
	leg = capacityLeg(50, 20, 40, 100, 20, 1000)
	leg.Figures[slices.IndexFunc(leg.Figures, func(f benchFigure) bool { return f.Name == "5xx replies" })].Value = 3
	v = judgeCapacityStep(leg)
	want := []string{"beat p99 (whole run): 50 ms, target < 25 ms (2.00x the limit)",
		"5xx replies: 3 replies, target = 0 replies",
		"too-busy replies per request_task call: 2 %, target < 1 % (2.00x the limit)"}
	if v.held() || !slices.Equal(v.broke, want) {
		t.Errorf("broke %q, want %q", v.broke, want)
	}
	for _, tg := range leg.Targets {
		if tg.Name == "beat p99 (whole run)" && (tg.Met || tg.Figure == nil || *tg.Figure != 50) {
			t.Errorf("beat's target %+v", tg)
		}
	}

	// A limit is not met at its value (the targets are "under").
	if v = judgeCapacityStep(capacityLeg(25, 20, 40, 100, 0, 1000)); v.held() {
		t.Error("beat p99 at 25 ms held a target of < 25 ms")
	}

	// No task ended within the step: upload_pgn was never called, which breaks nothing but
	// is said; nor is a step with no request_task call judged on its too-busy share.
	leg = capacityLeg(10, 20, 40, -1, 0, 0)
	v = judgeCapacityStep(leg)
	if !v.held() || !slices.Equal(v.unmeasured, []string{"request_task p99 (whole run) (not called in this step)",
		"upload_pgn p99 (whole run) (not called in this step)", "too-busy replies per request_task call (not measured)"}) {
		t.Errorf("a step without upload_pgn nor request_task: %+v", v)
	}
}

// The climb runs the steps in order and stops at the first that breaks a target or fails; the
// headline is the last step that held.
func TestClimbCapacity(t *testing.T) {
	held, broke := capacityVerdict{}, capacityVerdict{broke: []string{"beat p99"}}
	tests := []struct {
		name     string
		verdicts []capacityVerdict
		fail     int // the step that fails (-1: none)
		largest  int
		ran      []float64
	}{
		{"every step holds", []capacityVerdict{held, held, held}, -1, 3000, []float64{10, 20, 30}},
		{"the second step breaks", []capacityVerdict{held, broke, held}, -1, 1000, []float64{10, 20}},
		{"the first step breaks", []capacityVerdict{broke, held, held}, -1, 0, []float64{10}},
		{"the third step fails", []capacityVerdict{held, held, held}, 2, 2000, []float64{10, 20, 30}},
	}
	for _, tc := range tests {
		var ran []float64
		largest, err := climbCapacity([]float64{10, 20, 30}, 100, func(i int, k float64) (capacityVerdict, error) {
			ran = append(ran, k)
			if i == tc.fail {
				return capacityVerdict{}, errors.New("server not ready")
			}
			return tc.verdicts[i], nil
		})
		if largest != tc.largest || !slices.Equal(ran, tc.ran) || (err != nil) != (tc.fail >= 0) {
			t.Errorf("%s: largest %d, ran %v, error %v; want %d, %v", tc.name, largest, ran, err, tc.largest, tc.ran)
		}
	}
}

// The steps are sections of their own, after the durability legs, by number.
func TestCapacityStepsReportOrder(t *testing.T) {
	rep := &benchReport{Scenarios: map[string]*scenarioReport{}}
	names := []string{capacityStep(9, 1000, 100), capacityStep(1, 1000, 20), capacityStep(0, 1000, 10), "durability-1-journal-off", "capacity"}
	for _, name := range names {
		rep.Scenarios[name] = &scenarioReport{}
	}
	if names[2] != "capacity-1-equivalent-10000" || legNumber(names[0]) != 10 {
		t.Errorf("step names %v", names)
	}
	got := reportOrder(rep)
	want := append(slices.Clone(reportedScenarios), "durability-1-journal-off",
		"capacity-1-equivalent-10000", "capacity-2-equivalent-20000", "capacity-10-equivalent-100000")
	if !slices.Equal(got, want) {
		t.Errorf("reportOrder = %v, want %v", got, want)
	}
	if i, j := slices.Index(got, "durability"), slices.Index(got, "capacity"); j != i+1 {
		t.Errorf("capacity's section is not after durability's: %v", got)
	}
}

func TestCapacityFigures(t *testing.T) {
	leg := capacityLeg(10, 20, 40, -1, 5, 1000)
	v := judgeCapacityStep(leg)
	var sc scenarioReport
	capacityFigures(&sc, leg, "step 2 (k = 20)", v)
	for name, want := range map[string]float64{
		"step 2 (k = 20): equivalent fleet":                       200000,
		"step 2 (k = 20): beat p99 (whole run)":                   10,
		"step 2 (k = 20): too-busy replies per request_task call": 0.5,
		"step 2 (k = 20): server resident memory (peak, VmHWM)":   300,
		"step 2 (k = 20): server CPU per wall second (whole run)": 0.7,
		"step 2 (k = 20): held every target":                      1,
	} {
		if got, ok := sc.value(name); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
	if _, ok := sc.value("step 2 (k = 20): upload_pgn p99 (whole run)"); ok {
		t.Error("a p99 of an endpoint the step never called")
	}
}

// The ladder's section says which steps held, with each one's costs beside it, and judges the
// 500,000 step's costs against the yardstick; a ladder that never reached that step has no
// figure there, so the targets are not met.
func TestLadderCostsAndHeldSteps(t *testing.T) {
	set := plan{Workers: 10000, CapacityScales: []float64{20, 50, 75}}
	rep := &benchReport{Scenarios: map[string]*scenarioReport{}}
	step := func(i int, serverUS, fleetUS, allocated float64) {
		leg := &scenarioReport{}
		leg.figure("server CPU per request", serverUS, "µs")
		leg.figure("fleet CPU per request (the bench process and its fleet processes)", fleetUS, "µs")
		ratioFigures(leg, &bareYardstick{cpuUS: 40}, allocated, 1000)
		rep.Scenarios[capacityStep(i, set.Workers, set.CapacityScales[i])] = leg
	}
	step(0, 100, 30, 2.5e6)
	step(1, 79, 41, 3.2e6)
	step(2, 70, 38, 2.9e6) // ran, broke a latency target: not among the held

	var sc scenarioReport
	ladderCosts(&sc, rep, set).targets(&sc, ladderRatioLimit)
	met := map[string]bool{}
	for _, tg := range sc.Targets {
		if tg.Figure == nil {
			t.Fatalf("target %q has no figure", tg.Name)
		}
		met[tg.Name] = tg.Met
	}
	if !met[serverRatioFigure+" (whole run)"] || met[fleetRatioFigure+" (whole run)"] || met[allocFigure] {
		t.Errorf("500,000 step at 79 µs (1.98x), fleet 41 µs (1.03x), 3,200 B: met %v, want server only", met)
	}
	heldSummary(&sc, rep, set, 500000)
	want := "**Held every target over the whole run:** 500,000 (k = 50): server 79.0 µs a request (1.98x bare), fleet 1.02x bare, 3,200 B allocated a request; 200,000 (k = 20): server 100.0 µs a request (2.50x bare), fleet 0.75x bare, 2,500 B allocated a request."
	if len(sc.Notes) != 1 || sc.Notes[0] != want {
		t.Errorf("notes %q\nwant %q", sc.Notes, want)
	}

	var short scenarioReport
	delete(rep.Scenarios, capacityStep(1, set.Workers, 50))
	ladderCosts(&short, rep, set).targets(&short, ladderRatioLimit)
	for _, tg := range short.Targets {
		if tg.Figure != nil || tg.Met {
			t.Errorf("without a 500,000 step, %q: figure %v, met %v", tg.Name, tg.Figure, tg.Met)
		}
	}
}
