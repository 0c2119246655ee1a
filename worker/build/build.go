// Package build builds a run's engines on a worker, as fishtest's worker does, from sources
// the worker's server hands out (never from a forge): the git archive of a commit, the
// networks its sources name, both checked against their hashes; the build itself runs the
// operator's command (make, by default) in the sources' src/ directory, with the best ARCH
// this machine runs. Built engines are cached by commit and ARCH; the sources are removed once
// built.
//
// The package imports protocol; the worker's connection to its server comes in as a Server.
package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/protocol"

	"github.com/shoal-chess/shoal/filelock"
)

// DefaultCommand is the build command unless the operator gives another: {jobs} and {arch} are
// replaced by the jobs and the chosen ARCH.
const DefaultCommand = "make -j{jobs} build ARCH={arch}"

// Defaults of Config.
const (
	DefaultTimeout      = 15 * time.Minute
	DefaultCacheEntries = 16
	DefaultCacheBytes   = 2048 << 20
	DefaultBinary       = "stockfish"
)

// Bounds of what comes from the server, and how long a download may take.
const (
	maxSourceBytes  = 256 << 20
	maxNetBytes     = 256 << 20
	downloadTimeout = 10 * time.Minute
	helpTimeout     = time.Minute
)

// Server is the worker's connection to its server, as the builder (and the worker's book
// loader) use it: the worker implements it with its own HTTP client and credentials.
type Server interface {
	// Fetch makes one call to the server: a GET of path (below the server's URL) when body
	// is nil, else a POST of body's JSON. A GET's redirects are followed (a network may be on
	// another host), and it carries no credentials; a POST's, whose body carries the
	// password, are not. ctx bounds the whole call, body included. The caller closes the
	// response's body.
	Fetch(ctx context.Context, path string, body any) (*http.Response, error)
	// SourceRequest is the body of a source request for the commit sha, with the worker's
	// password and worker_info.
	SourceRequest(sha string) protocol.SourceRequest
}

// Config configures a Builder. Zero values get defaults (see New).
type Config struct {
	// Dir is the worker's own directory: engines/ holds the built engines (each with its
	// sha256 beside it), nets/ the networks, tmp/ each build's directory while it runs (its
	// sources, and the HOME and TMPDIR the build runs with). Required; made if missing.
	Dir string
	// Command is the build command, run in the sources' src/ directory without a shell:
	// split on spaces, with {jobs} and {arch} replaced. Default DefaultCommand.
	Command string
	// Jobs replaces {jobs}; default 1.
	Jobs int
	// Timeout bounds a build (make help and the build command); default DefaultTimeout. A
	// build killed at it is this machine's failure, not the commit's: a plain error.
	Timeout time.Duration
	// CacheEntries and CacheBytes bound the engines kept; defaults DefaultCacheEntries and
	// DefaultCacheBytes.
	CacheEntries int
	CacheBytes   int64
	// Binary is the file the build makes in src/; default DefaultBinary.
	Binary string
	// Arch, if set, is the ARCH of every build, instead of the best of `make help`'s that
	// the machine runs.
	Arch string
	// CPU is the machine ARCHes are chosen for; nil: ReadCPU().
	CPU *CPU
	// Logger gets the progress lines; default slog.Default().
	Logger *slog.Logger
}

// Builder builds and caches the engines of runs' commits. It is safe for concurrent use; it
// builds one engine at a time.
type Builder struct {
	cfg     Config
	command []string
	cpu     CPU
	log     *slog.Logger
	engines *cache
	nets    string // directory of verified networks
	tmp     string // parent of each build's directory
	lock    *os.File

	mu sync.Mutex // held through Engines: one build at a time, and the cache's guard
}

// New checks cfg, fills its defaults, makes Dir's subdirectories, takes Dir for this worker
// (another worker's Builder on the same Dir is refused, where the system can lock files), and
// removes what a build cut short left in Dir/tmp. The build command's program (and make, to
// read the ARCHes, unless Arch is set) must be on the PATH.
func New(cfg Config) (*Builder, error) {
	if cfg.Dir == "" {
		return nil, errors.New("build: no directory")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	cfg.Dir = dir
	if cfg.Command == "" {
		cfg.Command = DefaultCommand
	}
	command := strings.Fields(cfg.Command)
	if len(command) == 0 {
		return nil, fmt.Errorf("build: empty build command %q", cfg.Command)
	}
	switch {
	case cfg.Jobs < 0:
		return nil, fmt.Errorf("build: invalid jobs %d", cfg.Jobs)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("build: invalid timeout %v", cfg.Timeout)
	case cfg.CacheEntries < 0 || cfg.CacheBytes < 0:
		return nil, fmt.Errorf("build: invalid cache bounds %d engines, %d bytes", cfg.CacheEntries, cfg.CacheBytes)
	case cfg.Arch != "" && !validArch(cfg.Arch):
		return nil, fmt.Errorf("build: invalid arch %q", cfg.Arch)
	}
	if cfg.Binary == "" {
		cfg.Binary = DefaultBinary
	}
	if cfg.Binary != filepath.Base(cfg.Binary) || strings.HasPrefix(cfg.Binary, ".") {
		return nil, fmt.Errorf("build: invalid engine binary %q: want a file name", cfg.Binary)
	}
	cfg.Jobs = max(cfg.Jobs, 1)
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = DefaultCacheEntries
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if _, err := exec.LookPath(command[0]); err != nil {
		return nil, fmt.Errorf("build: the build command's %s: %w", command[0], err)
	}
	if cfg.Arch == "" {
		if _, err := exec.LookPath("make"); err != nil {
			return nil, fmt.Errorf("build: make (to read the ARCHes the sources offer): %w", err)
		}
	}
	b := &Builder{cfg: cfg, command: command, log: cfg.Logger,
		nets: filepath.Join(dir, "nets"), tmp: filepath.Join(dir, "tmp")}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.engines = &cache{dir: filepath.Join(dir, "engines"), maxEntries: cfg.CacheEntries, maxBytes: cfg.CacheBytes, log: b.log}
	if cfg.CPU != nil {
		b.cpu = *cfg.CPU
	} else {
		b.cpu = ReadCPU()
	}
	for _, d := range []string{dir, b.engines.dir, b.nets, b.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
	}
	if b.lock, err = filelock.TryLock(filepath.Join(dir, "lock")); err != nil {
		if errors.Is(err, filelock.ErrLocked) {
			err = errors.New("another worker uses this directory")
		}
		return nil, fmt.Errorf("build: %s: %w", dir, err)
	}
	if err := clearDir(b.tmp); err != nil {
		b.lock.Close()
		return nil, fmt.Errorf("build: %w", err)
	}
	return b, nil
}

// Close gives the directory up for another worker. The Builder must not be used after.
func (b *Builder) Close() error { return b.lock.Close() }

// clearDir removes what dir holds.
func clearDir(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Commit is one engine a task needs: its commit's full SHA, and its role for the log ("new",
// "base").
type Commit struct {
	SHA, Role string
}

// Error is a build that failed: the commit's fault, not the worker's (the build command ran
// and exited with an error, or made no engine). The worker reports it with Message, which the
// server recognises by protocol.BuildFailedPrefix and counts against the run. What stops a
// build on this machine instead (a build killed at build_timeout, make help failing, a make or
// compiler that cannot be run, a full disk, a command killed by a signal) is never an Error.
type Error struct {
	SHA     string // the commit's full SHA
	Command string // the command as run, its words joined by spaces
	Status  string // how it ended: "exit status 2", "exit status 0, but it made no src/stockfish"
	// Log is the end of the command's output (standard output and error together): at most
	// maxLogLines lines and maxLogBytes bytes.
	Log string
}

func (e *Error) Error() string {
	return fmt.Sprintf("build of %s: %s: %s", short(e.SHA), e.Command, e.Status)
}

// Bounds of a build error's log and its failed_task message.
const (
	maxLogLines     = 40
	maxLogBytes     = 3000
	maxMessageBytes = 4000
)

// Message is the failed_task message of the failure: protocol.BuildFailedPrefix, the short
// SHA, the command and its exit status, a newline and the log's end; at most 4,000 bytes (the
// log loses its first lines first).
func (e *Error) Message() string {
	head := protocol.BuildFailedPrefix + short(e.SHA) + ": " + e.Command + ": " + e.Status
	head = clip(head, maxMessageBytes/4, false)
	return head + "\n" + clip(e.Log, maxMessageBytes-len(head)-1, true)
}

// short is a commit's first ten digits.
func short(sha string) string { return sha[:min(len(sha), 10)] }

// clip bounds s to n bytes, keeping its end (or, for keepEnd false, its start), whole runes.
func clip(s string, n int, keepEnd bool) string {
	if len(s) <= n {
		return s
	}
	if keepEnd {
		return strings.ToValidUTF8(s[len(s)-n:], "")
	}
	return strings.ToValidUTF8(s[:n], "")
}

// Engines returns the engines of the commits, in order, building those not cached (or cached
// but changed since: their sha256 is checked). A commit named twice is built once; the engines
// of every commit named are spared by the cache's eviction. The error is a *Error when a build
// failed (the commit's fault); any other error is the worker's or the server's (a download
// that failed, a source that does not check out, a build that could not run or finish here),
// or ctx's.
func (b *Builder) Engines(ctx context.Context, srv Server, commits ...Commit) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pinned := map[string]bool{}
	for _, c := range commits {
		if !validSHA(c.SHA) {
			return nil, fmt.Errorf("build: the run's %s engine has no commit to build (%q is not a full SHA)", c.Role, c.SHA)
		}
		pinned[c.SHA] = true
	}
	paths := make([]string, len(commits))
	built := map[string]string{}
	for i, c := range commits {
		if p, ok := built[c.SHA]; ok {
			paths[i] = p
			continue
		}
		p, err := b.engine(ctx, srv, c, pinned)
		if err != nil {
			return nil, err
		}
		paths[i], built[c.SHA] = p, p
	}
	return paths, nil
}

func validSHA(s string) bool {
	return len(s) == 40 && strings.Trim(s, "0123456789abcdef") == ""
}

// fits reports whether a cached engine's ARCH may be used: the operator's when one is set,
// else any this machine runs.
func (b *Builder) fits(arch string) bool {
	if b.cfg.Arch != "" {
		return arch == b.cfg.Arch
	}
	return b.cpu.Runs(arch)
}

// engine returns c's engine: the cached one, else one built from the server's source.
func (b *Builder) engine(ctx context.Context, srv Server, c Commit, pinned map[string]bool) (string, error) {
	if p := b.engines.lookup(c.SHA, b.fits); p != "" {
		b.log.Info("Using the engine built before", "sha", short(c.SHA), "for", c.Role, "engine", filepath.Base(p))
		return p, nil
	}
	work, err := os.MkdirTemp(b.tmp, "build-")
	if err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	// The sources go as soon as the engine is built: a worker keeps no copy. So do the HOME
	// and TMPDIR the build ran with: the build runs the commit's code, which must find
	// nothing of the worker's there and leave nothing behind.
	defer os.RemoveAll(work)
	tree, home, tmp := filepath.Join(work, "tree"), filepath.Join(work, "home"), filepath.Join(work, "tmp")
	for _, d := range []string{tree, home, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("build: %w", err)
		}
	}
	tgz, err := b.fetchSource(ctx, srv, c)
	if err != nil {
		return "", err
	}
	if err := extract(tgz, tree, sourceLimits); err != nil {
		return "", fmt.Errorf("build: source of %s: %w", short(c.SHA), err)
	}
	tgz = nil
	src, err := srcDir(tree)
	if err != nil {
		return "", fmt.Errorf("build: source of %s: %w", short(c.SHA), err)
	}
	if err := b.placeNets(ctx, srv, src); err != nil {
		return "", err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "LANG=C"}
	deadline := time.Now().Add(b.cfg.Timeout) // make help's and the build's
	arch, err := b.chooseArch(ctx, c.SHA, src, env, deadline)
	if err != nil {
		return "", err
	}
	args := make([]string, len(b.command))
	for i, a := range b.command {
		a = strings.ReplaceAll(a, "{jobs}", strconv.Itoa(b.cfg.Jobs))
		args[i] = strings.ReplaceAll(a, "{arch}", arch)
	}
	b.log.Info("Building the engine", "sha", short(c.SHA), "for", c.Role, "arch", arch, "command", strings.Join(args, " "))
	start := time.Now()
	if _, err := b.run(ctx, c.SHA, src, env, args, deadline); err != nil {
		if errors.Is(err, errDeadline) {
			return "", fmt.Errorf("build: the build of %s took longer than build_timeout (%v) on this machine and was killed: %s",
				short(c.SHA), b.cfg.Timeout, strings.Join(args, " "))
		}
		return "", err
	}
	binary := filepath.Join(src, b.cfg.Binary)
	if info, err := os.Lstat(binary); err != nil || !info.Mode().IsRegular() {
		return "", &Error{SHA: c.SHA, Command: strings.Join(args, " "),
			Status: "exit status 0, but it made no src/" + b.cfg.Binary}
	}
	p, evicted, err := b.engines.add(c.SHA, arch, binary, pinned)
	if err != nil {
		return "", fmt.Errorf("build: keep the engine: %w", err)
	}
	b.log.Info("Built the engine", "sha", short(c.SHA), "for", c.Role, "arch", arch,
		"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()), "engine", filepath.Base(p))
	for _, e := range evicted {
		b.log.Info("Removed an engine from the cache", "engine", filepath.Base(e))
	}
	return p, nil
}

// srcDir finds the sources' src/ directory: at the tree's root, as git archive makes it, or in
// its one top directory, as a forge's archive does.
func srcDir(tree string) (string, error) {
	if info, err := os.Stat(filepath.Join(tree, "src")); err == nil && info.IsDir() {
		return filepath.Join(tree, "src"), nil
	}
	des, _ := os.ReadDir(tree)
	if len(des) == 1 && des[0].IsDir() {
		p := filepath.Join(tree, des[0].Name(), "src")
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("no src/ directory in the archive")
}

// chooseArch is the operator's ARCH, else the best that `make help` in src offers and this
// machine runs. make help failing or hanging is this machine's error, never an *Error: it
// only lists, and a Makefile that cannot is left to the build to fail on.
func (b *Builder) chooseArch(ctx context.Context, sha, src string, env []string, deadline time.Time) (string, error) {
	if b.cfg.Arch != "" {
		return b.cfg.Arch, nil
	}
	limit := b.cfg.Timeout
	if d := time.Now().Add(helpTimeout); d.Before(deadline) {
		deadline, limit = d, helpTimeout
	}
	out, err := b.run(ctx, sha, src, env, []string{"make", "help"}, deadline)
	var failed *Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.Is(err, errDeadline):
		return "", fmt.Errorf("build: make help, which lists the ARCHes of %s's Makefile, did not end within %v on this machine", short(sha), limit)
	case errors.As(err, &failed):
		return "", fmt.Errorf("build: make help, which lists the ARCHes of %s's Makefile, failed on this machine: %s; set arch to skip it",
			short(sha), failed.Status)
	default:
		return "", err
	}
	targets := ParseMakeHelp(out)
	arch := ChooseArch(targets, b.cpu)
	if arch == "" {
		return "", fmt.Errorf("build: none of the ARCHes of %s's Makefile %v runs on this machine; set arch", short(sha), targets)
	}
	return arch, nil
}

// errDeadline is a command killed at its deadline.
var errDeadline = errors.New("killed at the deadline")

// run runs args in dir with env, in a process group of its own, killed when ctx ends or at
// deadline. It returns the command's output (its end, bounded). The error is ctx's when ctx
// ended, errDeadline (wrapped) for a command killed at the deadline, a *Error for a command
// that ran and exited with an error of its own, and a plain error when this machine is at fault
// (machineFault): a command that could not start, could not run its program, ran out of disk
// or was killed by a signal. The output of a command killed or at fault is logged.
func (b *Builder) run(ctx context.Context, sha, dir string, env, args []string, deadline time.Time) (string, error) {
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	cmd := exec.CommandContext(runCtx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, env
	out := &tailWriter{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	ownGroup(cmd)
	// A child that left the group and holds the output open must not hold the build up.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	_ = killGroup(cmd) // what make left running
	command := strings.Join(args, " ")
	switch {
	case err == nil:
		return out.String(), nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		b.log.Warn("Killed at the deadline", "sha", short(sha), "command", command, "output", out.tail())
		return "", fmt.Errorf("build: %s: %w", command, errDeadline)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return "", fmt.Errorf("build: run %s: %w", command, err)
	}
	if fault := machineFault(exit, out.String()); fault != "" {
		b.log.Warn("The build could not run on this machine", "sha", short(sha), "command", command,
			"status", exit.ProcessState.String(), "output", out.tail())
		return "", fmt.Errorf("build: %s: %s on this machine (%s), not a fault of %s", command, fault, exit.ProcessState.String(), short(sha))
	}
	return "", &Error{SHA: sha, Command: command, Status: exit.ProcessState.String(), Log: out.tail()}
}

// Signs in a failed command's output that this machine could not build, rather than the
// commit: make's "Error 127" for a recipe whose program was not found, the line of the shell
// ("/bin/sh: 1: g++: not found", "bash: line 1: g++: command not found") or of make itself
// ("make: g++: No such file or directory") that names it, and the names of C++ compilers.
var (
	makeError127 = regexp.MustCompile(`\bError 127\b`)
	notFound     = regexp.MustCompile(`(?m)(?:^|[\s:])([A-Za-z0-9_.+/-]+): (?:not found|[Nn]o such file or directory|[Cc]ommand not found)\s*$`)
	compilerName = regexp.MustCompile(`^(?:[A-Za-z0-9_.]+-)*(?:g\+\+|c\+\+|gcc|cc|clang\+\+|clang|icpx|icx|icpc)(?:-[0-9][0-9.]*)?$`)
)

// machineFault says why a command that exited with an error failed because of this machine
// (its make, compiler, disk), or "" when it is the commit's failure: a command killed by a
// signal the worker did not send (the out-of-memory killer, an operator), an exit status of 126
// or 127 (the build command could not run its program, as a shell reports it), make's Error 127
// for a compiler it could not find, a disk full.
func machineFault(exit *exec.ExitError, output string) string {
	if strings.Contains(output, "No space left on device") {
		return "no space left on the device"
	}
	switch code := exit.ExitCode(); code {
	case -1:
		return "killed by a signal"
	case 126, 127:
		return fmt.Sprintf("the build command's program could not be run (exit status %d)", code)
	}
	if makeError127.MatchString(output) {
		for _, m := range notFound.FindAllStringSubmatch(output, -1) {
			if name := filepath.Base(m[1]); compilerName.MatchString(name) {
				return "the compiler " + name + " is not installed"
			}
		}
	}
	return ""
}

// tailWriter keeps the last bytes written to it, between max and 2*max of them. Its Write is
// not safe for concurrent use: exec.Cmd calls it from one goroutine when Stdout and Stderr are
// the same writer.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.buf) }

// tail is the end of the output for an error: its last maxLogLines lines within maxLogBytes.
func (t *tailWriter) tail() string {
	s := strings.TrimRight(string(t.buf), "\n")
	lines := strings.Split(s, "\n")
	s = strings.Join(lines[max(0, len(lines)-maxLogLines):], "\n")
	if len(s) > maxLogBytes {
		s = s[len(s)-maxLogBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:] // whole lines
		}
	}
	return strings.ToValidUTF8(s, "")
}

// fetchSource downloads the commit's source, trying once more after a failure that was not
// the server's refusal.
func (b *Builder) fetchSource(ctx context.Context, srv Server, c Commit) ([]byte, error) {
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		var data []byte
		data, err = b.downloadSource(ctx, srv, c.SHA)
		if err == nil {
			b.log.Info("Fetched the source", "sha", short(c.SHA), "for", c.Role, "bytes", len(data), "sha256", "ok")
			return data, nil
		}
		var refused *HTTPError
		if ctx.Err() != nil || errors.As(err, &refused) && refused.Status/100 == 4 {
			break
		}
		if attempt == 1 {
			b.log.Warn("Fetching the source failed; trying again", "sha", short(c.SHA), "err", err)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, err
}

// downloadSource is one POST of the source request: the archive, checked against the sha256
// the server sends with it.
func (b *Builder) downloadSource(ctx context.Context, srv Server, sha string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	what := "source of " + short(sha)
	resp, err := srv.Fetch(ctx, protocol.SourcePath, srv.SourceRequest(sha))
	if err != nil {
		return nil, fmt.Errorf("build: %s: %w", what, err)
	}
	defer resp.Body.Close()
	data, err := readBody(resp, what, maxSourceBytes)
	if err != nil {
		return nil, err
	}
	want := strings.ToLower(strings.TrimSpace(resp.Header.Get(protocol.SourceSHA256Header)))
	if want == "" {
		return nil, fmt.Errorf("build: %s: the server sent no %s header", what, protocol.SourceSHA256Header)
	}
	if got := protocol.SHA256Hex(data); got != want {
		return nil, fmt.Errorf("build: %s: sha256 %s, but the server announced %s", what, got, want)
	}
	return data, nil
}
