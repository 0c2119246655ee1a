//go:build !race

// These tests build the real binary and drive it as a person would, signals included. They run
// in make test's race-free pass because building under the race detector is slow.

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds the product binary, with the build tags given (the crash test's
// faultinject), and returns its path.
func buildBinary(t *testing.T, tags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shoal")
	cmd := exec.Command("go", "build", "-tags", strings.Join(tags, ","), "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBinary starts `shoal serve` and waits for the line that says where to browse. The
// returned log keeps every line the server prints, before and after that one.
func startBinary(t *testing.T, bin, dir string, env ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	return startBinaryUntil(t, bin, dir, regexp.MustCompile(`browse (http://\S+/)`), env, "serve", "--addr", "127.0.0.1:0")
}

// startBinaryUntil runs the binary with args in dir and waits for a line of its output that
// ready matches; it returns the command, ready's first submatch and every line printed, before
// and after that one. The process is killed when the test ends.
func startBinaryUntil(t *testing.T, bin, dir string, ready *regexp.Regexp, env []string, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, "PATH=/usr/bin:/bin", "HOME="+dir), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	seen := &lockedBuffer{}
	found := make(chan string, 1)
	go func() { // the only reader of stdout, to its end
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(seen, sc.Text())
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default: // told once; never block the reader
				}
			}
		}
		close(found)
	}()
	select {
	case got, ok := <-found:
		if !ok {
			t.Fatalf("%s exited before it was ready:\n%s", args[0], seen.String())
		}
		return cmd, got, seen
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after 60 s:\n%s", args[0], seen.String())
	}
	return nil, "", nil
}

// The product binary carries no fault injection and no measuring apparatus: the crash test's
// hook is built only with the faultinject tag, and the bench and the fleet simulator are
// shoal-bench's.
func TestBinaryLeavesOutTheApparatus(t *testing.T) {
	data, err := os.ReadFile(buildBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"fault injection: this server kills itself", "shoal/worker/fleet.", "shoal/bench."} {
		if bytes.Contains(data, []byte(absent)) {
			t.Errorf("the product binary contains %q", absent)
		}
	}
	if tagged, err := os.ReadFile(buildBinary(t, "faultinject")); err != nil || !bytes.Contains(tagged, []byte("fault injection: this server kills itself")) {
		t.Errorf("the faultinject build lacks the hook (read: %v): this test looks for the wrong text", err)
	}
}

func TestBinaryServesStopsOnSignalAndKeepsData(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()

	cmd, url, _ := startBinary(t, bin, dir, "SHOAL_ADMIN_PASSWORD=s3cret")
	resp, err := http.Get(url + "healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM, want 0", err)
	}

	out, err := exec.Command(bin, "user", "add", "--data", filepath.Join(dir, "data"), "--username", "bob", "--password", "pw").CombinedOutput()
	if err != nil {
		t.Fatalf("user add: %v\n%s", err, out)
	}

	cmd, url, seen := startBinary(t, bin, dir)
	if strings.Contains(seen.String(), "Created the first user") {
		t.Error("the restart did not find the users of the first run")
	}
	// Both users, the first start's admin and the one added while stopped, log in.
	for _, u := range [][2]string{{"admin", "s3cret"}, {"bob", "pw"}} {
		if page, _ := webLogin(t, url, u[0], u[1]); !strings.Contains(page, `class="user-name">`+u[0]+`<`) {
			t.Errorf("after a restart %s cannot log in:\n%s", u[0], page)
		}
	}

	// While it runs, user add refuses clearly and exits non-zero.
	add := exec.Command(bin, "user", "add", "--data", filepath.Join(dir, "data"), "--username", "carol", "--password", "pw")
	out, err = add.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use") {
		t.Errorf("user add against a running server: %v\n%s", err, out)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v after SIGINT, want 0", err)
	}
}

// `shoal db` runs as a process of its own: servers and tools reach it by the URI it prints, a
// tool on its data directory is refused while it runs, and SIGTERM stops it cleanly (exit 0)
// and releases the directory with its data in it.
func TestBinaryDBStopsOnSIGTERMAndReleasesItsDirectory(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cmd, uri, seen := startBinaryUntil(t, bin, dir, dbReadyLine, nil, "db", "--data", data, "--addr", "127.0.0.1:0")

	out, err := exec.Command(bin, "user", "add", "--mongo-uri", uri, "--username", "bob", "--password", "bob-password-1").CombinedOutput()
	if err != nil {
		t.Fatalf("user add through shoal db: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "user", "add", "--data", data, "--username", "carol", "--password", "carol-password-1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use") {
		t.Errorf("user add on the data directory of a running shoal db: %v\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("db exited with %v after SIGTERM, want 0\n%s", err, seen.String())
	}
	if !strings.Contains(seen.String(), "msg=stopped") {
		t.Errorf("db did not say it stopped:\n%s", seen.String())
	}
	db := openStopped(t, data) // the lock is free, and bob is there
	if _, err := db.Users.Authenticate(context.Background(), "bob", "bob-password-1"); err != nil {
		t.Errorf("bob after shoal db stopped: %v", err)
	}
}

// `shoal fake-uci` is a UCI engine: it answers the handshake and a search with a legal move,
// and quits when told.
func TestBinaryFakeUCI(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "fake-uci")
	cmd.Stdin = strings.NewReader("uci\nisready\nposition startpos moves e2e4\ngo wtime 1000 btime 1000\nquit\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shoal fake-uci: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"id name Shoal fake UCI engine", "uciok", "readyok", "bestmove "} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
}
