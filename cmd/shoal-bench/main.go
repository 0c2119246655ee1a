// Command shoal-bench is Shoal's measuring apparatus, a binary of its own beside the product's
// shoal: the benchmark, the fleet simulator and the demo. The benchmark runs the product binary
// as its servers; the product links none of this.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/shoal-chess/shoal/bench"
	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/worker/fleet"
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
		fmt.Fprintln(os.Stderr, "shoal-bench:", err)
		os.Exit(1)
	}
}

const usage = `shoal-bench measures and demonstrates Shoal with simulated workers.

Usage:
  shoal-bench bench [flags]   measure the server under simulated fleets and write a report
  shoal-bench fleet [flags]   run N simulated workers against a server and report
  shoal-bench demo [flags]    decide a test with a simulated fleet (or real games) on a temporary server
  shoal-bench version         print the version

The bench runs the product's shoal binary as its servers: by default the one next to
this program (make build puts both in bin/), or the one given by --shoal PATH.

Run "shoal-bench COMMAND --help" for a command's flags.
`

// run is the program: it parses args, builds what the subcommand needs and runs it until ctx
// ends. stdout gets what a person reads (reports, the demo's story); stderr gets progress and
// flag help.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "fleet":
		err = fleetCmd(ctx, rest, getenv, stdout, stderr)
	case fleet.ShardSubcommand: // one process of a split fleet, started by its parent; not for people
		err = fleet.ServeShard(ctx, os.Stdin, stdout)
	case "demo":
		err = demoCmd(ctx, rest, getenv, stdout, stderr)
	case "bench":
		err = benchCmd(ctx, rest, getenv, stdout, stderr)
	case bench.BareCommand: // the bench's yardstick, started by its ceiling scenario; not for people
		err = bench.ServeBare(ctx, rest, stdout)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "shoal-bench %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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

// defaultServer is where `shoal-bench fleet` sends its workers without --server: a local
// `shoal serve`.
const defaultServer = config.DefaultServer

// newFlagSet returns a FlagSet that reports errors instead of exiting, writing help to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	out := []string{}
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// self is this program's own binary, which a split fleet and the bench's yardstick re-execute.
func self() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program's binary: %w", err)
	}
	return exe, nil
}

// productBinary is the shoal binary the apparatus runs as its servers: path if given (--shoal),
// else shoal in this program's directory, where make build puts both.
func productBinary(path string) (string, error) {
	if path == "" {
		exe, err := self()
		if err != nil {
			return "", err
		}
		path = filepath.Join(filepath.Dir(exe), "shoal")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("the shoal binary to run: %w (make build builds it next to shoal-bench; --shoal PATH names another)", err)
	}
	return abs, nil
}
