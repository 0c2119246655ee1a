package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/shoal-chess/shoal/protocol/apiclient"
)

// benchLine is a line of `go test -bench` output: name, iterations, ns/op.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)

// benchCriticalSection runs the scheduler's Go benchmarks when the go tool and the module's
// source are at hand.
func benchCriticalSection(ctx context.Context, sc *scenarioReport) error {
	at100 := (*float64)(nil)
	defer func() {
		sc.target("request_task critical section at 100 runs (mean ns/op)", at100, "µs", "< 100", below(100))
	}()
	goTool, err := exec.LookPath("go")
	if err != nil {
		sc.Skipped = "skipped: go is not on PATH"
		return nil
	}
	root := moduleRoot()
	if root == "" {
		sc.Skipped = "skipped: not run from Shoal's source tree (no go.mod of github.com/shoal-chess/shoal above the working directory)"
		return nil
	}
	cmd := exec.CommandContext(ctx, goTool, "test", "-run", "^$", "-count", "1",
		"-bench", "^(BenchmarkRequestTaskCriticalSection|BenchmarkRequestTask|BenchmarkUpdateTask)$",
		"./scheduler/")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("go test -bench ./scheduler/: %w: %s", err, tail)
	}
	found := false
	for line := range strings.Lines(out.String()) {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		us := ns / 1000
		sc.figure(m[1], us, "µs/op")
		found = true
		if m[1] == "BenchmarkRequestTaskCriticalSection/runs=100" {
			at100 = new(us)
		}
	}
	if !found {
		return fmt.Errorf("go test -bench printed no benchmark line: %s", apiclient.Snippet(out.Bytes()))
	}
	return nil
}

// moduleRoot is the directory above the working directory holding Shoal's go.mod, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/shoal-chess/shoal\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
