package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestBenchPinning(t *testing.T) {
	if runtime.NumCPU() < 2 {
		if taskset, why := benchPinning(); taskset != "" || why != "one CPU: nothing to pin" {
			t.Errorf("one CPU: %q, %q", taskset, why)
		}
		return
	}
	t.Setenv("PATH", t.TempDir())
	if taskset, why := benchPinning(); taskset != "" || why != "no taskset (util-linux): not pinned" {
		t.Errorf("no taskset: %q, %q", taskset, why)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "taskset")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if taskset, why := benchPinning(); taskset != fake || why != "" {
		t.Errorf("with taskset: %q, %q; want %s", taskset, why, fake)
	}
}

// A need the limit already covers leaves it alone and says what it is.
func TestRaiseFileLimitAlreadyEnough(t *testing.T) {
	got := raiseFileLimit(1)
	if !strings.HasPrefix(got, "open-file limit ") || strings.Contains(got, "under") {
		t.Errorf("raiseFileLimit(1) = %q", got)
	}
}
