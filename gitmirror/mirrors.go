package gitmirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the Config fields left zero.
const (
	defaultFetchTimeout      = 10 * time.Minute
	defaultMaxBytes          = 2 << 30
	defaultMaxRepos          = 1000
	defaultRefetchAfter      = time.Minute
	defaultArchiveCacheBytes = 1 << 30
)

// Bounds of the in-memory caches and of concurrency.
const (
	// parallelFetches is how many repositories are fetched at once; more would only share the
	// same network link and disk.
	parallelFetches = 2
	// maxWaitingFetches bounds the fetches waiting for one of those; past it a fetch is
	// refused at once rather than queued behind minutes of others.
	maxWaitingFetches = 16
	// parallelReads bounds the git processes the reads of run pages (Commit, Relation, Diff)
	// run at once, which anyone may ask for.
	parallelReads = 4
	// failureMemory is how long a failed Diff or Relation is answered with its error without
	// running git again.
	failureMemory    = time.Minute
	failureCacheSize = 1024
	commitCacheSize  = 4096
	// relationCacheSize and diffCacheSize bound entries; diffCacheBytes bounds the diffs' text,
	// which can be large.
	relationCacheSize = 1024
	diffCacheSize     = 64
	diffCacheBytes    = 64 << 20
	// sizePollEvery is how often a fetch's mirror is measured against MaxBytes.
	sizePollEvery = 200 * time.Millisecond
	// repoFile, in each mirror, names the repository it mirrors, for people looking at Dir.
	repoFile = "shoal-repo"
	// lockFile, in Dir, is locked by the one Mirrors that writes there.
	lockFile = "shoal-mirrors.lock"
)

// errClosed: the mirrors were closed.
var errClosed = errors.New("gitmirror: closed")

// Mirrors is the set of repository mirrors under Config.Dir. It is safe for concurrent use.
//
// Locks: writerMu is taken before mu and before the archive cache's; mu guards closed, repos,
// the counts below it and the repoState fields marked so; a repoState's keepMu is taken with
// no other lock held. No lock is held while git runs except writerMu (while a new writer
// cleans up) and keepMu.
type Mirrors struct {
	cfg      Config
	git      string   // the git binary's path
	env      []string // git's whole environment
	envLocal []string // the same, allowing the file protocol
	config   []string // -c options on every git command line
	rules    []allowRule
	log      *slog.Logger

	// ctx ends with Close, and every fetch with it; fetches counts the fetch goroutines.
	ctx     context.Context
	cancel  context.CancelFunc
	fetches sync.WaitGroup
	// sem holds a token per fetch in progress, bounding fetches of different repositories.
	sem chan struct{}
	// readSem holds a token per read of a run page computing (parallelReads).
	readSem chan struct{}

	// writerMu serialises becoming the writer; lock is Dir's lock file, held while writer.
	writerMu       sync.Mutex
	writer         atomic.Bool
	lock           *os.File
	readOnlyLogged atomic.Bool

	// Test seams: the clock, the size poll interval, counts of the expensive git calls and a
	// hook run at the start of each diff computed.
	now          func() time.Time
	pollEvery    time.Duration
	fetchCount   atomic.Int64
	archiveCount atomic.Int64
	diffCount    atomic.Int64
	runCount     atomic.Int64
	diffHook     func()

	mu           sync.Mutex
	closed       bool
	repos        map[string]*repoState // by target.canon
	flights      int                   // fetches running or waiting for a token of sem
	mirrorCount  int                   // mirrors in Dir, counted when this became the writer
	firstFetches int                   // first fetches in flight, each one more mirror if it succeeds

	commits       *lru[Commit]
	relations     *lru[Relation]
	diffs         *lru[*Diff]
	failures      *lru[failure]
	commitFlights flightGroup[Commit]
	relFlights    flightGroup[Relation]
	diffFlights   flightGroup[*Diff]
	archives      *archiveCache
}

// repoState is what the mirrors remember of one repository between calls.
type repoState struct {
	t   target
	dir string // the bare mirror

	// Guarded by Mirrors.mu.
	lastAttempt time.Time // start of the last fetch, successful or not
	lastErr     error     // its error
	flight      *flight   // the fetch in progress, if any
	head        *headInfo // the default branch as of the last fetch; nil: read it again
	gen         uint64    // fetches ended, so that a head read during one is not remembered
	//                       and a failure remembered before one is forgotten

	// keepMu is held shared by Keep and exclusively by the undoing of a fetch, so that its
	// removal of stale lock files never removes one a Keep is using, nor its removal of the
	// fetch's packs an object a Keep just made a ref to (kept counts the Keeps that did).
	keepMu sync.RWMutex
	kept   atomic.Uint64
}

// headInfo is a mirror's default branch.
type headInfo struct {
	name, sha string
	// read is when it was read, byWriter whether this instance was the writer then: one that
	// was not sees no fetch end, so it reads the default branch again after RefetchAfter.
	read     time.Time
	byWriter bool
}

// flight is work in progress that later callers wait for instead of repeating it.
type flight struct {
	done chan struct{}
	err  error
	// first: a fetch of a repository not mirrored yet, counted in Mirrors.firstFetches.
	first bool
}

// New checks cfg (the git binary present, the allowed entries well formed) and returns the
// mirrors, creating Dir if need be. Another instance may be writing in Dir: New only creates
// directories there and writes git's CA bundle, and Dir's lock is taken, and what an
// interrupted writer left removed, on the first write (see Config.Dir).
func New(cfg Config) (*Mirrors, error) {
	if cfg.Dir == "" {
		return nil, errors.New("gitmirror: Config.Dir is empty")
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = defaultFetchTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = defaultMaxBytes
	}
	if cfg.MaxRepos <= 0 {
		cfg.MaxRepos = defaultMaxRepos
	}
	if cfg.RefetchAfter <= 0 {
		cfg.RefetchAfter = defaultRefetchAfter
	}
	if cfg.ArchiveCacheBytes <= 0 {
		cfg.ArchiveCacheBytes = defaultArchiveCacheBytes
	}
	if cfg.Git == "" {
		cfg.Git = "git"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mirrors{
		cfg:       cfg,
		log:       log.With("component", "gitmirror"),
		sem:       make(chan struct{}, parallelFetches),
		readSem:   make(chan struct{}, parallelReads),
		now:       time.Now,
		pollEvery: sizePollEvery,
		repos:     map[string]*repoState{},
		commits:   newLRU[Commit](commitCacheSize, 0, nil),
		relations: newLRU[Relation](relationCacheSize, 0, nil),
		diffs:     newLRU(diffCacheSize, diffCacheBytes, diffCost),
		failures:  newLRU[failure](failureCacheSize, 0, nil),
	}
	for _, e := range cfg.Allowed {
		r, err := parseAllowed(e)
		if err != nil {
			return nil, fmt.Errorf("gitmirror: %w", err)
		}
		m.rules = append(m.rules, r)
	}
	git, err := exec.LookPath(cfg.Git)
	if err != nil {
		return nil, fmt.Errorf("gitmirror: find git %q (install git 2.24 or later, or set its path): %w", cfg.Git, err)
	}
	m.git = git
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("gitmirror: %w", err)
	}
	m.cfg.Dir = dir
	home := filepath.Join(dir, ".home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("gitmirror: create %s: %w", home, err)
	}
	ca := ""
	if cfg.CAFile != "" {
		if ca, err = writeCABundle(home, cfg.CAFile); err != nil {
			return nil, fmt.Errorf("gitmirror: %w", err)
		}
	}
	m.env = gitEnv(home, "https", os.Getenv)
	m.envLocal = gitEnv(home, "https:file", os.Getenv)
	m.config = gitConfig(ca)
	if err := m.checkVersion(); err != nil {
		return nil, err
	}
	if m.archives, err = newArchiveCache(filepath.Join(dir, "archives"), cfg.ArchiveCacheBytes); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// checkVersion refuses a git older than 2.24, which would take "--end-of-options", the
// package's guard against arguments read as options, for a revision.
func (m *Mirrors) checkVersion() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := m.run(ctx, gitRun{args: []string{"version"}})
	if err != nil {
		return fmt.Errorf("gitmirror: run %s (install git 2.24 or later): %w", m.git, err)
	}
	v := strings.TrimSpace(strings.TrimPrefix(string(out), "git version "))
	parts := strings.SplitN(v, ".", 3)
	if len(parts) >= 2 {
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 == nil && err2 == nil && (major > 2 || major == 2 && minor >= 24) {
			return nil
		}
	}
	return fmt.Errorf("gitmirror: %s is version %q; install git 2.24 or later", m.git, printable(v, 40))
}

// caBundles are where Linux distributions keep the system's certificate authorities. git
// takes one CA file, so the operator's CAFile is added to the system's in a bundle of our own.
var caBundles = [...]string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/ssl/cert.pem",
}

// writeCABundle writes the system's certificate authorities and those of caFile into one file
// under home and returns its path. The file is named for its contents and written whole by a
// rename, so that instances sharing home never see each other's half written.
func writeCABundle(home, caFile string) (string, error) {
	extra, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("read CAFile: %w", err)
	}
	if !strings.Contains(string(extra), "-----BEGIN CERTIFICATE-----") {
		return "", fmt.Errorf("CAFile %s: no PEM certificate in it", caFile)
	}
	var bundle []byte
	for _, f := range caBundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, extra...)
	sum := sha256.Sum256(bundle)
	path := filepath.Join(home, "ca-bundle-"+hex.EncodeToString(sum[:8])+".pem")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(bundle) {
		return path, nil
	}
	tmp, err := os.CreateTemp(home, "tmp-ca-bundle-*")
	if err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.Write(bundle)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	return path, nil
}

// Close ends the fetches in progress, waits for them and lets go of Dir's lock, if this was the
// writer. Calls after Close fail.
func (m *Mirrors) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.fetches.Wait()
	m.writerMu.Lock()
	defer m.writerMu.Unlock()
	if m.lock != nil {
		m.writer.Store(false)
		m.lock.Close()
		m.lock = nil
	}
	return nil
}

// repo checks repo against the policy and returns its state.
func (m *Mirrors) repo(repo string) (*repoState, error) {
	t, err := m.policy(repo)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	st := m.repos[t.canon]
	if st == nil {
		st = &repoState{t: t, dir: m.mirrorDir(t.canon)}
		m.repos[t.canon] = st
	}
	return st, nil
}

// mirrored reports whether the repository's mirror exists; it appears whole, by a rename, after
// its first fetch.
func (st *repoState) mirrored() bool {
	_, err := os.Stat(st.dir)
	return err == nil
}

// notMirrored is the error of a read from a mirror that does not exist yet.
func (st *repoState) notMirrored() error {
	return fmt.Errorf("%s: %w: not mirrored yet (resolve a ref of it first)", st.t.canon, ErrUnknownRef)
}

// lastFetched says when the mirror was last fetched, for messages: git leaves FETCH_HEAD
// behind on every fetch.
func (st *repoState) lastFetched() string {
	info, err := os.Stat(filepath.Join(st.dir, "FETCH_HEAD"))
	if err != nil {
		return "never fetched"
	}
	return "last fetched " + info.ModTime().UTC().Format(time.RFC3339)
}
