package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/rundb/embedded"
	"github.com/shoal-chess/shoal/scheduler"
)

// dbKeys are the configuration keys `shoal db` accepts as flags. Its address, the key
// embedded_db_addr, has the flag --addr, since the database is all this command serves.
var dbKeys = []string{"data_dir", "log_level"}

// indexPeriod is how often `shoal db` gives the collections its clients created their _id
// lookup index: until then a lookup by _id in a new collection scans it, which costs little
// while it is small.
const indexPeriod = 5 * time.Second

// dbCmd runs the embedded database on its own until ctx ends, for `shoal serve --mongo-uri`
// instances (a primary and its secondaries or standby) to share. It locks the data directory
// as `shoal serve` on the embedded database does, so the two exclude each other.
func dbCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("db", stderr)
	addr := fs.String("addr", "", "loopback HOST:PORT where the database also listens, admitting only this OS user's processes; "+
		"empty: its Unix socket alone (key embedded_db_addr, env SHOAL_EMBEDDED_DB_ADDR)")
	cfg, rest, err := config.Load(fs, args, getenv, dbKeys)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("db: unexpected arguments %q", rest)
	}
	addrSet := false
	fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
	if addrSet {
		// The flag goes through the key's own parsing and checks, and wins like any flag.
		if err := cfg.Set("embedded_db_addr", *addr, "--addr"); err != nil {
			return err
		}
	}
	lock, err := parentLock(getenv)
	if err != nil {
		return fmt.Errorf("db: %w", err)
	}
	var logger *slog.Logger
	var e *embedded.Server
	if lock != nil {
		// A server's database: it logs JSON, which the server logs again as its own records.
		logger = slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.SlogLevel()}))
		e, err = embedded.StartLocked(cfg.DataDir, cfg.EmbeddedDBAddr, lock, logger)
	} else {
		logger = slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: cfg.SlogLevel()}))
		e, err = embedded.Start(cfg.DataDir, cfg.EmbeddedDBAddr, logger)
	}
	if errors.Is(err, embedded.ErrDatabaseInUse) {
		return fmt.Errorf("db: %w; stop it first (a shoal serve can use this database instead, with --mongo-uri)", err)
	}
	if err != nil {
		return fmt.Errorf("db: %w", err)
	}
	if err := e.IndexIDLookups(ctx); err != nil {
		logger.Warn("index _id lookups", "err", err)
	}
	jobs := scheduler.Start(ctx, logger.With("component", "db"), scheduler.Job{
		Name: "index _id lookups", Period: indexPeriod, Jitter: 0.05, Run: e.IndexIDLookups,
	})
	logger.Info("database ready", "data_dir", e.Dir(), "socket", e.URI(), "tcp", cfg.EmbeddedDBAddr)
	if lock != nil {
		// A server's own database: tell it where, and stop when it is gone (its end of our
		// standard input closes as it exits, however it exits).
		fmt.Fprintf(stdout, "%s%s %s\n", embedded.ReadyPrefix, e.URI(), e.SharedURI())
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	} else {
		fmt.Fprintf(stdout, "Shoal's database is ready; servers run by this OS user connect with: shoal serve --mongo-uri '%s'\n", e.SharedURI())
	}

	<-ctx.Done()
	logger.Info("shutting down on signal; a second signal stops at once")
	jobs.Stop()
	e.Close()
	logger.Info("stopped")
	return nil
}

// parentLock is the data directory's lock file that a server handed its database's process
// (embedded.LockFDEnv), or nil when this `shoal db` runs on its own.
func parentLock(getenv func(string) string) (*os.File, error) {
	v := getenv(embedded.LockFDEnv)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a file descriptor given by a parent", embedded.LockFDEnv, v)
	}
	return os.NewFile(uintptr(fd), "data directory lock"), nil
}
