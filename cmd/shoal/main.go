// Command shoal is the whole of Shoal in one binary: the server, its database run on its own,
// the user tool, the worker, the fleet simulator and the benchmark.
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

	"github.com/shoal-chess/shoal/bench"
	"github.com/shoal-chess/shoal/worker/fleet"
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
	if err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		os.Exit(1)
	}
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
  shoal fleet [flags]      run N simulated workers against a server and report
  shoal demo [flags]       decide a test with a simulated fleet on a temporary server
  shoal bench [flags]      measure the server under a simulated fleet (issue 8's report)
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
		if len(rest) > 0 && rest[0] == "bench" {
			os.Exit(fakeuci.Bench(rest[1:], os.Stderr))
		}
		err = fakeuci.Run(os.Stdin, stdout)
		if errors.Is(err, fakeuci.ErrCrash) {
			os.Exit(fakeuci.CrashStatus) // as told: an engine that crashes
		}
	case "fleet":
		err = fleetCmd(ctx, rest, getenv, stdout, stderr)
	case fleet.ShardSubcommand: // one process of a split fleet, started by its parent; not for people
		err = fleet.ServeShard(ctx, os.Stdin, stdout)
	case "demo":
		err = demoCmd(ctx, rest, getenv, stdout, stderr)
	case "bench":
		err = benchCmd(ctx, rest, getenv, stdout, stderr)
	case bench.BareCommand: // the bench's yardstick, started by its ceiling scenario; not for people
		err = bench.ServeBare(ctx, rest)
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
