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
