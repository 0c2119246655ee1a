package gitmirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Output bounds: what a git call may print before the mirrors stop reading it.
const (
	// defaultOutputLimit bounds the captured stdout of a call that names no bound of its own.
	defaultOutputLimit = 1 << 20
	// stderrTail is how much of the end of git's stderr is kept for error messages.
	stderrTail = 4 << 10
	// waitDelay is how long a killed git may take to let go of its pipes.
	waitDelay = 5 * time.Second
)

// errOutputLimit: git printed more than the caller would read; the process was stopped.
var errOutputLimit = errors.New("git output past its limit")

// gitRun is one git process to run.
type gitRun struct {
	// dir is the mirror git works in (--git-dir); "" for none.
	dir  string
	args []string
	// stdin, if set, is git's standard input.
	stdin io.Reader
	// stdout, if set, receives git's output; else it is captured, at most limit bytes.
	stdout io.Writer
	limit  int
	// local allows the file protocol: a fetch from a listed local path.
	local bool
}

// gitError is a git process that failed: its exit code and the end of what it said.
type gitError struct {
	cmd    string // the subcommand, for the message
	code   int    // exit code, -1 when killed or not started
	stderr string // the tail of stderr
	err    error
}

func (e *gitError) Error() string {
	if r := e.reason(); r != "" {
		return fmt.Sprintf("git %s: %s", e.cmd, r)
	}
	return fmt.Sprintf("git %s: %v", e.cmd, e.err)
}

func (e *gitError) Unwrap() error { return e.err }

// reason is the last line or two git wrote to stderr, bounded and made printable, which is
// usually what went wrong ("fatal: unable to access ...: Could not resolve host").
func (e *gitError) reason() string {
	var lines []string
	for _, l := range strings.Split(e.stderr, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "hint:") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 2 {
		lines = lines[len(lines)-2:]
	}
	return printable(strings.Join(lines, "; "), 300)
}

// printable makes s safe to show: control characters replaced, at most max bytes, and no URL
// user info (the package refuses URLs with credentials, but git's message is not ours).
func printable(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			r = ' '
		}
		b.WriteRune(r)
	}
	s = redactUserInfo(b.String())
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// redactUserInfo removes "user:pw@" from every "scheme://user:pw@host" in s.
func redactUserInfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, "/ '\"")
		if end < 0 {
			end = len(s)
		}
		if at := strings.LastIndexByte(s[:end], '@'); at >= 0 {
			b.WriteString("***@")
			s = s[at+1:]
		}
	}
}

// exitCode is the exit code of a failed git, or -1.
func exitCode(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.code
	}
	return -1
}

// proxyVars are the variables of the server's environment that reach git: a server behind an
// egress proxy fetches through it. curl reads http_proxy in lower case only, the others in
// either case.
var proxyVars = [...]string{
	"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
	"ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy",
}

// gitEnv is the whole environment of every git process: nothing of the server's own
// environment but PATH and the proxy variables (proxyVars) reaches git, nor any of a user's
// configuration, and git never waits for a password. allow is GIT_ALLOW_PROTOCOL: "https", or
// "https:file" for fetches of listed local paths. getenv reads the server's environment.
func gitEnv(home, allow string, getenv func(string) string) []string {
	env := []string{
		"PATH=" + getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/true",
		"SSH_ASKPASS=/bin/true",
		"GIT_NO_REPLACE_OBJECTS=1",
		"LC_ALL=C",
		"GIT_ALLOW_PROTOCOL=" + allow,
	}
	for _, k := range proxyVars {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// gitConfig is the configuration every git call gets on its command line. Redirects are not
// followed at all, so a forge cannot send a fetch to a host the operator did not allow; gc runs
// in the foreground so that it stays in the fetch's process group and under its timeout.
//
// What a repository says of itself changes nothing the server shows or serves: attributes are
// read from no file (core.attributesFile) and, on git 2.42 and later, from the empty tree
// instead of HEAD's (attr.tree; older git ignores the key, and reads no tree's attributes in a
// bare repository anyway), so a committed .gitattributes cannot make a source file "binary" to
// the diff or hide it. Fetched objects are checked (transfer.fsckObjects), which refuses the
// malformed trees and commits that git's own vulnerabilities have been reached through.
func gitConfig(caBundle string) []string {
	c := []string{
		"-c", "protocol.allow=never",
		"-c", "protocol.https.allow=always",
		"-c", "http.followRedirects=false",
		"-c", "credential.helper=",
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.quotePath=false",
		"-c", "core.fsmonitor=false",
		"-c", "gc.autoDetach=false",
		"-c", "maintenance.autoDetach=false",
		"-c", "init.defaultBranch=master",
		"-c", "core.attributesFile=/dev/null",
		"-c", "attr.tree=" + emptyTree,
		"-c", "transfer.fsckObjects=true",
	}
	if caBundle != "" {
		c = append(c, "-c", "http.sslCAInfo="+caBundle)
	}
	return c
}

// run runs git and returns its captured output. A failure is a *gitError; output past the limit
// stops git and returns what was read with errOutputLimit.
func (m *Mirrors) run(ctx context.Context, r gitRun) ([]byte, error) {
	args := append([]string(nil), m.config...)
	env := m.env
	if r.local {
		args = append(args, "-c", "protocol.file.allow=always")
		env = m.envLocal
	}
	if r.dir != "" {
		args = append(args, "--git-dir="+r.dir)
	}
	args = append(args, r.args...)
	m.runCount.Add(1)
	cmd := exec.CommandContext(ctx, m.git, args...)
	cmd.Env = env
	cmd.Dir = m.cfg.Dir
	cmd.Stdin = r.stdin
	cmd.WaitDelay = waitDelay
	ownProcessGroup(cmd)
	var out *capBuffer
	if r.stdout != nil {
		cmd.Stdout = r.stdout
	} else {
		limit := r.limit
		if limit <= 0 {
			limit = defaultOutputLimit
		}
		out = &capBuffer{limit: limit}
		cmd.Stdout = out
	}
	stderr := &tailBuffer{max: stderrTail}
	cmd.Stderr = stderr
	err := cmd.Run()
	var captured []byte
	if out != nil {
		captured = out.buf.Bytes()
		if out.over {
			return captured, fmt.Errorf("git %s: %w (%d bytes)", subcommand(r.args), errOutputLimit, out.limit)
		}
	}
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return captured, &gitError{cmd: subcommand(r.args), code: code, stderr: stderr.String(), err: err}
	}
	return captured, nil
}

// subcommand names a git call in messages: its first argument after any -c options.
func subcommand(args []string) string {
	for len(args) >= 2 && args[0] == "-c" {
		args = args[2:]
	}
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// capBuffer keeps at most limit bytes and then fails the write, which closes the pipe and stops
// git instead of letting it write on into nothing.
type capBuffer struct {
	limit int
	buf   bytes.Buffer
	over  bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.limit - c.buf.Len(); len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		c.over = true
		return max(room, 0), errOutputLimit
	}
	return c.buf.Write(p)
}

// tailBuffer keeps the last max bytes written to it, where git's error is.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if len(t.b) > t.max {
		return string(t.b[len(t.b)-t.max:])
	}
	return string(t.b)
}

// batchCheck asks `git cat-file --batch-check` about each expression (validated by the caller:
// no spaces or newlines) and returns one answer per expression: the object's SHA and type, or
// an empty SHA with type "missing" or "ambiguous".
func (m *Mirrors) batchCheck(ctx context.Context, dir string, exprs ...string) ([]objectInfo, error) {
	in := strings.Join(exprs, "\n") + "\n"
	out, err := m.run(ctx, gitRun{dir: dir, args: []string{"cat-file", "--batch-check"}, stdin: strings.NewReader(in)})
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(exprs) {
		return nil, fmt.Errorf("git cat-file --batch-check: %d answers to %d questions", len(lines), len(exprs))
	}
	infos := make([]objectInfo, len(exprs))
	for i, l := range lines {
		f := strings.Fields(l)
		switch {
		case strings.HasSuffix(l, " missing"):
			infos[i] = objectInfo{typ: "missing"}
		case strings.HasSuffix(l, " ambiguous"):
			infos[i] = objectInfo{typ: "ambiguous"}
		case len(f) == 3 && len(f[0]) == 40 && isHex(f[0]):
			size, _ := strconv.ParseInt(f[2], 10, 64)
			infos[i] = objectInfo{sha: f[0], typ: f[1], size: size}
		default:
			return nil, fmt.Errorf("git cat-file --batch-check: unexpected answer %q", printable(l, 100))
		}
	}
	return infos, nil
}

// objectInfo is one answer of batchCheck.
type objectInfo struct {
	sha, typ string
	size     int64
}

// dirSize is the bytes of the files under dir; files vanishing during the walk are skipped.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
