package main

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

var dbReadyLine = regexp.MustCompile(`Shoal's database is ready; .* shoal serve --mongo-uri '(\S+)'`)

// startDB runs `shoal db` in-process and returns the URI it printed, its output and a stop
// function that cancels its context, as a signal would, and returns run's error.
func startDB(t *testing.T, env map[string]string, args ...string) (string, *lockedBuffer, func() error) {
	t.Helper()
	return startInProcess(t, "db", dbReadyLine, env, args...)
}

// openURI opens the database at uri as a client, closed when the test ends.
func openURI(t *testing.T, uri string) *rundb.DB {
	t.Helper()
	db, err := rundb.Open(context.Background(), rundb.Options{URI: uri, PasswordHashCost: bcrypt.MinCost,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	return db
}

// `shoal db` serves clients by the URI it prints, holds its data directory against a second
// `shoal db` and against `shoal serve` on the embedded database (and they against it), releases
// it when its context ends, and keeps the data for its next start.
func TestDBServesClientsExcludesServeAndKeepsData(t *testing.T) {
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"SHOAL_LOG_LEVEL": "warn", "SHOAL_ADMIN_PASSWORD": "admin-password-1"}
	uri, _, stop := startDB(t, env, "--data", data, "--addr", "127.0.0.1:0")
	if !strings.HasPrefix(uri, "mongodb://127.0.0.1:") {
		t.Fatalf("db printed %q, want its loopback TCP address", uri)
	}
	client := openURI(t, uri)
	if _, err := client.Users.Create(ctx, rundb.NewUser{Username: "alice", Password: "alice-password-1", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	if u, err := client.Users.Authenticate(ctx, "alice", "alice-password-1"); err != nil || u.Username != "alice" {
		t.Fatalf("read back through shoal db: %+v, %v", u, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		{"a second shoal db", []string{"db", "--data", data}, "stop it first"},
		{"shoal serve on the embedded database", []string{"serve", "--addr", "127.0.0.1:0", "--data", data}, "--mongo-uri"},
	} {
		err := run(ctx, tc.args, envOf(env), io.Discard, io.Discard)
		if !errors.Is(err, embedded.ErrDatabaseInUse) || !strings.Contains(err.Error(), "pid") || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%s while shoal db runs: %v, want the in-use error naming the pid and saying %q", tc.name, err, tc.hint)
		}
	}

	_ = client.Close(ctx)
	if err := stop(); err != nil {
		t.Fatalf("db returned %v when its context ended", err)
	}

	// The lock is released: the next start (on its socket alone this time) has alice.
	uri, _, stop = startDB(t, env, "--data", data)
	if !strings.HasPrefix(uri, "mongodb://%2F") || !strings.Contains(uri, "mongodb.sock") {
		t.Errorf("db without --addr printed %q, want its Unix socket", uri)
	}
	client = openURI(t, uri)
	if _, err := client.Users.Authenticate(ctx, "alice", "alice-password-1"); err != nil {
		t.Errorf("alice after a restart of shoal db: %v", err)
	}
	// Each start gives the collections clients created the _id lookup index a server that
	// started the database itself would have made.
	sqlite, err := sql.Open("sqlite", "file:"+filepath.Join(data, "db", rundb.DefaultDatabase+".sqlite")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sqlite.Close()
	var indexed int
	err = sqlite.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name =
		(SELECT table_name || '_shoal_id' FROM _ferretdb_collections WHERE name = 'users')`).Scan(&indexed)
	if err != nil || indexed != 1 {
		t.Errorf("the users collection's _id lookup index: %d, %v; want it made at start", indexed, err)
	}
	_ = client.Close(ctx)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// And the other way round: while serve runs on the embedded database, db refuses.
	_, _, stopServe := startServe(t, env, "--addr", "127.0.0.1:0", "--data", data)
	err = run(ctx, []string{"db", "--data", data}, envOf(env), io.Discard, io.Discard)
	if !errors.Is(err, embedded.ErrDatabaseInUse) {
		t.Errorf("shoal db while shoal serve runs: %v, want the in-use error", err)
	}
	if err := stopServe(); err != nil {
		t.Fatal(err)
	}
}

// The embedded database checks no passwords, so `shoal db` refuses, before it creates
// anything, an address another machine could reach, from any configuration layer, and says how
// to reach it safely instead.
func TestDBRefusesNonLoopbackAddresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
	}{
		{name: "every interface", args: []string{"--addr", "0.0.0.0:27017"}},
		{name: "no host, which means every interface", args: []string{"--addr", ":27017"}},
		{name: "every IPv6 interface", args: []string{"--addr", "[::]:27017"}},
		{name: "another machine's address", args: []string{"--addr", "192.0.2.10:27017"}},
		{name: "a host name", args: []string{"--addr", "db.example.org:27017"}},
		{name: "an address from the environment", env: map[string]string{"SHOAL_EMBEDDED_DB_ADDR": "10.0.0.1:27017"}},
		{name: "an address from the config file", file: "embedded_db_addr = \"0.0.0.0:27017\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			env := map[string]string{"SHOAL_DATA_DIR": data}
			for k, v := range tc.env {
				env[k] = v
			}
			args := append([]string{"db"}, tc.args...)
			if tc.file != "" {
				conf := filepath.Join(dir, "shoal.toml")
				if err := os.WriteFile(conf, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", conf)
			}
			err := run(context.Background(), args, envOf(env), io.Discard, io.Discard)
			if err == nil {
				t.Fatal("db started")
			}
			for _, want := range []string{"embedded_db_addr", "loopback", "SSH"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}
