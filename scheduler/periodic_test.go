package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

func TestPeriodicRunsUntilStopAndSurvivesErrors(t *testing.T) {
	var runs atomic.Int32
	p := Start(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Job{
		Name: "flaky", Period: time.Millisecond, Jitter: 0.05,
		Run: func(context.Context) error {
			runs.Add(1)
			return errors.New("database hiccup")
		},
	})
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("a failing job ran %d times in 10 s; it must keep running", runs.Load())
		}
		time.Sleep(time.Millisecond)
	}
	p.Stop()
	p.Stop() // idempotent
	after := runs.Load()
	time.Sleep(20 * time.Millisecond)
	if runs.Load() != after {
		t.Error("the job ran after Stop returned")
	}
}

func TestStopWaitsForARunningJob(t *testing.T) {
	started := make(chan struct{})
	var finished atomic.Bool
	p := Start(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Job{
		Name: "slow", Period: time.Hour, Initial: time.Millisecond,
		Run: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond)
			finished.Store(true)
			return nil
		},
	})
	<-started
	p.Stop()
	if !finished.Load() {
		t.Error("Stop returned while a job was still running")
	}
}
