// Command shoal is Shoal in one binary: the server, its database run on its own, the user tool,
// the test tool and the worker. The measuring apparatus (benchmark, fleet simulator, demo) is
// the binary of its own cmd/shoal-bench.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

// version is set at build time by the Makefile (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful shutdown; from then on the signals' default
		// action is back, so a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	var status exitStatus
	switch {
	case errors.As(err, &status):
		os.Exit(int(status))
	case err != nil:
		fmt.Fprintln(os.Stderr, "shoal:", err)
		os.Exit(1)
	}
}

// exitStatus is an error that asks main to exit with this status and print nothing: the
// program's answer is its status (the fake engine's crash, as told).
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// fakeUCI is `shoal fake-uci`: the fake engine on stdin and stdout, or its bench (`shoal fake-uci
// bench`) on stderr. An engine told to crash ends with fakeuci.CrashStatus.
func fakeUCI(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "bench" {
		if status := fakeuci.Bench(args[1:], stderr); status != 0 {
			return exitStatus(status)
		}
		return nil
	}
	err := fakeuci.Run(os.Stdin, stdout)
	if errors.Is(err, fakeuci.ErrCrash) {
		return exitStatus(fakeuci.CrashStatus) // as told: an engine that crashes
	}
	return err
}

const usage = `Shoal coordinates a fleet of chess-engine test workers.

Usage:
  shoal serve [flags]      run the server (embedded database unless --mongo-uri)
  shoal db [flags]         run the embedded database on its own, for servers given --mongo-uri
  shoal user add [flags]   create an accepted user while the server is stopped
  shoal user set [flags]   make a user an approver (or not), change a machine limit
  shoal run new|approve    submit or approve a test through the API
  shoal worker [flags]     run one worker for a server: simulated games, or real ones with --engine
  shoal fake-uci           a tiny UCI engine for tests and demos (see worker/uci/fakeuci)
  shoal version            print the version

Run "shoal COMMAND --help" for a command's flags. Every flag can also be set
with a SHOAL_* environment variable or a key in a TOML file given by --config.
`

// run is the program: it parses args, builds what the subcommand needs and runs it until ctx
// ends. stdout gets what a person reads (the admin password, where to browse, logs); stderr
// gets flag help.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, rest, getenv, stdout, stderr)
	case "db":
		err = dbCmd(ctx, rest, getenv, stdout, stderr)
	case "user":
		err = user(ctx, rest, getenv, stdout, stderr)
	case "run":
		err = runCmd(ctx, rest, getenv, stdout, stderr)
	case "worker":
		err = workerCmd(ctx, rest, getenv, stdout, stderr)
	case "fake-uci":
		err = fakeUCI(rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "shoal %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// newFlagSet returns a FlagSet that reports errors instead of exiting, writing help to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
