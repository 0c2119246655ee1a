package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

// userKeys are the configuration keys `shoal user` accepts as flags: where the database is.
var userKeys = []string{"data_dir", "mongo_uri", "database", "embedded_db_addr", "log_level"}

// userAddEnv maps the flags of `user add` to their environment variables.
var userAddEnv = map[string]string{
	"username":      "SHOAL_USER_NAME",
	"password":      "SHOAL_USER_PASSWORD",
	"email":         "SHOAL_USER_EMAIL",
	"approver":      "SHOAL_USER_APPROVER",
	"cpu-hours":     "SHOAL_USER_CPU_HOURS",
	"machine-limit": "SHOAL_USER_MACHINE_LIMIT",
}

const userUsage = `usage:
  shoal user add --username U --password P [--email E] [--approver] [--cpu-hours H] [--machine-limit N] [--data DIR | --mongo-uri URI]
  shoal user set --username U [--approver=true|false] [--machine-limit N] [--data DIR | --mongo-uri URI]
  shoal user token add --username U --name N --scope worker|api [--expires DURATION] [--data DIR | --mongo-uri URI]
  shoal user token list --username U [--data DIR | --mongo-uri URI]
  shoal user token revoke --username U --name N [--data DIR | --mongo-uri URI]`

func user(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "add":
		return userAdd(ctx, args[1:], getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "set":
		return userSet(ctx, args[1:], getenv, stdout, stderr)
	case len(args) > 1 && args[0] == "token":
		return userToken(ctx, args[1], args[2:], getenv, stdout, stderr)
	}
	return errors.New(userUsage)
}

// openUserDB opens the database for a `shoal user` command, in this process: with the embedded
// database the server must be stopped (the data directory is locked while it runs).
func openUserDB(ctx context.Context, cmd string, cfg config.Config, stderr io.Writer) (*rundb.DB, error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: max(cfg.SlogLevel(), slog.LevelWarn)}))
	cfg.EmbeddedDBProcess = false // a moment's work: no process of its own
	db, err := node.OpenDB(ctx, cfg, logger, nil)
	if errors.Is(err, embedded.ErrDatabaseInUse) {
		return nil, fmt.Errorf("%s: %w; stop that server first, or reach the database with --mongo-uri", cmd, err)
	}
	return db, err
}

// userSet changes an existing user: gives or takes the approver's rights, or changes the
// machine limit. fishtest leaves both to a database shell.
func userSet(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("user set", stderr)
	username := fs.String("username", "", "the user to change")
	approver := fs.Bool("approver", false, "--approver=true makes the user an approver, --approver=false takes the right away")
	machineLimit := fs.Int("machine-limit", 0, "active tasks one IP may hold for the user")
	cfg, rest, err := config.Load(fs, args, getenv, userKeys)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(rest) > 0:
		return fmt.Errorf("user set: unexpected arguments %q", rest)
	case *username == "":
		return errors.New("user set: --username is required")
	case !set["approver"] && !set["machine-limit"]:
		return errors.New("user set: nothing to change: give --approver=true|false or --machine-limit N")
	case set["machine-limit"] && *machineLimit < 1:
		return fmt.Errorf("user set: invalid --machine-limit %d: must be at least 1", *machineLimit)
	}
	db, err := openUserDB(ctx, "user set", cfg, stderr)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if set["approver"] {
		if err := db.Users.SetApprover(ctx, *username, *approver); err != nil {
			return fmt.Errorf("user set: %s: %w", *username, err)
		}
	}
	if set["machine-limit"] {
		if err := db.Users.SetMachineLimit(ctx, *username, *machineLimit); err != nil {
			return fmt.Errorf("user set: %s: %w", *username, err)
		}
	}
	u, err := db.Users.Get(ctx, *username)
	if err != nil {
		return fmt.Errorf("user set: %w", err)
	}
	role := "user"
	if u.IsApprover() {
		role = "approver"
	}
	fmt.Fprintf(stdout, "%s is now %s %s (machine limit %d).\n", u.Username, article(role), role, u.EffectiveMachineLimit())
	return nil
}

// article is the indefinite article of a role's name.
func article(role string) string {
	if role == "approver" {
		return "an"
	}
	return "a"
}

// userAdd creates an accepted user. It opens the database itself, so with the embedded database
// the server must be stopped (the data directory is locked while it runs).
func userAdd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("user add", stderr)
	username := fs.String("username", "", "the new user's name: letters and digits, at least 2 (env SHOAL_USER_NAME)")
	password := fs.String("password", "", "the new user's password, at most 72 bytes (env SHOAL_USER_PASSWORD, which keeps it out of ps)")
	email := fs.String("email", "", "the new user's email address (env SHOAL_USER_EMAIL)")
	approver := fs.Bool("approver", false, "make the user an approver (env SHOAL_USER_APPROVER)")
	cpuHours := fs.Float64("cpu-hours", 0, "CPU hours credited to the user; 1000 let their workers stop a failing run (env SHOAL_USER_CPU_HOURS)")
	machineLimit := fs.Int("machine-limit", rundb.DefaultMachineLimit, "active tasks one IP may hold for the user (env SHOAL_USER_MACHINE_LIMIT)")
	// The environment fills a flag first; the command line then overrides it, as for every
	// other setting.
	for flagName, env := range userAddEnv {
		if v := getenv(env); v != "" {
			if err := fs.Set(flagName, v); err != nil {
				return fmt.Errorf("user add: invalid %s %q: %w", env, v, err)
			}
		}
	}
	cfg, rest, err := config.Load(fs, args, getenv, userKeys)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return fmt.Errorf("user add: unexpected arguments %q", rest)
	case *username == "":
		return errors.New("user add: --username is required")
	case *password == "":
		return errors.New("user add: --password is required")
	case *cpuHours < 0:
		return fmt.Errorf("user add: invalid --cpu-hours %v: must not be negative", *cpuHours)
	case *machineLimit < 1:
		return fmt.Errorf("user add: invalid --machine-limit %d: must be at least 1", *machineLimit)
	}
	db, err := openUserDB(ctx, "user add", cfg, stderr)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())

	u, err := db.Users.Create(ctx, rundb.NewUser{
		Username: *username, Password: *password, Email: *email, Approver: *approver,
		Accepted: true, MachineLimit: *machineLimit,
	})
	if err != nil {
		return fmt.Errorf("user add: %w", err)
	}
	cpuSet := false
	fs.Visit(func(f *flag.Flag) { cpuSet = cpuSet || f.Name == "cpu-hours" })
	if cpuSet {
		err := db.UserCache.Put(ctx, &rundb.UserStats{Username: u.Username, CPUHours: *cpuHours, LastUpdated: time.Now().UTC()})
		if err != nil {
			return fmt.Errorf("user add: record cpu hours: %w", err)
		}
	}
	role := "user"
	if u.IsApprover() {
		role = "approver"
	}
	fmt.Fprintf(stdout, "Created %s %s (accepted, machine limit %d).\n", role, u.Username, u.EffectiveMachineLimit())
	return nil
}
