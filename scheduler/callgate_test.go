package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Closing the gate waits for the calls inside, turns later ones away, and gives up at its
// context's end while a call is still inside.
func TestCallGateWaitsForCallsInside(t *testing.T) {
	var g callGate
	g.idle = make(chan struct{})
	if err := g.enter(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with a call inside and a short deadline: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- g.close(context.Background()) }()
	if err := g.enter(); !errors.Is(err, ErrStopped) {
		t.Errorf("a call after close: %v, want ErrStopped", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("close returned (%v) while a call was inside", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.leave()
	if err := <-closed; err != nil {
		t.Errorf("close after the last call left: %v", err)
	}
}
