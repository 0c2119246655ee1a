package main

import (
	"net/http"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine serve starts has an owner that joins it on shutdown: once serve has returned,
// none of them is left, with the embedded database in its own process (the default) or in the
// server's.
func TestServeLeavesNoGoroutine(t *testing.T) {
	for _, process := range []string{"true", "false"} {
		t.Run("embedded_db_process="+process, func(t *testing.T) {
			// os/signal's delivery loop starts with the first Notify and lives as long as the
			// process.
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("os/signal.signal_recv"))
			env := map[string]string{"SHOAL_DATA_DIR": filepath.Join(t.TempDir(), "data"), "SHOAL_LOG_LEVEL": "warn",
				"SHOAL_EMBEDDED_DB_PROCESS": process}
			// The profiles' server too, which only some deployments run.
			base, _, stop := startServe(t, env, "--addr", "127.0.0.1:0", "--pprof-addr", "127.0.0.1:0")
			client := &http.Client{Transport: &http.Transport{}}
			for _, path := range []string{"healthz", "", "api/active_runs"} {
				resp, err := client.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			client.CloseIdleConnections()
			if err := stop(); err != nil {
				t.Fatalf("serve returned %v", err)
			}
		})
	}
}
