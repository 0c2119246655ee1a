package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/worker/fleet"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fleet.ShardSubcommand {
		// The test binary is also the processes of the split fleets the tests run (asked
		// before the engine is: every child of this process inherits the engine's variable).
		main()
		os.Exit(0)
	}
	fakeuci.ServeIfAsked() // the test binary is the engine the real-games demo gives its workers
	os.Exit(m.Run())
}

// The product binary the apparatus runs: the one named, made absolute (its servers run in
// directories of their own), and a missing one refused with the way to name another.
func TestProductBinary(t *testing.T) {
	dir := t.TempDir()
	shoal := filepath.Join(dir, "shoal")
	if err := os.WriteFile(shoal, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if got, err := productBinary("shoal"); err != nil || got != shoal {
		t.Errorf("productBinary(shoal) in %s: %q, %v; want %s", dir, got, err, shoal)
	}
	if _, err := productBinary(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--shoal PATH") {
		t.Errorf("a missing binary: %v, want an error naming --shoal", err)
	}
}

func TestUsageSpeaksOfTheProduct(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"--help"}, envOf(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shoal-bench bench", "shoal-bench fleet", "shoal-bench demo", "--shoal PATH"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, &out)
		}
	}
	if err := run(t.Context(), []string{"serve"}, envOf(nil), io.Discard, io.Discard); err == nil {
		t.Error("shoal-bench serve: no error; the server is the product's")
	}
}
