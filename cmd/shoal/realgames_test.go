package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/match"
)

// realGamesAPI hands out one task of a fixed-games run with the shipped book, and keeps what
// the worker reports and uploads.
type realGamesAPI struct {
	t     *testing.T
	mu    sync.Mutex
	given bool
	stats []protocol.Stats
	nps   float64 // worker_info.nps of the last update
	pgn   string
}

func (a *realGamesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := strings.TrimPrefix(r.URL.Path, "/api/")
	body, _ := io.ReadAll(r.Body)
	reply := map[string]any{"duration": 0.001}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch endpoint {
	case "request_version":
		reply["version"] = protocol.Version
	case "request_task":
		if a.given {
			reply["task_waiting"] = false
			break
		}
		a.given = true
		reply["task_id"] = 0
		reply["run"] = map[string]any{"_id": "0123456789abcdef01234567", "my_task": map[string]any{"num_games": 4, "start": 0},
			"args": map[string]any{"tc": "4+0.04", "threads": 1, "num_games": 4, "new_tag": "strong", "base_tag": "weak",
				"book": "shoal_openings_v1.epd", "new_options": "Hash=16 Skill=20", "base_options": "Hash=16 Skill=0"}}
	case "update_task":
		req, err := protocol.DecodeRequest(body, nil)
		if err != nil {
			a.t.Errorf("update_task: %v", err)
		} else if req.Stats != nil {
			// fishtest's consistency checks of an update: pairs against games, and cumulative
			// counts that never go back.
			s := *req.Stats
			pairs := 0
			for _, n := range s.Pentanomial {
				pairs += n
			}
			if s.Wins+s.Losses+s.Draws != 2*pairs {
				a.t.Errorf("update %+v: %d games in %d pairs", s, s.Wins+s.Losses+s.Draws, pairs)
			}
			if n := len(a.stats); n > 0 && (s.Wins < a.stats[n-1].Wins || s.Losses < a.stats[n-1].Losses || s.Draws < a.stats[n-1].Draws) {
				a.t.Errorf("update %+v after %+v: counts went back", s, a.stats[n-1])
			}
			a.stats = append(a.stats, s)
			a.nps = req.WorkerInfo.NPS
		}
		reply["task_alive"] = true
	case "upload_pgn":
		req, err := protocol.DecodeRequest(body, nil)
		if err != nil || req.PGN == nil {
			a.t.Errorf("upload_pgn: %v", err)
			break
		}
		raw, err := base64.StdEncoding.DecodeString(*req.PGN)
		if err == nil {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(bytes.NewReader(raw)); err == nil {
				var text []byte
				text, err = io.ReadAll(zr)
				a.pgn = string(text)
			}
		}
		if err != nil {
			a.t.Errorf("upload_pgn: %v", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

// `shoal worker --engine` plays a task's games for real: it reports them with the protocol's
// counts (pairs, pentanomial) and uploads their PGN, every game of which replays legally.
func TestWorkerCmdPlaysRealGames(t *testing.T) {
	api := &realGamesAPI{t: t}
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	err := workerCmd(ctx, []string{"--server", srv.URL, "--engine", os.Args[0], "--concurrency", "2", "--max-tasks", "1",
		"--uuid-prefix", "real"}, mapEnv(map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}), &syncWriter{w: &out}, io.Discard)
	if err != nil {
		t.Fatalf("workerCmd: %v\n%s", err, out.String())
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.stats) == 0 {
		t.Fatalf("no update_task:\n%s", out.String())
	}
	s := api.stats[len(api.stats)-1]
	penta := 0
	for _, n := range s.Pentanomial {
		penta += n
	}
	if s.Wins+s.Losses+s.Draws != 4 || penta != 2 || s.Wins <= s.Losses {
		t.Errorf("final stats %+v: want 4 games in 2 pairs, won by the engine at Skill 20", s)
	}
	games := match.SplitPGN(api.pgn)
	if len(games) != 4 {
		t.Fatalf("the upload holds %d games, want 4:\n%s", len(games), api.pgn)
	}
	for i, g := range games {
		if _, err := match.ParsePGN(g); err != nil {
			t.Errorf("game %d does not replay: %v", i+1, err)
		}
	}
	// The bench's speed goes into worker_info, as fishtest's worker reports it: the fake
	// engine's 1,234,567 nodes in 2 s.
	if api.nps != 617283.5 {
		t.Errorf("worker_info.nps %v in the last update, want the bench's 617283.5", api.nps)
	}
	if !strings.Contains(out.String(), "games=real") {
		t.Errorf("the worker's start line does not say it plays real games:\n%.400s", out.String())
	}
}
