package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/rundb"
)

// userToken runs `shoal user token add|list|revoke`: a user's tokens managed from the command
// line, under the same rules as `user add` (with the embedded database the server must be
// stopped; a running server's tokens are managed on the profile page).
func userToken(ctx context.Context, verb string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "user token " + verb
	fs := newFlagSet(cmd, stderr)
	username := fs.String("username", "", "the user whose tokens these are")
	var name, scope, expires *string
	switch verb {
	case "add":
		name = fs.String("name", "", "the token's name: letters, digits and dashes")
		scope = fs.String("scope", "", "worker (the worker API, in the worker's password setting) or api (scripts: Authorization: Bearer)")
		expires = fs.String("expires", "", "how long the token works, at most a year: a duration such as 720h, or days such as 90d; empty: until revoked")
	case "revoke":
		name = fs.String("name", "", "the token to revoke")
	case "list":
	default:
		return errors.New(userUsage)
	}
	cfg, rest, err := config.Load(fs, args, getenv, userKeys)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return fmt.Errorf("%s: unexpected arguments %q", cmd, rest)
	case *username == "":
		return fmt.Errorf("%s: --username is required", cmd)
	case name != nil && *name == "":
		return fmt.Errorf("%s: --name is required", cmd)
	}
	var nt rundb.NewToken
	if verb == "add" {
		if nt, err = tokenFlags(*name, *scope, *expires); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
	}
	db, err := openUserDB(ctx, cmd, cfg, stderr)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	switch verb {
	case "add":
		token, t, err := db.Users.CreateToken(ctx, *username, nt)
		if err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		logTokenAction(ctx, db, rundb.TokenMadeAction(*username, t, "command line"), stderr)
		until := "until revoked"
		if !t.Expires.IsZero() {
			until = "until " + t.Expires.Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "Created the %s token %s of %s, valid %s. It is shown this once:\n%s\n", t.Scope, t.Name, *username, until, token)
	case "revoke":
		if err := db.Users.RevokeToken(ctx, *username, *name); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		logTokenAction(ctx, db, rundb.TokenRevokedAction(*username, *name, "command line"), stderr)
		fmt.Fprintf(stdout, "Revoked the token %s of %s.\n", *name, *username)
	case "list":
		list, err := db.Users.Tokens(ctx, *username)
		if err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		printTokens(stdout, list)
	}
	return nil
}

// tokenFlags checks the flags of `user token add` before the database is opened.
func tokenFlags(name, scope, expires string) (rundb.NewToken, error) {
	if !rundb.ValidTokenName(name) {
		return rundb.NewToken{}, fmt.Errorf("invalid --name %q: 1 to 40 letters, digits or dashes", name)
	}
	sc, err := rundb.ParseTokenScope(scope)
	if err != nil {
		return rundb.NewToken{}, fmt.Errorf("invalid --scope %q: worker or api", scope)
	}
	nt := rundb.NewToken{Name: name, Scope: sc}
	if expires == "" {
		return nt, nil
	}
	d, err := parseExpiry(expires)
	switch {
	case err != nil:
		return rundb.NewToken{}, fmt.Errorf("invalid --expires %q: a duration such as 720h, or days such as 90d", expires)
	case d <= 0 || d > rundb.MaxTokenLifetime:
		return rundb.NewToken{}, fmt.Errorf("invalid --expires %q: more than nothing and at most a year (%dd)", expires, rundb.MaxTokenLifetime/(24*time.Hour))
	}
	nt.Lifetime = d
	return nt, nil
}

// parseExpiry reads a Go duration, or a whole number of days ending in d.
func parseExpiry(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// printTokens writes a user's tokens as a table.
func printTokens(w io.Writer, list []rundb.TokenInfo) {
	if len(list) == 0 {
		fmt.Fprintln(w, "No tokens.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tCREATED\tEXPIRES\tLAST USED")
	for _, t := range list {
		exp, used := "never", "never"
		if !t.Expires.IsZero() {
			exp = t.Expires.Format(time.RFC3339)
		}
		if t.LastUse != nil {
			used = t.LastUse.Time.Format(time.RFC3339) + " from " + t.LastUse.Address
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Scope, t.Created.Format(time.RFC3339), exp, used)
	}
	tw.Flush()
}

// logTokenAction writes a token's making or revocation to the event log, as the profile page
// does; a failure is a warning, as the change is made.
func logTokenAction(ctx context.Context, db *rundb.DB, a *rundb.Action, stderr io.Writer) {
	if err := db.Actions.Insert(ctx, a); err != nil {
		fmt.Fprintf(stderr, "warning: the event log did not take the %s action: %v\n", a.Action, err)
	}
}
