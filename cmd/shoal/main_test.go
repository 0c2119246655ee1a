package main

import (
	"os"
	"testing"

	"github.com/shoal-chess/shoal/rundb/embedded"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

func TestMain(m *testing.M) {
	fakeuci.ServeIfAsked() // the test binary is the engine the real-games tests give the worker
	if len(os.Args) > 1 && os.Args[1] == "db" && os.Getenv(embedded.LockFDEnv) != "" {
		// The test binary is also the database process of the servers the tests start in it.
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
