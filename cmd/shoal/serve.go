package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/node"
)

// serve runs the server until ctx ends, then shuts it down.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	cfg, rest, err := config.Load(fs, args, getenv, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", rest)
	}
	logger := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: cfg.SlogLevel()}))
	if os.Getenv("GOGC") == "" { // the runtime's own reading of it; restored for a test's process
		defer debug.SetGCPercent(debug.SetGCPercent(serveGCPercent))
	}
	// SIGHUP is caught before the instance says it is ready: one sent as soon as it does must
	// reload, not end the process (SIGHUP's default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	inst, err := node.Start(ctx, cfg, node.Env{Logger: logger, Getenv: getenv, Stdout: stdout, Version: version})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Shoal is ready: browse http://%s/\n", browseAddr(inst.Addr()))
	// reloads are the SIGHUP reloads running, joined before the shutdown.
	var reloads sync.WaitGroup
	var served error
	for served == nil && ctx.Err() == nil {
		select {
		case err := <-inst.Served():
			served = fmt.Errorf("http server: %w", err)
		case err := <-inst.DB().Lost():
			// Nothing more can be stored: stop, the journal keeps what was acknowledged.
			logger.Error("the database is gone: shutting down; the runs are not written, the journal keeps what was acknowledged", "err", err)
			served = err
		case <-hup:
			// Reload in the background: a shrinking pool waits for tokens to come back, and
			// a second SIGHUP meanwhile is queued behind it (Resize is serialised). A
			// configuration that no longer loads changes nothing.
			reloads.Go(func() {
				next, _, err := config.Load(newFlagSet("serve", io.Discard), args, getenv, nil)
				if err != nil {
					logger.Error("reload: the configuration does not load; nothing changed", "err", err)
					return
				}
				inst.Reload(ctx, next)
			})
		case <-ctx.Done():
			logger.Info("shutting down on signal; a second signal stops at once")
		}
	}
	// A reload still running gives up its wait for tokens now that ctx has ended (or within
	// its limit); it is joined before the instance stops.
	reloads.Wait()
	return errors.Join(served, inst.Shutdown())
}

// serveGCPercent is the server's GOGC unless the environment sets one. Most of a busy server's
// memory is not its heap but its connections (a goroutine's stack and two buffers each), so the
// collector can let the heap grow twice as far before a cycle for little more memory in all,
// and fewer mark phases hold the handlers back (docs/benchmarks/README.md, "At 500,000").
const serveGCPercent = 200

// browseAddr is the address a person on this machine types: a wildcard listen address becomes
// the loopback one.
func browseAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsUnspecified() {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}
