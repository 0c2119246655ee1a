//go:build !race

package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, logs ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			for _, l := range logs {
				t.Logf("log so far:\n%s", l())
			}
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SIGHUP re-reads the configuration: the token pool and the request_task semaphore take their
// new sizes while serving; a setting that needs a restart is named; a broken file changes
// nothing.
func TestBinaryReloadsOnSIGHUP(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "shoal.toml")
	write := func(text string) {
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("threadpool_tokens = 50\ntask_semaphore_size = 5\n")
	cmd, url, seen := startBinary(t, bin, dir, "SHOAL_CONFIG="+conf)

	write("threadpool_tokens = 7\ntask_semaphore_size = 2\nlog_level = \"debug\"\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the new pool size in force", func() bool {
		return strings.Contains(seen.String(), "reload: threadpool_tokens in force") && strings.Contains(seen.String(), "size=7")
	})
	if !strings.Contains(seen.String(), "task_semaphore_size=2") {
		t.Errorf("the reload does not report the new semaphore size:\n%s", seen.String())
	}
	if !strings.Contains(seen.String(), "changes only at a restart") || !strings.Contains(seen.String(), "key=log_level") {
		t.Errorf("the reload does not say log_level needs a restart:\n%s", seen.String())
	}

	write("threadpool_tokens = 0\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the broken file refused", func() bool {
		return strings.Contains(seen.String(), "the configuration does not load; nothing changed")
	}, seen.String)
	if resp, err := http.Get(url + "healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the reloads: %v %v", resp, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0", err)
	}
}

// The first SIGTERM starts a graceful shutdown; a second one ends the process at once.
func TestBinarySecondSignalForcesExit(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cmd, url, seen := startBinary(t, bin, dir)
	// An open live stream keeps the graceful shutdown busy for a moment.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"tests/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the graceful shutdown begun", func() bool {
		return strings.Contains(seen.String(), "a second signal stops at once")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("after a second SIGTERM serve exited with %v, want killed by the signal", err)
	}
}
