package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/bench"
)

// shoal-bench bench's flags reach the bench's settings through the option table, with the defaults
// the report documents, and bad values are refused with the flag named.
func TestBenchFlags(t *testing.T) {
	env := map[string]string{"SHOAL_MONGO_URI": "mongodb://bench:secret@db.example:27017", "SHOAL_WORKERS": "7"}
	getenv := func(k string) string { return env[k] }

	set, shoal, err := loadBench(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if shoal != "" {
		t.Errorf("--shoal defaults to %q, want none (the shoal next to shoal-bench)", shoal)
	}
	if !slices.Equal(set.Scenarios, []string{"steady", "storm", "ceiling", "critical-section"}) || set.Out != "bench-out" ||
		set.TimeScale != 10 || !set.Pin || set.Quick || set.Workers != 0 || set.StormSizes != nil || set.CapacityScales != nil || set.CapacityLeg != 0 {
		t.Errorf("defaults %+v", set)
	}
	if set.MongoURI != env["SHOAL_MONGO_URI"] {
		t.Errorf("mongo URI %q, want SHOAL_MONGO_URI's", set.MongoURI)
	}
	// The bench's servers run with the demo's time knobs at the bench's scale: one rule.
	if got := bench.ServerTimesAt(set.TimeScale); got.HeartbeatPeriod != 12*time.Second {
		t.Errorf("heartbeat at time scale 10: %v, want fishtest's 120 s / 10", got.HeartbeatPeriod)
	}
	for _, scale := range []float64{10, 50, 240} {
		cfg, got := demoConfig("", scale), bench.ServerTimesAt(scale)
		if want := (bench.ServerTimes{HeartbeatPeriod: cfg.HeartbeatPeriod, DeadTaskTimeout: cfg.DeadTaskTimeout,
			ScavengePeriod: cfg.ScavengePeriod, DuplicateWorkerWindow: cfg.DuplicateWorkerWindow}); got != want {
			t.Errorf("time scale %g: the bench's server times %+v, the demo's %+v", scale, got, want)
		}
	}

	set, shoal, err = loadBench([]string{"--scenarios", "storm,durability", "--storm-workers", "500, 5000", "--quick", "--pin=false",
		"--workers", "300", "--durability-leg", "45s", "--time-scale", "50", "--capacity-scales", "5, 10,20.5", "--capacity-leg", "1m",
		"--fleet-processes", "3", "--shoal", "/opt/shoal/bin/shoal"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if shoal != "/opt/shoal/bin/shoal" {
		t.Errorf("--shoal gave %q", shoal)
	}
	if !slices.Equal(set.Scenarios, []string{"storm", "durability"}) || !slices.Equal(set.StormSizes, []int{500, 5000}) ||
		!set.Quick || set.Pin || set.Workers != 300 || set.DurabilityLeg != 45*time.Second || set.TimeScale != 50 ||
		!slices.Equal(set.CapacityScales, []float64{5, 10, 20.5}) || set.CapacityLeg != time.Minute || set.FleetProcesses != 3 {
		t.Errorf("from flags %+v", set)
	}
	if got := bench.ServerTimesAt(set.TimeScale); got.HeartbeatPeriod != 120*time.Second/50 {
		t.Errorf("heartbeat at time scale 50: %v", got.HeartbeatPeriod)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-1"}, "--workers"},
		{[]string{"--duration", "soon"}, "--duration"},
		{[]string{"--storm-workers", "500,many"}, "--storm-workers"},
		{[]string{"--capacity-scales", "10,fast"}, "--capacity-scales"},
		{[]string{"--capacity-leg", "long"}, "--capacity-leg"},
		{[]string{"--fleet-processes", "many"}, "--fleet-processes"},
		{[]string{"report"}, "unexpected arguments"},
	} {
		if _, _, err := loadBench(tc.args, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
