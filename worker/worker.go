package worker

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// fishtest's worker timings (worker/worker.py, worker/games.py), before TimeScale.
const (
	heartbeatPeriod    = 120 * time.Second // a beat when nothing was reported for this long
	initialBackoff     = 15 * time.Second  // INITIAL_RETRY_TIME
	maxBackoff         = 900 * time.Second // MAX_RETRY_TIME
	updateRetryDelay   = 15 * time.Second  // UPDATE_RETRY_TIME
	updateAttempts     = 5
	defaultHTTPTimeout = 30 * time.Second // HTTP_TIMEOUT
	// stopFilePoll is how often a backing-off worker looks for the stop file. It is not scaled:
	// it is about a person's patience, not the protocol's clock.
	stopFilePoll = time.Second
)

// ErrNewerProtocol is returned (wrapped) by Run when the server's request_version reports a newer
// protocol than protocol.Version: fishtest's worker would update itself; Shoal's needs a newer
// Shoal.
var ErrNewerProtocol = errors.New("the server speaks a newer worker protocol")

// errAbandoned is the cause of a task's context when a beat said the task is no longer alive.
var errAbandoned = errors.New("task abandoned: the server no longer needs it")

// Worker is one fishtest-protocol worker. Run may be called once; Stop and Info are safe for
// concurrent use, also while Run runs.
type Worker struct {
	cfg  Config
	src  GameSource
	info protocol.WorkerInfo
	// send makes one HTTP call: Config.RoundTripper's RoundTrip, or the client's Do. ownHeader
	// says that each call needs a header of its own (a client with a cookie jar writes to it)
	// instead of the shared jsonHeader.
	send      func(*http.Request) (*http.Response, error)
	ownHeader bool
	// client is a copy of Config.HTTPClient (or the default one) with redirectPolicy, nil
	// when a RoundTripper takes the calls: Fetch's downloads use it without its timeout.
	client *http.Client
	log    *slog.Logger
	obs    Observer
	base   string // ServerURL without a trailing slash
	scale  float64

	// lastInfo is the last worker_info encoded, with its JSON (infoJSON).
	lastInfo atomic.Pointer[encodedInfo]

	running  atomic.Bool
	stopOnce sync.Once
	stopCh   chan struct{}
}

// NewUniqueKey returns a random uuid4 whose first segment is replaced by prefix when prefix is
// not empty (fishtest's uuid_prefix). The prefix should be 2 to 8 letters or digits; New rejects a
// key with any other prefix.
func NewUniqueKey(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	if prefix != "" {
		s = prefix + s[8:]
	}
	return s
}

// New checks cfg, fills its defaults and returns a worker that plays with src. Defaults:
// Concurrency 1, MinThreads 1, MaxMemory 444+396*Concurrency MiB (what fishtest's worker needs
// for STC games), a fresh UniqueKey, WorkerArch "unknown", Compiler "g++" (version 9.3.0), ARCH
// "?", Uname "<GOOS> shoal-worker", TimeScale 1, a client with a 30 s timeout and
// slog.Default(). The client (a copy of HTTPClient, when given) follows no redirect of a POST,
// which carries the password (redirectPolicy). An *EngineSource without a Server gets the
// worker (its books, and the sources it builds, come from the worker's server). The error
// names the first invalid field.
func New(cfg Config, src GameSource) (*Worker, error) {
	if src == nil {
		return nil, errors.New("new worker: nil game source")
	}
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	client := newHTTPClient(cfg.HTTPClient)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	send, ownHeader := client.Do, client.Jar != nil
	if cfg.RoundTripper != nil {
		send, ownHeader, client = cfg.RoundTripper.RoundTrip, false, nil
	}
	gccVersion := cfg.GCCVersion
	if gccVersion == [3]int{} {
		// No compiler is used by a worker that builds nothing; fishtest's minimum g++ keeps
		// servers that check it content.
		gccVersion = [3]int{9, 3, 0}
	}
	w := &Worker{
		cfg:       cfg,
		src:       src,
		send:      send,
		ownHeader: ownHeader,
		client:    client,
		obs:       cfg.Observer,
		base:      strings.TrimRight(cfg.ServerURL, "/"),
		scale:     cfg.TimeScale,
		stopCh:    make(chan struct{}),
		info: protocol.WorkerInfo{
			Uname:        cfg.Uname,
			Architecture: [2]string{strconv.Itoa(strconv.IntSize) + "bit", binaryFormat()},
			Concurrency:  cfg.Concurrency,
			MaxMemory:    cfg.MaxMemory,
			MinThreads:   cfg.MinThreads,
			Username:     cfg.Username,
			Version:      protocol.Version,
			// fishtest's schema wants a Python version; there is no Python here, so this is the
			// Go toolchain's version, which is at least truthful about what runs.
			PythonVersion: goVersion(),
			GCCVersion:    gccVersion,
			Compiler:      cfg.Compiler,
			UniqueKey:     cfg.UniqueKey,
			WorkerArch:    cfg.WorkerArch,
			ARCH:          cfg.ARCH,
		},
	}
	w.log = logger.With("component", "worker", "worker", w.info.LongName())
	if es, ok := src.(*EngineSource); ok && es.Server == nil {
		es.Server = w
	}
	return w, nil
}

// normalized is cfg checked, with its defaults filled (see New); the error names the first
// invalid field.
func (cfg Config) normalized() (Config, error) {
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, fmt.Errorf("new worker: invalid server URL %q: want http://HOST[:PORT] or https://...", cfg.ServerURL)
	}
	switch {
	case cfg.Username == "":
		return Config{}, errors.New("new worker: username is required")
	case cfg.Password == "":
		return Config{}, errors.New("new worker: password is required")
	case cfg.Concurrency < 0:
		return Config{}, fmt.Errorf("new worker: invalid concurrency %d: must be positive", cfg.Concurrency)
	case cfg.MaxMemory < 0:
		return Config{}, fmt.Errorf("new worker: invalid max memory %d MiB: must not be negative", cfg.MaxMemory)
	case cfg.MinThreads < 0:
		return Config{}, fmt.Errorf("new worker: invalid min threads %d: must be positive", cfg.MinThreads)
	case cfg.TimeScale < 0 || math.IsNaN(cfg.TimeScale) || math.IsInf(cfg.TimeScale, 0):
		return Config{}, fmt.Errorf("new worker: invalid time scale %v: must be a positive number", cfg.TimeScale)
	case cfg.MaxTasks < 0:
		return Config{}, fmt.Errorf("new worker: invalid max tasks %d: must not be negative", cfg.MaxTasks)
	case cfg.PGNCompression < gzip.HuffmanOnly || cfg.PGNCompression > gzip.BestCompression:
		return Config{}, fmt.Errorf("new worker: invalid PGN compression %d: want a gzip level from %d to %d", cfg.PGNCompression, gzip.HuffmanOnly, gzip.BestCompression)
	}
	if cfg.PGNCompression == gzip.NoCompression {
		cfg.PGNCompression = gzip.DefaultCompression
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.MinThreads == 0 {
		cfg.MinThreads = 1
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 444 + 396*cfg.Concurrency
	}
	if cfg.UniqueKey == "" {
		cfg.UniqueKey = NewUniqueKey("")
	} else if !protocol.ValidUniqueKey(cfg.UniqueKey) {
		return Config{}, fmt.Errorf("new worker: invalid unique key %q: want a uuid4 whose first segment may be 2 to 8 letters or digits", cfg.UniqueKey)
	}
	if cfg.WorkerArch == "" {
		cfg.WorkerArch = "unknown"
	} else if cfg.WorkerArch != "unknown" && !slices.Contains(protocol.SupportedArches(), cfg.WorkerArch) {
		return Config{}, fmt.Errorf("new worker: invalid worker arch %q: want unknown or one of %v", cfg.WorkerArch, protocol.SupportedArches())
	}
	if cfg.Compiler == "" {
		cfg.Compiler = "g++"
	} else if cfg.Compiler != "g++" && cfg.Compiler != "clang++" {
		return Config{}, fmt.Errorf("new worker: invalid compiler %q: want g++ or clang++", cfg.Compiler)
	}
	if cfg.ARCH == "" {
		cfg.ARCH = "?"
	}
	if cfg.Uname == "" {
		cfg.Uname = runtime.GOOS + " shoal-worker"
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	return cfg, nil
}

// newHTTPClient is the worker's client: a copy of given, or one with a 30 s timeout, that follows
// no redirect of a POST.
func newHTTPClient(given *http.Client) *http.Client {
	var client *http.Client
	if given != nil {
		// A copy, to change its redirects without changing the caller's (a fleet's, shared).
		c := *given
		client = &c
	} else {
		// Idle connections close before the server's idle timeout (90 s by default) would close
		// them under a request.
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.IdleConnTimeout = 60 * time.Second
		client = &http.Client{Timeout: defaultHTTPTimeout, Transport: transport}
	}
	client.CheckRedirect = redirectPolicy(client.CheckRedirect)
	return client
}

// errRedirectedPOST refuses the redirect of a POST.
var errRedirectedPOST = errors.New("the server redirected a POST, which carries the worker's password: not followed")

// redirectPolicy is the worker's http.Client.CheckRedirect: a POST (every worker API call, a
// source request) is never redirected, since its body carries the password and Go's client
// sends it again on a 307 or 308, to whatever host the redirect names. A GET (a network, a
// book) may be, as a server redirects /api/nn/NAME to its nn_url host; it carries no
// credentials, and must not. Then next (the caller's policy, if any; else Go's ten redirects)
// decides.
func redirectPolicy(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if via[0].Method != http.MethodGet {
			return fmt.Errorf("%w (%s %s to %s)", errRedirectedPOST, via[0].Method, via[0].URL.Path, req.URL.Redacted())
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// binaryFormat is the second element of Python's platform.architecture() for this OS.
func binaryFormat() string {
	switch runtime.GOOS {
	case "windows":
		return "WindowsPE"
	case "darwin", "ios":
		return "" // Python reports ("64bit", "") on macOS
	default:
		return "ELF"
	}
}

// goVersion parses runtime.Version() ("go1.26.3") into three numbers; a development toolchain
// gives zeros.
func goVersion() [3]int {
	var v [3]int
	s, _, _ := strings.Cut(strings.TrimPrefix(runtime.Version(), "go"), " ")
	for i, part := range strings.SplitN(s, ".", 3) {
		n, err := strconv.Atoi(strings.TrimFunc(part, func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil || n < 0 {
			return [3]int{}
		}
		v[i] = n
	}
	return v
}

// Info returns the worker_info the worker sends with every call.
func (w *Worker) Info() protocol.WorkerInfo { return w.info }

// speedReporter is a GameSource that measures this machine's speed (EngineSource's bench).
type speedReporter interface {
	// NPS is the last measured nodes per second and thread; 0 before the first measure.
	NPS() float64
}

// currentInfo is the worker_info a call sends: Info, with the speed the game source last
// measured, as fishtest's worker reports its bench's.
func (w *Worker) currentInfo() protocol.WorkerInfo {
	info := w.info
	if s, ok := w.src.(speedReporter); ok {
		info.NPS = s.NPS()
	}
	return info
}

// Stop asks the worker to finish the batch it is playing, report it, release its task with
// failed_task and return nil from Run. A worker waiting between requests returns at once. Stop
// may be called any number of times, before or during Run.
func (w *Worker) Stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

// stopReason says why the worker should stop gracefully ("" when it should not): Stop was called
// or the stop file exists.
func (w *Worker) stopReason() string {
	select {
	case <-w.stopCh:
		return "a shutdown request"
	default:
	}
	if w.cfg.StopFile != "" {
		if _, err := os.Stat(w.cfg.StopFile); err == nil {
			return "'" + filepath.Base(w.cfg.StopFile) + "'"
		}
	}
	return ""
}

// scaled divides a fishtest period by TimeScale.
// retryDelay is the wait between two attempts of a call that must reach the server.
func (w *Worker) retryDelay() time.Duration {
	if w.cfg.RetryDelay > 0 {
		return w.cfg.RetryDelay
	}
	return w.scaled(updateRetryDelay)
}

func (w *Worker) scaled(d time.Duration) time.Duration {
	// However hard time is compressed, a worker never calls the server in a tight loop.
	return max(time.Duration(float64(d)/w.scale), minScaledPeriod)
}

// minScaledPeriod is the shortest wait a compressed period becomes; minHeartbeat the shortest
// heartbeat period, so that beats never go out back to back.
const (
	minScaledPeriod = time.Millisecond
	minHeartbeat    = 100 * time.Millisecond
)

// Run works until ctx ends, Stop is called, the stop file appears or MaxTasks tasks were taken,
// with fishtest's loop: request_version, request_task, play the task, and back off from 15 s to
// 900 s (divided by TimeScale) after every call that did not give a task or after a task failed.
//
// ctx ending is a vanished worker: Run returns ctx.Err() at once and sends nothing more (the
// heartbeat stops too). A graceful stop finishes and reports the current batch, sends failed_task
// for the rest of the task ("Task stopped by ..."), uploads the PGN, and returns nil. Run returns
// an error wrapping ErrNewerProtocol when the server is newer, and an error when request_version
// is refused (bad credentials, blocked account), as fishtest's worker quits then. Run may be
// called only once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	delay := w.scaled(initialBackoff)
	tasks := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if reason := w.stopReason(); reason != "" {
			w.log.Info("Stopped", "by", reason)
			return nil
		}
		gotTask, success, paced, err := w.fetchAndHandleTask(ctx)
		if err != nil {
			return err
		}
		if gotTask {
			tasks++
			if w.cfg.MaxTasks > 0 && tasks >= w.cfg.MaxTasks {
				w.log.Info("Done: reached the task limit", "tasks", tasks)
				return nil
			}
		}
		if reason := w.stopReason(); reason != "" {
			w.log.Info("Stopped", "by", reason)
			return nil
		}
		if success {
			delay = w.scaled(initialBackoff)
			continue
		}
		if paced >= 0 {
			// The server said how long to wait: it spreads a returning fleet itself.
			w.log.Info("Waiting before retrying, as the server asks", "delay", paced)
			if err := w.backoff(ctx, paced); err != nil {
				return err
			}
			continue
		}
		w.log.Info("Waiting before retrying", "delay", delay)
		if err := w.backoff(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, w.scaled(maxBackoff))
	}
}

// backoff sleeps for d, returning early (with nil) for a graceful stop and with ctx.Err() when
// ctx ends.
func (w *Worker) backoff(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	var poll <-chan time.Time
	if w.cfg.StopFile != "" {
		t := time.NewTicker(stopFilePoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.stopCh:
			return nil
		case <-timer.C:
			return nil
		case <-poll:
			if w.stopReason() != "" {
				return nil
			}
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// fetchAndHandleTask is one turn of fishtest's loop. gotTask is true when request_task gave a
// task; success false means back off: for paced (when not negative) if the server said how long
// in retry_after, else by fishtest's backoff. err is fatal: ctx ended, a newer protocol, or
// credentials refused.
func (w *Worker) fetchAndHandleTask(ctx context.Context) (gotTask, success bool, paced time.Duration, err error) {
	paced = -1
	if ok, err := w.verifyVersion(ctx); !ok || err != nil {
		return false, false, paced, err
	}

	r, err := w.post(ctx, "request_task", protocol.Request{Password: w.cfg.Password, WorkerInfo: w.currentInfo()})
	if err != nil {
		return false, false, paced, ctx.Err()
	}
	if r.hasError() {
		return false, false, paced, nil
	}
	if r.has("task_waiting") {
		w.log.Info("No tasks available at this time, waiting...")
		if secs, ok := r.m["retry_after"].(float64); ok && secs >= 0 {
			paced = min(time.Duration(secs*float64(time.Second)), w.scaled(maxBackoff))
		}
		return false, false, paced, nil
	}
	var tr protocol.TaskReply
	if err := r.decode(&tr); err != nil || tr.Run == nil || tr.TaskID == nil {
		w.log.Warn("Invalid reply to request_task: no run or task_id", "err", err)
		return false, false, paced, nil
	}
	success, err = w.handleTask(ctx, tr.Run, *tr.TaskID)
	return true, success, paced, err
}

// verifyVersion is fishtest's verify_worker_version: ok false without error means back off
// (the server could not be reached or its reply was not valid).
func (w *Worker) verifyVersion(ctx context.Context) (ok bool, err error) {
	type access struct {
		Username string `json:"username"`
	}
	r, err := w.post(ctx, "request_version", struct {
		Password   string `json:"password"`
		WorkerInfo access `json:"worker_info"`
	}{w.cfg.Password, access{w.cfg.Username}})
	if err != nil {
		return false, ctx.Err()
	}
	if msg, bad := r.errorMessage(); bad {
		if r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
			// Too many failed logins from this address (perhaps another machine's), or a
			// server going away: not a verdict on this worker, so back off and ask again.
			w.log.Warn("request_version: the server asks to wait", "error", msg)
			return false, nil
		}
		return false, fmt.Errorf("request_version: the server refused the worker: %s", msg)
	}
	var vr protocol.VersionReply
	if err := r.decode(&vr); err != nil || !r.has("version") {
		w.log.Warn("Invalid reply to request_version: no version", "err", err)
		return false, nil
	}
	if vr.Version > protocol.Version {
		return false, fmt.Errorf("request_version: server protocol %d, this worker's %d: %w; update Shoal",
			vr.Version, protocol.Version, ErrNewerProtocol)
	}
	return true, nil
}
