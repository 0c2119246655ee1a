package node

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// account is a user's name and password.
type account struct{ name, password string }

// createWorkerUser creates the account workers log in with; machineLimit lets that many of them
// hold tasks from this one address.
func createWorkerUser(ctx context.Context, db *rundb.DB, machineLimit int) (account, error) {
	u := account{name: "fleet", password: rand.Text()}
	_, err := db.Users.Create(ctx, rundb.NewUser{Username: u.name, Password: u.password, Accepted: true, MachineLimit: machineLimit})
	return u, err
}

// workerAPIAnswers reports whether a worker call through base gets a JSON answer from a primary
// (request_version, with the workers' account).
func workerAPIAnswers(base string, u account) bool {
	body := fmt.Sprintf(`{"password": %q, "worker_info": {"username": %q}}`, u.password, u.name)
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
	users, err := createWorkerUser(ctx, db, 10)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(filepath.Join(dir, "data"))
	cfg.MongoURI, cfg.LeaseTTL = db.SharedURI(), 2*time.Second
	primary, err := Start(ctx, cfg, Env{Logger: quietLogger(), Getenv: envOf(nil), Stdout: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = primary.Shutdown()
		}
	})
	scfg := cfg
	scfg.Role = "standby"
	standby := startTestInstance(t, scfg)
	sbase := "http://" + standby.Addr()

	h := healthOf(t, sbase)
	if h.Role != "standby" || h.Instance != "standby@"+standby.Addr() || h.Primary.Holder != primary.holder() || h.Primary.Epoch != 1 {
		t.Fatalf("standby's /healthz: %+v, want a standby naming %s (epoch 1) as the primary", h, primary.holder())
	}
	if workerAPIAnswers(sbase, users) {
		t.Fatal("the standby answers the worker API while the primary lives")
	}
	// A reload while standing by sets the semaphore of the primary it becomes.
	reloaded := scfg
	reloaded.TaskSemaphoreSize = 9
	standby.Reload(ctx, reloaded)

	stopped = true
	if err := primary.Shutdown(); err != nil {
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
	again := startTestInstance(t, cfg)
	if h := healthOf(t, "http://"+again.Addr()); h.Role != "standby" || h.Primary.Holder != standby.holder() {
		t.Errorf("a primary started under a live lease: /healthz %+v, want a standby naming %s", h, standby.holder())
	}
	if code, body := get(t, "http://"+again.Addr()+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"role":"standby"`) {
		t.Errorf("its /readyz: %d %s", code, body)
	}
}
