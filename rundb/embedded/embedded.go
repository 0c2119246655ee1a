// Package embedded runs Shoal's embedded database, FerretDB over SQLite: in this process
// (Server, which `shoal db` and rundb.Open start), or as a child process (Process, `shoal db`
// started by a server), with the lock of its data directory, the front that admits only this
// operating-system user's processes to its TCP address, and the index that makes its _id lookups
// fast (IndexDatabase). It knows nothing of Shoal's documents: rundb opens it and talks to it by
// URI.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// ErrDatabaseInUse means another process (a running `shoal serve` on the embedded database, or
// `shoal db`) holds the embedded database in the data directory.
var ErrDatabaseInUse = errors.New("the embedded database is in use by another process (a running shoal serve or shoal db?)")

// ErrNotLoopback means the embedded database was asked to listen on an address other machines
// could reach. FerretDB's SQLite handler checks no users or passwords, so the embedded database
// listens on loopback only, where its front admits only Shoal's own operating-system user.
var ErrNotLoopback = errors.New("the embedded database has no passwords, so it listens only on a loopback address " +
	"(127.0.0.1, ::1, localhost); to reach it from another machine, forward a port or socket there through SSH " +
	"as the user that runs it (docs/SECURITY.md)")

// Server is Shoal's embedded database: FerretDB with the SQLite handler, running in this
// process, either inside `shoal serve` (rundb.Open starts it) or on its own as `shoal db`. It listens
// on a Unix socket in its own directory (mode 0700), so only this operating-system user reaches
// it, and on a loopback TCP address only when one is given, through a front that admits only
// connections from processes of the same user (peerFront): FerretDB's SQLite handler has no
// users or passwords. Its data directory is locked for as long as it runs, because two FerretDB
// processes writing the same SQLite files would corrupt them. Safe for concurrent use.
type Server struct {
	dir    string
	uri    string // the socket's; tcpURI is the TCP front's, or ""
	tcpURI string
	lock   *os.File
	cancel context.CancelFunc
	done   chan struct{}
	front  *peerFront
	once   sync.Once
}

// lockFileName is the file in the data directory that a running Shoal holds an exclusive flock
// on; it contains that process's pid so that the error message can name it.
const lockFileName = "shoal.lock"

// socketName is the embedded database's Unix socket, in dataDir/db.
const socketName = "mongodb.sock"

// maxSocketPath is the longest Unix socket path Linux takes (sun_path, 108 bytes with its NUL).
const maxSocketPath = 107

// Start locks dataDir, starts FerretDB on a Unix socket with its SQLite files under
// dataDir/db (both in that directory, mode 0700), and, if addr (a loopback HOST:PORT; port 0
// picks a free one) is given, a TCP front for other processes of this user. It returns once
// FerretDB accepts connections; Close stops it. An empty dataDir means "data". The error is
// ErrDatabaseInUse (naming the pid) when another process holds dataDir, and ErrNotLoopback
// when addr is not a loopback address.
func Start(dataDir, addr string, logger *slog.Logger) (*Server, error) {
	abs, lock, err := lockedDataDir(dataDir, addr)
	if err != nil {
		return nil, err
	}
	e, err := start(abs, addr, lock, logger)
	if err != nil {
		unlockDataDir(lock)
	}
	return e, err
}

// StartLocked is Start in a process whose parent locked dataDir and handed it
// the lock file (the embedded database as a child process, StartProcess): it takes no
// lock of its own, and keeps lock open while it runs, so that the lock outlives whichever of
// the two processes dies first. Close releases it.
func StartLocked(dataDir, addr string, lock *os.File, logger *slog.Logger) (*Server, error) {
	abs, err := prepareDataDir(dataDir, addr)
	if err != nil {
		return nil, err
	}
	return start(abs, addr, lock, logger)
}

// lockedDataDir is prepareDataDir, then the data directory's lock.
func lockedDataDir(dataDir, addr string) (string, *os.File, error) {
	abs, err := prepareDataDir(dataDir, addr)
	if err != nil {
		return "", nil, err
	}
	lock, err := lockDataDir(abs)
	return abs, lock, err
}

// prepareDataDir checks addr, and creates dataDir ("data" if empty) and its private database
// directory; it returns dataDir as an absolute path.
func prepareDataDir(dataDir, addr string) (string, error) {
	if addr != "" {
		if err := checkLoopback(addr); err != nil {
			return "", err
		}
	}
	if dataDir == "" {
		dataDir = "data"
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	dbDir := filepath.Join(abs, "db")
	if err := os.MkdirAll(dbDir, 0o700); err != nil {
		return "", fmt.Errorf("create data directory: %w", err)
	}
	// Older versions made it 0750: the socket and the files are this user's alone.
	if err := os.Chmod(dbDir, 0o700); err != nil {
		return "", fmt.Errorf("make %s private: %w", dbDir, err)
	}
	return abs, nil
}

// start starts FerretDB on the locked data directory abs.
func start(abs, addr string, lock *os.File, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	dbDir := filepath.Join(abs, "db")
	sock := filepath.Join(dbDir, socketName)
	if len(sock) > maxSocketPath {
		// A deep data directory: the socket goes to a private directory of its own.
		tmp, err := os.MkdirTemp("", "shoal-db-")
		if err != nil {
			return nil, fmt.Errorf("create the database socket's directory: %w", err)
		}
		sock = filepath.Join(tmp, socketName)
	}
	_ = os.Remove(sock) // left by a process that died; the lock says none runs
	// FerretDB logs every error reply it sends (a duplicate key, say) as a warning, which would
	// drown Shoal's own log; its errors still reach us through the driver.
	fdbLogger := slog.New(levelFloor{Handler: logger.With("component", "ferretdb").Handler(), min: slog.LevelError})
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{Unix: sock},
		Handler:   "sqlite",
		SQLiteURL: "file:" + dbDir + "/",
		Logger:    fdbLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("start embedded database on %s: %w", sock, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Server{dir: abs, lock: lock, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		_ = f.Run(ctx)
	}()
	// The driver reads a "+" of the host part as a space: it must be escaped too.
	e.uri = "mongodb://" + strings.ReplaceAll(url.PathEscape(sock), "+", "%2B") + "/"
	if addr != "" {
		front, err := startPeerFront(addr, sock, os.Getuid(), logger)
		if err != nil {
			cancel()
			<-e.done
			return nil, fmt.Errorf("embedded database: %w", err)
		}
		e.front, e.tcpURI = front, "mongodb://"+front.addr()+"/"
	}
	return e, nil
}

// Dir is the data directory, as an absolute path.
func (e *Server) Dir() string { return e.dir }

// URI is the mongodb:// address of the database's Unix socket.
func (e *Server) URI() string { return e.uri }

// SharedURI is the address other processes of this machine and user use to share the
// database: its TCP front when one was asked for, else its Unix socket's URI.
func (e *Server) SharedURI() string {
	if e.tcpURI != "" {
		return e.tcpURI
	}
	return e.uri
}

// Lost is nil: a database in this process dies only with it.
func (e *Server) Lost() <-chan error { return nil }

// Where says which process runs the database: this one.
func (e *Server) Where() string { return "this process" }

// Gone is false: a database in this process cannot exit before it.
func (e *Server) Gone() bool { return false }

// Close stops FerretDB, waits for it to close its files, then releases the lock. It is safe to
// call more than once.
func (e *Server) Close() {
	e.once.Do(func() {
		if e.front != nil {
			e.front.close()
		}
		e.cancel()
		<-e.done
		unlockDataDir(e.lock)
	})
}

// checkLoopback refuses, before anything listens, an address that is not loopback: an IP
// address of another interface, or none (every interface). A host name passes here; the front
// checks the address it resolved to once it listens.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("embedded database address %q: %w", addr, err)
	}
	if ip, perr := netip.ParseAddr(host); host == "" || (perr == nil && !ip.Unmap().IsLoopback()) {
		return fmt.Errorf("embedded database address %q: %w", addr, ErrNotLoopback)
	}
	return nil
}

// lockDataDir takes an exclusive, non-blocking flock on dir's lock file. The kernel releases it
// when the process dies, so a crashed server never leaves a stale lock behind. When the server
// that wrote its pid there is gone but the lock is still held, its database's process is dying
// with it (StartProcess): the lock is waited for, up to lockHandoverLimit.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(lockHandoverLimit)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		b, _ := os.ReadFile(path)
		holder := strings.TrimSpace(string(b))
		pid, perr := strconv.Atoi(holder)
		if perr != nil || holder == "" {
			holder = "unknown"
		} else if !processAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(lockHandoverPoll)
			continue
		}
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s is locked by pid %s", ErrDatabaseInUse, dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// How long, and how often, lockDataDir waits for the database process of a dead server to exit.
const (
	lockHandoverLimit = 10 * time.Second
	lockHandoverPoll  = 20 * time.Millisecond
)

// processAlive reports whether a process with this pid exists (of any user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func unlockDataDir(f *os.File) {
	_ = f.Truncate(0)
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	_ = f.Close()
}

// levelFloor drops records below min; it lets the embedded database share Shoal's handler
// while saying less than Shoal does. Attributes and groups added with With are applied only to
// a record that passes the floor: the embedded database adds each SQL statement's arguments
// (a whole run's JSON, for a run write) to a logger for a debug record that is never written,
// and a text handler formats attributes as soon as they are added.
type levelFloor struct {
	slog.Handler
	min slog.Level
	// with are the WithAttrs and WithGroup calls made so far, in order, not yet applied.
	with []func(slog.Handler) slog.Handler
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) Handle(ctx context.Context, r slog.Record) error {
	inner := h.Handler
	for _, f := range h.with {
		inner = f(inner)
	}
	return inner.Handle(ctx, r)
}

func (h levelFloor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.then(func(inner slog.Handler) slog.Handler { return inner.WithAttrs(attrs) })
}

func (h levelFloor) WithGroup(name string) slog.Handler {
	return h.then(func(inner slog.Handler) slog.Handler { return inner.WithGroup(name) })
}

// then is h with f applied after its other additions.
func (h levelFloor) then(f func(slog.Handler) slog.Handler) levelFloor {
	return levelFloor{Handler: h.Handler, min: h.min, with: append(slices.Clip(h.with), f)}
}
