// Package fakeucitest starts the fake UCI engine in tests.
package fakeucitest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/worker/uci"
)

// Start starts the test binary as the fake engine (its TestMain calls fakeuci.ServeIfAsked), sets
// options and tells it a new game begins; the test's cleanup closes it.
func Start(tb testing.TB, options map[string]string) *uci.Engine {
	tb.Helper()
	ctx := context.Background()
	e, err := uci.Start(ctx, os.Args[0], nil, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	for k, v := range options {
		if err := e.SetOption(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	if err := e.NewGame(ctx, 10*time.Second); err != nil {
		tb.Fatal(err)
	}
	return e
}
