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
	defaultRefetchAfter      = time.Minute
	defaultArchiveCacheBytes = 1 << 30
)

// Bounds of the in-memory caches and of concurrency.
const (
	// parallelFetches is how many repositories are fetched at once; more would only share the
	// same network link and disk.
	parallelFetches = 2
	commitCacheSize = 4096
	// relationCacheSize and diffCacheSize bound entries; diffCacheBytes bounds the diffs' text,
	// which can be large.
	relationCacheSize = 1024
	diffCacheSize     = 64
	diffCacheBytes    = 64 << 20
	// sizePollEvery is how often a fetch's mirror is measured against MaxBytes.
	sizePollEvery = 200 * time.Millisecond
	// repoFile, in each mirror, names the repository it mirrors, for people looking at Dir.
	repoFile = "shoal-repo"
)

// errClosed: the mirrors were closed.
var errClosed = errors.New("gitmirror: closed")

// Mirrors is the set of repository mirrors under Config.Dir. It is safe for concurrent use.
//
// Locks: mu guards closed, repos and the repoState fields marked so. No lock is held while git
// runs except a repoState's keepMu, and no two locks are ever held together, so there is no
// lock order to keep.
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

	// Test seams: the clock, the size poll interval and counts of the expensive git calls.
	now          func() time.Time
	pollEvery    time.Duration
	fetchCount   atomic.Int64
	archiveCount atomic.Int64

	mu     sync.Mutex
	closed bool
	repos  map[string]*repoState // by target.canon

	commits   *lru[Commit]
	relations *lru[Relation]
	diffs     *lru[*Diff]
	archives  *archiveCache
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

	// keepMu is held shared by Keep and exclusively by the cleanup after a failed fetch, so the
	// cleanup's removal of stale lock files never removes one a Keep is using.
	keepMu sync.RWMutex
}

// headInfo is a mirror's default branch.
type headInfo struct {
	name, sha string
}

// flight is work in progress that later callers wait for instead of repeating it.
type flight struct {
	done chan struct{}
	err  error
}

// New checks cfg (the git binary present, the allowed entries well formed) and returns the
// mirrors, creating Dir if need be.
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
		now:       time.Now,
		pollEvery: sizePollEvery,
		repos:     map[string]*repoState{},
		commits:   newLRU[Commit](commitCacheSize, 0, nil),
		relations: newLRU[Relation](relationCacheSize, 0, nil),
		diffs:     newLRU(diffCacheSize, diffCacheBytes, diffCost),
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
	m.env = gitEnv(home, "https")
	m.envLocal = gitEnv(home, "https:file")
	m.config = gitConfig(ca)
	if err := m.checkVersion(); err != nil {
		return nil, err
	}
	if err := removeTemps(dir); err != nil {
		return nil, err
	}
	if m.archives, err = openArchiveCache(filepath.Join(dir, "archives"), cfg.ArchiveCacheBytes); err != nil {
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
// under home and returns its path.
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
	path := filepath.Join(home, "ca-bundle.pem")
	if err := os.WriteFile(path, bundle, 0o644); err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	return path, nil
}

// removeTemps removes the mirrors half made by a server that stopped during a first fetch.
func removeTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("gitmirror: read %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "tmp-") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("gitmirror: remove %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// Close ends the fetches in progress and waits for them. Calls after Close fail.
func (m *Mirrors) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.fetches.Wait()
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
		sum := sha256.Sum256([]byte(t.canon))
		st = &repoState{t: t, dir: filepath.Join(m.cfg.Dir, hex.EncodeToString(sum[:12])+".git")}
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
