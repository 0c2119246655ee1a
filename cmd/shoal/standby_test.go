package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/rundb"
)

// workerAPIAnswers reports whether a worker call through base gets a JSON answer from a primary
// (request_version, with the fleet's account).
func workerAPIAnswers(base string, u demoUsers) bool {
	body := fmt.Sprintf(`{"password": %q, "worker_info": {"username": %q}}`, u.workers.password, u.workers.name)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Post(base+"/api/request_version", "application/json", strings.NewReader(body))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("X-Shoal-Instance"), "primary@")
}

// health is what /healthz says of an instance and of the primary.
type health struct {
	Role     string `json:"role"`
	Instance string `json:"instance"`
	Primary  struct {
		Holder string `json:"holder"`
		Epoch  int64  `json:"epoch"`
	} `json:"primary"`
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func healthOf(t *testing.T, base string) health {
	t.Helper()
	code, body := get(t, base+"/healthz")
	var h health
	if code != http.StatusOK || json.Unmarshal([]byte(body), &h) != nil {
		t.Fatalf("GET %s/healthz: %d %s", base, code, body)
	}
	return h
}

// Instances on one shared database: the standby says who the primary is and takes over as
// soon as the primary stops gracefully (which releases its lease); an instance started as a
// primary while that lease is live serves as a standby instead.
func TestStandbyTakesOverWhenThePrimaryStops(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := rundb.Open(ctx, rundb.Options{DataDir: filepath.Join(dir, "db"), EmbeddedAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	users, err := createDemoUsers(ctx, db, 10)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demoConfig(filepath.Join(dir, "data"), 1)
	cfg.MongoURI, cfg.LeaseTTL = db.SharedURI(), 2*time.Second
	primary, err := startInstance(ctx, cfg, quietLogger(), envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = primary.shutdown()
		}
	})
	scfg := cfg
	scfg.Role = "standby"
	standby := startTestInstance(t, scfg, io.Discard)
	sbase := "http://" + standby.addr

	h := healthOf(t, sbase)
	if h.Role != "standby" || h.Instance != "standby@"+standby.addr || h.Primary.Holder != primary.holder() || h.Primary.Epoch != 1 {
		t.Fatalf("standby's /healthz: %+v, want a standby naming %s (epoch 1) as the primary", h, primary.holder())
	}
	if workerAPIAnswers(sbase, users) {
		t.Fatal("the standby answers the worker API while the primary lives")
	}
	// A reload while standing by sets the semaphore of the primary it becomes.
	standby.reload(ctx, func() (config.Config, error) {
		c := scfg
		c.TaskSemaphoreSize = 9
		return c, nil
	}, scfg)

	stopped = true
	if err := primary.shutdown(); err != nil {
		t.Fatal(err)
	}
	// Released, the lease is the standby's at its next look (every 0.5 s), not a lease later.
	deadline := time.Now().Add(1900 * time.Millisecond)
	for !workerAPIAnswers(sbase, users) {
		if time.Now().After(deadline) {
			t.Fatal("the standby does not serve the worker API 1.9 s after the primary stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h := healthOf(t, sbase); h.Role != "primary" || h.Primary.Holder != standby.holder() || h.Primary.Epoch != 2 {
		t.Errorf("after the takeover /healthz says %+v, want the standby as the primary, epoch 2", h)
	}
	if p := standby.currentPrimary(); p == nil || p.Scheduler().TaskSemaphoreSize() != 9 {
		t.Errorf("after the takeover the semaphore is not the size reloaded while standing by (9)")
	}

	// The old primary's configuration, started again: the lease is live, so it waits.
	again := startTestInstance(t, cfg, io.Discard)
	if h := healthOf(t, "http://"+again.addr); h.Role != "standby" || h.Primary.Holder != standby.holder() {
		t.Errorf("a primary started under a live lease: /healthz %+v, want a standby naming %s", h, standby.holder())
	}
	if code, body := get(t, "http://"+again.addr+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"role":"standby"`) {
		t.Errorf("its /readyz: %d %s", code, body)
	}
}
