package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/rundb"
)

// A run approved on a primary reaches its owner's webhook through the outbox and the
// primary's sender job.
func TestPrimarySendsNotifications(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)

	cfg := testConfig(filepath.Join(t.TempDir(), "data"))
	cfg.Notify.WebhookAllowNetworks = []string{"127.0.0.1"} // the receiver's
	inst := startTestInstance(t, cfg)
	ctx := context.Background()
	err := inst.db.NotifySettings.Put(ctx, &rundb.NotifySettings{Username: "alice", Events: []string{notify.KindApproved},
		Webhooks: []rundb.NotifyWebhook{{URL: recv.URL, Format: notify.FormatJSON}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rundb.Run{ID: rundb.NewObjectID(), Args: rundb.RunArgs{Username: "alice", NewTag: "patch", BaseTag: "master"}}
	if err := inst.primary.RunCache().Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := inst.primary.Scheduler().ApproveRun(ctx, r.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0]["event"] != notify.KindApproved || got[0]["run_id"] != r.ID.Hex() {
		t.Errorf("the webhook received %v, want one approval of %s", got, r.ID.Hex())
	}
}

// The notifications' defaults are notify's own.
func TestNotifyDefaultsAreNotifysDefaults(t *testing.T) {
	d := config.DefaultConfig().Notify
	if d.Timeout != notify.DefaultTimeout || d.MaxAttempts != notify.DefaultMaxAttempts || d.Retention != notify.DefaultRetention {
		t.Errorf("config's notify defaults %+v differ from notify's", d)
	}
}
