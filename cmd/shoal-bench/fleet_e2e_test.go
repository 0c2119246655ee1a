//go:build !race

// The fleet command end to end: the real server (embedded database, compressed time knobs) and
// `shoal-bench fleet`'s workers, in this process or split over two. They take tens of seconds,
// so they run in make test's race-free pass; the fleet's own concurrency is raced in
// worker/fleet's tests.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// The fleet command's report, from one process and from a fleet split over two: the same
// workers, the same checks.
func TestE2EFleetCommandWritesTheJSONReport(t *testing.T) {
	t.Parallel()
	for _, processes := range []string{"1", "2"} {
		t.Run("processes "+processes, func(t *testing.T) {
			t.Parallel()
			testFleetCommandReport(t, processes)
		})
	}
}

func testFleetCommandReport(t *testing.T, processes string) {
	s := startE2E(t, 20)
	id := s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 1000 })
	path := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := fleetCmd(context.Background(), []string{"--workers", "20", "--server", s.base, "--concurrency", "2",
		"--time-scale", fmt.Sprint(e2eScale), "--elo", "5", "--arrival", "ramp", "--ramp", "1s",
		"--until-finished", id, "--duration", "60s", "--json", path, "--processes", processes},
		envOf(map[string]string{"SHOAL_USERNAME": s.users.Workers.Name, "SHOAL_PASSWORD": s.users.Workers.Password}),
		&stdout, &stderr)
	if err != nil {
		t.Fatalf("fleet: %v\n%s\n%s", err, &stderr, &stdout)
	}
	for _, want := range []string{"# Fleet report", "| update_task |", "Exactly-once check: PASS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, &stdout)
		}
	}
	if !strings.Contains(stderr.String(), "games") {
		t.Errorf("no progress on stderr:\n%s", &stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"workers", "arrival", "time_scale", "elapsed_s", "stopped_because", "requests",
		"endpoints", "too_busy", "http_errors", "transport_errors", "app_errors", "tasks_started",
		"tasks_reclaimed", "reclaimed_tasks", "workers_vanished", "bad_batches", "games_reported",
		"games_per_second", "updates_in_doubt", "runs", "exactly_once"} {
		if _, ok := m[key]; !ok {
			t.Errorf("the JSON report has no %q", key)
		}
	}
	var rep fleet.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	upd := rep.Endpoints["update_task"]
	if rep.Workers != 20 || rep.Arrival != "ramp" || !rep.ExactlyOnce || rep.GamesReported != 1000 ||
		upd.Requests == 0 || upd.P99MS < upd.P50MS || upd.MaxMS < upd.P99MS {
		t.Errorf("report: workers %d, arrival %s, exactly once %v, games %d, update_task %+v",
			rep.Workers, rep.Arrival, rep.ExactlyOnce, rep.GamesReported, upd)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].RunID != id || !rep.Runs[0].Finished || rep.Runs[0].ServerGames != 1000 {
		t.Errorf("runs: %+v", rep.Runs)
	}
}

func TestE2EFleetCommandErrors(t *testing.T) {
	s := startE2E(t, 5)
	env := envOf(map[string]string{"SHOAL_USERNAME": s.users.Workers.Name, "SHOAL_PASSWORD": s.users.Workers.Password})
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want string
	}{
		{"no workers", []string{"--server", s.base}, env, "--workers N is required"},
		{"no credentials", []string{"--server", s.base, "--workers", "1"}, envOf(nil), "--username and --password"},
		{"wrong password", []string{"--server", s.base, "--workers", "1", "--password", "nope"}, env, "401"},
		{"unknown run", []string{"--server", s.base, "--workers", "1", "--until-finished", "ffffffffffffffffffffffff"}, env, "get run ffffffffffffffffffffffff"},
		{"bad arrival", []string{"--server", s.base, "--workers", "1", "--arrival", "trickle"}, env, `invalid arrival "trickle"`},
		{"bad optimum", []string{"--server", s.base, "--workers", "1", "--spsa-optimum", "x"}, env, `invalid --spsa-optimum entry "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fleetCmd(context.Background(), tc.args, tc.env, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("fleet %v: %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
