package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/protocol/apiclient"
)

// defaultServer is where `shoal run` sends requests without --server: a local `shoal serve`.
const defaultServer = config.DefaultServer

// defaultOptions are the engine options the new-test form prefills.
const defaultOptions = "Hash=16"

const runUsage = `usage:
  shoal run new [flags]              submit a test; prints its run id
  shoal run approve [flags] RUN_ID   approve someone else's test (approvers only)
  shoal run stop [flags] RUN_ID      stop your test (approvers: anyone's)
  shoal run modify [flags] RUN_ID    change your test's --num-games, --priority,
                                     --throughput, --auto-purge or --info (approvers:
                                     anyone's, but not its --info)

All take --server URL (env SHOAL_SERVER, default ` + defaultServer + `),
--username and --password (env SHOAL_USERNAME, SHOAL_PASSWORD), or instead --token
(env SHOAL_TOKEN), an api token made on your profile page. Run
"shoal run new --help" for the test's flags.`

// runCmd is `shoal run`: test submission, approval, stopping and modification through the
// server's API.
func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(runUsage)
	}
	switch args[0] {
	case "new":
		return runNew(ctx, args[1:], getenv, stdout, stderr)
	case "approve":
		return runApprove(ctx, args[1:], getenv, stdout, stderr)
	case "stop":
		return runStop(ctx, args[1:], getenv, stdout, stderr)
	case "modify":
		return runModify(ctx, args[1:], getenv, stdout, stderr)
	case "help", "--help", "-help", "-h":
		fmt.Fprintln(stdout, runUsage)
		return nil
	}
	return fmt.Errorf("run: unknown command %q\n%s", args[0], runUsage)
}

// clientFlags declares the connection flags on fs, filled from the environment first.
func clientFlags(fs *flag.FlagSet, getenv func(string) string) (finish func() (*apiclient.Client, error)) {
	server := fs.String("server", envOr(getenv, "SHOAL_SERVER", defaultServer), "the Shoal server's URL (env SHOAL_SERVER)")
	username := fs.String("username", getenv("SHOAL_USERNAME"), "your username (env SHOAL_USERNAME)")
	password := fs.String("password", getenv("SHOAL_PASSWORD"), "your password (env SHOAL_PASSWORD, which keeps it out of ps)")
	token := fs.String("token", getenv("SHOAL_TOKEN"), "an api token, instead of --username and --password (env SHOAL_TOKEN, which keeps it out of ps)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the server")
	return func() (*apiclient.Client, error) {
		u, err := url.Parse(*server)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return nil, fmt.Errorf("invalid --server %q: want http://HOST[:PORT] or https://...", *server)
		case *token != "" && (*username != "" || *password != ""):
			return nil, errors.New("give --token or --username and --password, not both")
		case *token != "":
		case *username == "":
			return nil, errors.New("--username (or SHOAL_USERNAME) is required, or --token (SHOAL_TOKEN)")
		case *password == "":
			return nil, errors.New("--password (or SHOAL_PASSWORD) is required")
		case *timeout <= 0:
			return nil, fmt.Errorf("invalid --timeout %v: must be positive", *timeout)
		}
		return &apiclient.Client{
			Server: strings.TrimRight(*server, "/"), Username: *username, Password: *password, Token: *token,
			HTTP: &http.Client{Timeout: *timeout},
		}, nil
	}
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// parseInterspersed parses flags that may come before or after positional arguments, and
// returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// runNew submits a test. The run's arguments come from --file (JSON, the "run" object of
// POST /api/create_run), then from the flags given, which win.
func runNew(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run new", stderr)
	client := clientFlags(fs, getenv)
	file := fs.String("file", "", "read the run's arguments from this JSON file; flags override it")
	str := map[string]*string{}
	for _, f := range []struct{ name, usage string }{
		{"base-tag", "base branch (or tag, or commit) in --tests-repo"},
		{"new-tag", "test branch (or tag, or commit) in --tests-repo"},
		{"resolved-base", "base commit SHA, 40 hex digits (optional: the server reads it from --base-tag)"},
		{"resolved-new", "test commit SHA, 40 hex digits (optional: the server reads it from --new-tag)"},
		{"msg-base", "base commit's first line (optional: the server reads it)"},
		{"msg-new", "test commit's first line (optional: the server reads it)"},
		{"base-signature", "base bench node count (optional: the commit message's last Bench: line)"},
		{"new-signature", "test bench node count (optional: the commit message's last Bench: line)"},
		{"tc", "time control, such as 10+0.1"},
		{"new-tc", "test engine's time control (time odds; default: --tc)"},
		{"book", "opening book, one the server holds (default: the server's default book)"},
		{"book-depth", "book depth (default 8)"},
		{"base-options", "base engine's UCI options (default " + defaultOptions + " when the file gives none)"},
		{"new-options", "test engine's UCI options (default " + defaultOptions + " when the file gives none)"},
		{"base-nets", "base networks, comma-separated (optional: read from the sources)"},
		{"new-nets", "test networks, comma-separated (optional: read from the sources)"},
		{"tests-repo", "the engine's repository, such as https://github.com/USER/Stockfish"},
		{"info", "what the test is about (optional: the test commit's message)"},
		{"arch-filter", "regular expression the workers' arch must match"},
		{"compiler", "compiler the workers must use (g++ or clang++)"},
		{"sprt", "SPRT bounds in normalized Elo, ELO0,ELO1 (for example 0,2)"},
		{"elo-model", "SPRT Elo model (only normalized)"},
		{"spsa-params", "file of SPSA parameters, one name,start,min,max,c_end,r_end line each"},
	} {
		str[f.name] = fs.String(f.name, "", f.usage)
	}
	ints := map[string]*int{}
	for _, f := range []struct{ name, usage string }{
		{"threads", "threads per engine (default 1)"},
		{"priority", "priority (default 0)"},
		{"throughput", "throughput in percent (default 100)"},
		{"num-games", "games to play: a fixed-games run, or the SPSA run's length with --spsa-params"},
	} {
		ints[f.name] = fs.Int(f.name, 0, f.usage)
	}
	floats := map[string]*float64{}
	for _, f := range []struct{ name, usage string }{
		{"spsa-a-ratio", "SPSA A as a fraction of the iterations (default 0.1)"},
		{"spsa-a", "SPSA A in iterations (instead of --spsa-a-ratio)"},
		{"spsa-alpha", "SPSA alpha (default 0.602)"},
		{"spsa-gamma", "SPSA gamma (default 0.101)"},
	} {
		floats[f.name] = fs.Float64(f.name, 0, f.usage)
	}
	autoPurge := fs.Bool("auto-purge", false, "purge bad workers' results automatically")
	adjudication := fs.Bool("adjudication", true, "adjudicate games (--adjudication=false to play them out)")

	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("run new: unexpected arguments %q", rest)
	}
	c, err := client()
	if err != nil {
		return fmt.Errorf("run new: %w", err)
	}

	var req protocol.RunRequest
	if *file != "" {
		if err := readRunFile(*file, &req); err != nil {
			return fmt.Errorf("run new: %w", err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := applyRunFlags(&req, set, str, ints, floats, *autoPurge, *adjudication); err != nil {
		return fmt.Errorf("run new: %w", err)
	}
	if req.BaseOptions == "" {
		req.BaseOptions = defaultOptions
	}
	if req.NewOptions == "" {
		req.NewOptions = defaultOptions
	}

	var reply struct {
		RunID string `json:"run_id"`
	}
	body := c.Credentials(map[string]any{"run": req})
	if err := c.Post(ctx, "/api/create_run", body, &reply); err != nil {
		return fmt.Errorf("run new: %w", err)
	}
	if reply.RunID == "" {
		return errors.New("run new: the server's reply has no run_id")
	}
	fmt.Fprintln(stdout, reply.RunID)
	printResolved(ctx, c, reply.RunID, stderr)
	fmt.Fprintf(stderr, "Submitted; it waits for an approver: %s/tests/view/%s\n", c.Server, reply.RunID)
	return nil
}

// printResolved says what the server made of the branches: each engine's commit and bench
// signature as the stored run has them. A run that cannot be read back is no error: it exists.
func printResolved(ctx context.Context, c *apiclient.Client, runID string, w io.Writer) {
	data, err := apiclient.Get(ctx, c.HTTP, c.Server+"/api/get_run/"+url.PathEscape(runID), apiclient.MaxReplyBytes)
	if err != nil {
		return
	}
	var run struct {
		Args protocol.RunArgs `json:"args"`
	}
	if json.Unmarshal(data, &run) != nil {
		return
	}
	a := run.Args
	fmt.Fprintf(w, "new:  %s = %s, bench %s (%s)\n", a.NewTag, a.ResolvedNew, a.NewSignature, a.MsgNew)
	fmt.Fprintf(w, "base: %s = %s, bench %s (%s)\n", a.BaseTag, a.ResolvedBase, a.BaseSignature, a.MsgBase)
}

// readRunFile reads a run's arguments, refusing keys the server would refuse.
func readRunFile(path string, req *protocol.RunRequest) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one JSON value", path)
	}
	return nil
}

// applyRunFlags copies the flags that were given (set) into req.
func applyRunFlags(req *protocol.RunRequest, set map[string]bool, str map[string]*string,
	ints map[string]*int, floats map[string]*float64, autoPurge, adjudication bool) error {
	strFields := map[string]*string{
		"base-tag": &req.BaseTag, "new-tag": &req.NewTag,
		"resolved-base": &req.ResolvedBase, "resolved-new": &req.ResolvedNew,
		"msg-base": &req.MsgBase, "msg-new": &req.MsgNew,
		"base-signature": &req.BaseSignature, "new-signature": &req.NewSignature,
		"tc": &req.TC, "new-tc": &req.NewTC, "book": &req.Book, "book-depth": &req.BookDepth,
		"base-options": &req.BaseOptions, "new-options": &req.NewOptions,
		"tests-repo": &req.TestsRepo, "info": &req.Info,
		"arch-filter": &req.ArchFilter, "compiler": &req.Compiler,
	}
	for name, dst := range strFields {
		if set[name] {
			*dst = *str[name]
		}
	}
	for name, dst := range map[string]*[]string{"base-nets": &req.BaseNets, "new-nets": &req.NewNets} {
		if set[name] {
			*dst = splitList(*str[name])
		}
	}
	if set["threads"] {
		req.Threads = new(*ints["threads"])
	}
	if set["priority"] {
		req.Priority = *ints["priority"]
	}
	if set["throughput"] {
		req.Throughput = new(*ints["throughput"])
	}
	if set["auto-purge"] {
		req.AutoPurge = autoPurge
	}
	if set["adjudication"] {
		req.Adjudication = new(adjudication)
	}

	if set["sprt"] {
		elo0, elo1, err := parseBounds(*str["sprt"])
		if err != nil {
			return err
		}
		if req.SPRT == nil {
			req.SPRT = &protocol.SPRTRequest{}
		}
		req.SPRT.Elo0, req.SPRT.Elo1 = &elo0, &elo1
	}
	if set["elo-model"] {
		if req.SPRT == nil {
			return errors.New("--elo-model needs --sprt")
		}
		req.SPRT.EloModel = *str["elo-model"]
	}

	spsaFlags := []string{"spsa-params", "spsa-a-ratio", "spsa-a", "spsa-alpha", "spsa-gamma"}
	for _, name := range spsaFlags {
		if set[name] && req.SPSA == nil {
			req.SPSA = &protocol.SPSARequest{}
		}
	}
	if req.SPSA != nil {
		if set["spsa-params"] {
			raw, err := os.ReadFile(*str["spsa-params"])
			if err != nil {
				return fmt.Errorf("--spsa-params: %w", err)
			}
			req.SPSA.RawParams = string(raw)
		}
		for name, dst := range map[string]**float64{
			"spsa-a-ratio": &req.SPSA.ARatio, "spsa-a": &req.SPSA.A,
			"spsa-alpha": &req.SPSA.Alpha, "spsa-gamma": &req.SPSA.Gamma,
		} {
			if set[name] {
				*dst = new(*floats[name])
			}
		}
	}
	if set["num-games"] {
		// An SPSA run's length lives in its spsa object.
		if req.SPSA != nil {
			req.SPSA.NumGames = *ints["num-games"]
		} else {
			req.NumGames = *ints["num-games"]
		}
	}
	return nil
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

// parseBounds reads "ELO0,ELO1".
func parseBounds(s string) (float64, float64, error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, fmt.Errorf("invalid --sprt %q: want ELO0,ELO1 such as 0,2", s)
	}
	elo0, err0 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	elo1, err1 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if err0 != nil || err1 != nil {
		return 0, 0, fmt.Errorf("invalid --sprt %q: want two numbers, ELO0,ELO1", s)
	}
	return elo0, elo1, nil
}

// runApprove approves a run as the given approver.
func runApprove(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run approve", stderr)
	client := clientFlags(fs, getenv)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("run approve: give exactly one RUN_ID")
	}
	c, err := client()
	if err != nil {
		return fmt.Errorf("run approve: %w", err)
	}
	var reply struct {
		Approved bool `json:"approved"`
	}
	body := c.Credentials(map[string]any{"run_id": rest[0]})
	if err := c.Post(ctx, "/api/approve_run", body, &reply); err != nil {
		return fmt.Errorf("run approve: %w", err)
	}
	if !reply.Approved {
		return errors.New("run approve: the server did not confirm the approval")
	}
	fmt.Fprintf(stdout, "Approved run %s.\n", rest[0])
	return nil
}

// runStop stops a run: the user's own, or any for an approver.
func runStop(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run stop", stderr)
	client := clientFlags(fs, getenv)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("run stop: give exactly one RUN_ID")
	}
	c, err := client()
	if err != nil {
		return fmt.Errorf("run stop: %w", err)
	}
	var reply protocol.StopRunReply
	if err := c.Post(ctx, "/api/user_stop_run", c.Credentials(map[string]any{"run_id": rest[0]}), &reply); err != nil {
		return fmt.Errorf("run stop: %w", err)
	}
	if !reply.Stopped {
		return errors.New("run stop: the server did not confirm the stop")
	}
	fmt.Fprintf(stdout, "Stopped run %s.\n", rest[0])
	return nil
}

// runModify changes the flags given of a run, keeping the rest as they are.
func runModify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run modify", stderr)
	client := clientFlags(fs, getenv)
	fs.Int("num-games", 0, "the run's game budget, a multiple of 1000")
	fs.Int("priority", 0, "the run's priority, -100 to 100 (higher runs first)")
	fs.Int("throughput", 0, "the run's throughput, a percentage (100 is normal)")
	fs.Bool("auto-purge", false, "purge bad workers' games when the run finishes (--auto-purge=false: not)")
	fs.String("info", "", "the run's description (its owner only)")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("run modify: give exactly one RUN_ID")
	}
	c, err := client()
	if err != nil {
		return fmt.Errorf("run modify: %w", err)
	}
	body := map[string]any{"run_id": rest[0]}
	fs.Visit(func(f *flag.Flag) {
		name := strings.ReplaceAll(f.Name, "-", "_")
		switch g := f.Value.(flag.Getter); f.Name {
		case "num-games", "priority", "throughput", "auto-purge", "info":
			body[name] = g.Get()
		}
	})
	if len(body) == 1 {
		return errors.New("run modify: give one or more of --num-games, --priority, --throughput, --auto-purge, --info")
	}
	var reply protocol.ModifyRunReply
	if err := c.Post(ctx, "/api/modify_run", c.Credentials(body), &reply); err != nil {
		return fmt.Errorf("run modify: %w", err)
	}
	msg := "Modified run %s."
	switch {
	case reply.Unapproved:
		msg = "Modified run %s; it must be approved again."
	case !reply.Approved:
		msg = "Modified run %s; it waits for approval."
	}
	if reply.Revived {
		msg += " It is running again."
	}
	fmt.Fprintf(stdout, msg+"\n", rest[0])
	return nil
}
