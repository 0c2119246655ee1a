package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

// shoalCmd runs the binary's run with args and no environment, and returns what it printed.
func shoalCmd(args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), args, func(string) string { return "" }, &out, io.Discard)
	return out.String(), err
}

func TestUserTokenCommands(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if _, err := shoalCmd("user", "add", "--data", data, "--username", "wrk", "--password", "wrk-password-1"); err != nil {
		t.Fatal(err)
	}
	out, err := shoalCmd("user", "token", "add", "--data", data, "--username", "wrk", "--name", "box-1", "--scope", "worker", "--expires", "90d")
	if err != nil {
		t.Fatalf("token add: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token := lines[len(lines)-1]
	if user, ok := rundb.TokenUsername(token); !ok || user != "wrk" {
		t.Fatalf("token add printed %q: its last line is no token", out)
	}
	if _, err := shoalCmd("user", "token", "add", "--data", data, "--username", "wrk", "--name", "script", "--scope", "api"); err != nil {
		t.Fatalf("token add without expiry: %v", err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a bad name", []string{"--name", "my box", "--scope", "worker"}, "invalid --name"},
		{"no name", []string{"--scope", "worker"}, "--name is required"},
		{"a bad scope", []string{"--name", "x", "--scope", "admin"}, "invalid --scope"},
		{"an expiry over a year", []string{"--name", "x", "--scope", "api", "--expires", "367d"}, "at most a year"},
		{"an expiry that is no duration", []string{"--name", "x", "--scope", "api", "--expires", "soon"}, "invalid --expires"},
		{"a name in use", []string{"--name", "box-1", "--scope", "api"}, "exists"},
		{"no such user", []string{"--name", "x", "--scope", "api", "--username", "nobody"}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"user", "token", "add", "--data", data, "--username", "wrk"}, tc.args...)
			out, err := shoalCmd(args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
				t.Fatalf("got %q, %v; want an error with %q and nothing printed", out, err, tc.want)
			}
		})
	}

	out, err = shoalCmd("user", "token", "list", "--data", data, "--username", "wrk")
	if err != nil {
		t.Fatal(err)
	}
	if !regexpMatch(`(?m)^box-1\s+worker\s+\S+\s+\d{4}-\S+\s+never$`, out) || !regexpMatch(`(?m)^script\s+api\s+\S+\s+never\s+never$`, out) ||
		strings.Count(out, "\n") != 3 || strings.Contains(out, token) {
		t.Errorf("token list printed:\n%s", out)
	}

	// The lock rule of `user add`: not while a server holds the embedded database.
	db, err := rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	u, err := db.Users.AuthenticateAccessCached(context.Background(), rundb.Access{Username: "wrk", Secret: token, Scope: rundb.ScopeWorker})
	if err != nil || u.Username != "wrk" {
		t.Errorf("the printed token on the worker path: %v", err)
	}
	if list, _ := db.Users.Tokens(context.Background(), "wrk"); len(list) != 2 || list[0].Expires.Sub(list[0].Created) != 90*24*time.Hour {
		t.Errorf("stored tokens: %+v", list)
	}
	_, err = shoalCmd("user", "token", "revoke", "--data", data, "--username", "wrk", "--name", "box-1")
	if !errors.Is(err, embedded.ErrDatabaseInUse) || !strings.Contains(err.Error(), "stop that server first") {
		t.Errorf("token revoke while the database is in use: %v", err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	if out, err := shoalCmd("user", "token", "revoke", "--data", data, "--username", "wrk", "--name", "box-1"); err != nil || !strings.Contains(out, "Revoked") {
		t.Fatalf("token revoke: %q, %v", out, err)
	}
	if _, err := shoalCmd("user", "token", "revoke", "--data", data, "--username", "wrk", "--name", "box-1"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("revoking it again: %v, want not found", err)
	}
	if out, _ := shoalCmd("user", "token", "list", "--data", data, "--username", "wrk"); strings.Contains(out, "box-1") {
		t.Errorf("the revoked token is listed:\n%s", out)
	}
	if _, err := shoalCmd("user", "token", "frobnicate", "--username", "wrk"); err == nil || !strings.Contains(err.Error(), "shoal user token add") {
		t.Errorf("an unknown verb: %v, want the usage", err)
	}

	// The event log has each token made and revoked, as the profile page writes them.
	db, err = rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var got []string
	for _, kind := range []string{"new_token", "revoke_token"} {
		list, err := db.Actions.Find(context.Background(), rundb.ActionFilter{Action: kind, Username: "wrk"}, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			got = append(got, a.Action+": "+regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d`).ReplaceAllString(a.Message, "DATE"))
		}
	}
	slices.Sort(got)
	want := []string{"new_token: api token script (command line)", "new_token: worker token box-1, expires DATE UTC (command line)",
		"revoke_token: token box-1 (command line)"}
	if !slices.Equal(got, want) {
		t.Errorf("token actions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
