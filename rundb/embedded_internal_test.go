package rundb

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// countingHandler counts the WithAttrs calls that reach it.
type countingHandler struct {
	slog.Handler
	withAttrs *int
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	*h.withAttrs++
	return countingHandler{Handler: h.Handler.WithAttrs(attrs), withAttrs: h.withAttrs}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), withAttrs: h.withAttrs}
}

// The embedded database adds each statement's arguments to its logger for a debug record:
// below the floor they must cost no formatting, and a record that passes still carries every
// attribute and group, in order.
func TestLevelFloorAppliesAttributesOnlyToRecordsItPasses(t *testing.T) {
	var out bytes.Buffer
	n := 0
	inner := countingHandler{Handler: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), withAttrs: &n}
	l := slog.New(levelFloor{Handler: inner, min: slog.LevelError})

	big := strings.Repeat("x", 1<<20)
	for range 100 {
		l.With("sql", "UPDATE ...", "args", big).Debug(">>> UPDATE")
	}
	if n != 0 || out.Len() != 0 {
		t.Fatalf("debug records below the floor: %d WithAttrs calls reached the handler, %d bytes written", n, out.Len())
	}

	l.With("component", "ferretdb").WithGroup("conn").With("id", 7).Error("failed", "err", "disk full")
	got := out.String()
	for _, want := range []string{"level=ERROR", "msg=failed", "component=ferretdb", "conn.id=7", `conn.err="disk full"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the error record %q lacks %q", got, want)
		}
	}
	if n != 2 {
		t.Errorf("%d WithAttrs calls reached the handler for the one record that passed, want 2", n)
	}
	if strings.Contains(got, "xxxx") {
		t.Errorf("the error record carries attributes of other loggers: %.200q", got)
	}
}
