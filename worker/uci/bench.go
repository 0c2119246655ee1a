package uci

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// BenchResult is what an engine's bench command reports: the nodes it searched (the "signature"
// a run names its engine by) and the time it took.
type BenchResult struct {
	Nodes  int64
	TimeMs float64
}

// NPS is the bench's nodes per second and thread.
func (b BenchResult) NPS(threads int) float64 {
	if b.TimeMs <= 0 {
		return 0
	}
	return 1000 * float64(b.Nodes) / b.TimeMs / float64(max(threads, 1))
}

// Bench runs "<path> bench <hash> <threads> <depth> default depth", Stockfish's bench on its
// default positions, and reads its report from the engine's standard error, as fishtest's worker
// does.
func Bench(ctx context.Context, path string, hash, threads, depth int) (BenchResult, error) {
	cmd := exec.CommandContext(ctx, path, "bench", strconv.Itoa(hash), strconv.Itoa(threads), strconv.Itoa(depth), "default", "depth")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return BenchResult{}, fmt.Errorf("uci: bench of %s: %w", path, err)
	}
	var b BenchResult
	var haveNodes, haveTime bool
	for _, line := range strings.Split(stderr.String(), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "Nodes searched":
			n, err := strconv.ParseInt(value, 10, 64)
			b.Nodes, haveNodes = n, err == nil
		case "Total time (ms)":
			f, err := strconv.ParseFloat(value, 64)
			b.TimeMs, haveTime = f, err == nil && f > 0
		}
	}
	if !haveNodes || !haveTime {
		return BenchResult{}, fmt.Errorf("uci: bench of %s: no nodes and time in its output", path)
	}
	return b, nil
}
