//go:build !race

package main

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// quarantineAction is what the tests read of a quarantine line in the event log.
type quarantineAction struct {
	Worker  string `json:"worker"`
	User    string `json:"user"`
	Message string `json:"message"`
}

// quarantines returns the event log's quarantine lines, by machine.
func (s *e2eServer) quarantines(t *testing.T) map[string]quarantineAction {
	t.Helper()
	var actions []quarantineAction
	if code := s.getJSON(t, http.MethodPost, "/api/actions", map[string]any{"action": "quarantine"}, &actions); code != http.StatusOK {
		t.Fatalf("actions: %d", code)
	}
	out := map[string]quarantineAction{}
	for _, a := range actions {
		out[a.Worker] = a
	}
	return out
}

// gamesIn finds M in a reason "quarantined: ... in M games on N runs ...".
var gamesIn = regexp.MustCompile(`^quarantined: \d+ time losses and \d+ crashes in (\d+) games on (\d+) runs`)

// A fleet of healthy machines, each losing a game on time once in 5,000 and crashing once in
// 20,000, with four machines that lose 2% of their games on time and crash in 0.5%, on three
// runs at once: every bad machine is quarantined within a bounded number of its games, no
// healthy one is, and request_task tells a quarantined machine why, as fishtest's worker prints
// a blocked worker's banner.
func TestE2EQuarantineCatchesBadMachinesOnly(t *testing.T) {
	t.Parallel()
	s := startE2E(t, 40)
	var runs []string
	for range 3 {
		runs = append(runs, s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 40000 }))
	}
	rep := s.fleet(t, fleet.Options{Workers: 40, Elo: 1, DrawRatio: 0.6, Seed: 11,
		BadWorkers: 4, BadTimeLossRate: 0.02, BadCrashRate: 0.005}, 150*time.Second, runs...)
	if len(rep.BadMachines) != 4 {
		t.Fatalf("bad machines %v, want 4", rep.BadMachines)
	}

	q := s.quarantines(t)
	most := 0
	for _, name := range rep.BadMachines {
		a, ok := q[name]
		if !ok {
			t.Errorf("bad machine %s was not quarantined", name)
			continue
		}
		m := gamesIn.FindStringSubmatch(a.Message)
		if m == nil || a.User != s.users.Workers.Name {
			t.Errorf("quarantine of %s: %+v, want the reason and the owner", name, a)
			continue
		}
		games, _ := strconv.Atoi(m[1])
		most = max(most, games)
		t.Logf("%s: %s", name, a.Message)
	}
	// The bound in docs/QUARANTINE.md: a machine losing 2.5% of its games is caught within
	// 2,000 of them.
	if most > 2000 {
		t.Errorf("a bad machine played %d games before its quarantine, want at most 2,000", most)
	}
	t.Logf("the bad machines were quarantined within %d games", most)
	for name := range q {
		if !slices.Contains(rep.BadMachines, name) {
			t.Errorf("healthy machine %s quarantined: %s", name, q[name].Message)
		}
	}

	// A quarantined machine asking for a task: fishtest's blocked banner, with the reason.
	name := rep.BadMachines[0]
	w, err := worker.New(worker.Config{ServerURL: s.base, Username: s.users.Workers.Name, Password: s.users.Workers.Password,
		Concurrency: 4, UniqueKey: worker.NewUniqueKey(name[strings.LastIndex(name, "-")+1:])}, &worker.SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Info().ShortName() != name {
		t.Fatalf("replayed worker named %s, want %s", w.Info().ShortName(), name)
	}
	var reply struct {
		TaskWaiting *bool  `json:"task_waiting"`
		Error       string `json:"error"`
	}
	body := map[string]any{"password": s.users.Workers.Password, "worker_info": w.Info()}
	if code := s.getJSON(t, http.MethodPost, "/api/request_task", body, &reply); code != http.StatusOK {
		t.Fatalf("request_task: %d", code)
	}
	text := strings.ReplaceAll(reply.Error, "\n", " ")
	if reply.TaskWaiting == nil || *reply.TaskWaiting || !strings.Contains(text, "Request_task: This worker has been blocked!") ||
		!strings.Contains(text, "Message: quarantined: ") || !strings.Contains(text, "/workers/"+name) {
		t.Errorf("request_task of quarantined %s: %+v", name, reply)
	}
}

// A healthy fleet playing for long, at background rates five times the simulator's defaults
// (a time loss in 1,000 games, a crash in 5,000: above the rule's floor, so the rest of the
// fleet's rates, not the floor, make the predictions): no machine is quarantined.
func TestE2EQuarantineSparesAHealthyFleet(t *testing.T) {
	t.Parallel()
	s := startE2E(t, 80)
	var runs []string
	for range 4 {
		runs = append(runs, s.submit(t, func(r *protocol.RunRequest) { r.NumGames = 100000 }))
	}
	rep := s.fleet(t, fleet.Options{Workers: 80, Elo: 1, DrawRatio: 0.6, Seed: 12,
		TimeLossRate: 1e-3, CrashRate: 2e-4}, 300*time.Second, runs...)
	var timeLosses, crashes int
	for _, id := range runs {
		r := s.run(t, id)
		timeLosses += r.Results.TimeLosses
		crashes += r.Results.Crashes
	}
	t.Logf("%d games, %d time losses, %d crashes", rep.GamesReported, timeLosses, crashes)
	if rep.GamesReported < 300000 || timeLosses == 0 || crashes == 0 {
		t.Fatalf("%d games with %d time losses and %d crashes: want a long run with both", rep.GamesReported, timeLosses, crashes)
	}
	for name, a := range s.quarantines(t) {
		t.Errorf("healthy machine %s quarantined: %s", name, a.Message)
	}
}
