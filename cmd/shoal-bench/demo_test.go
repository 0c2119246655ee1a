//go:build !race

// The demo runs a server and a few hundred simulated workers for tens of seconds: it belongs to
// make test's race-free end-to-end pass.

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestE2EDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	t.Parallel()
	var out bytes.Buffer
	start := time.Now()
	err := demoCmd(context.Background(), []string{"--seed", "7"}, envOf(nil), &out, io.Discard) // otherwise what make demo runs
	t.Logf("demo took %v:\n%s", time.Since(start).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{"Starting 300 simulated workers", "ACCEPTED", "Exactly-once check: PASS", "LLR ", "Elo "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	m := regexp.MustCompile(`temporary embedded database \((\S+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("the demo does not say where its data is")
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("the demo left its data directory %s behind (stat: %v)", m[1], err)
	}
}

// The real-games demo: local workers play the test with a real engine (here the fake one, the
// greedy side against the random one) until the SPRT accepts the stronger side, and every
// uploaded game replays by the rules.
func TestE2EDemoRealGames(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	t.Parallel()
	var out bytes.Buffer
	err := demoCmd(context.Background(), []string{"--engine", os.Args[0], "--new-options", "Skill=20", "--base-options", "Skill=0",
		"--workers", "2", "--timeout", "3m"}, envOf(nil), &out, io.Discard)
	t.Logf("demo:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{"Starting 2 workers playing real games", "ACCEPTED", "every one replays by the rules of chess"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	m := regexp.MustCompile(`PGNs: (\d+) games uploaded`).FindStringSubmatch(out.String())
	g := regexp.MustCompile(`Games (\d+):`).FindStringSubmatch(out.String())
	if m == nil || g == nil || m[1] != g[1] {
		t.Errorf("uploaded games %v, played %v: want every game played uploaded", m, g)
	}
}

// make demo ENGINE=/usr/games/stockfish as a newcomer runs it: Debian's Stockfish against
// itself at 1500 Elo, decided for the full-strength side, every game uploaded and replayed.
// Missing Stockfish fails it in CI (.ci/run installs it) and skips it elsewhere.
func TestE2EDemoStockfish(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	const sf = "/usr/games/stockfish"
	if _, err := os.Stat(sf); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no Stockfish: .ci/run installs Debian's stockfish package")
		}
		t.Skip("no Stockfish (Debian: apt-get install stockfish)")
	}
	t.Parallel()
	var out bytes.Buffer
	err := demoCmd(context.Background(), []string{"--engine", sf, "--timeout", "5m"}, envOf(nil), &out, io.Discard)
	t.Logf("demo:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{"ACCEPTED", "every one replays by the rules of chess", "time controls map[0.4+0.004:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
}
