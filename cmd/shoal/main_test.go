package main

import (
	"os"
	"testing"

	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

func TestMain(m *testing.M) {
	fakeuci.ServeIfAsked() // the test binary is the engine the real-games tests give the worker
	os.Exit(m.Run())
}
