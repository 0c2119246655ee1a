// Package books holds the opening books a server serves to its workers: the ones Shoal ships,
// embedded in the binary, and the ones an operator adds, as files in a directory (dropped there
// or uploaded by an approver). Each book has its checksum, fishtest's "sri"
// (protocol.BookSRI), which a run's tasks carry and workers check.
package books

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

//go:generate go run ../worker/match/internal/genbook -o shipped/shoal_openings_v1.epd

// shipped are the books Shoal ships, regenerable with `go generate ./books`.
//
//go:embed shipped/*.epd
var shipped embed.FS

// Shipped is the books Shoal ships, by file name: the server serves them, and the worker plays
// them without asking the server.
var Shipped fs.FS = func() fs.FS {
	sub, err := fs.Sub(shipped, "shipped")
	if err != nil {
		panic(err) // a constant directory of the embedded files
	}
	return sub
}()

// Default book names: fishtest's, once the operator holds it, and Shoal's own otherwise.
const (
	FishtestDefault = "UHO_Lichess_4852_v1.epd"
	ShippedDefault  = "shoal_openings_v1.epd"
)

// MaxSize bounds a book file, uploaded or dropped in: fishtest's largest books are tens of
// megabytes.
const MaxSize = 512 << 20

// Errors of Store.Add.
var (
	// ErrBadName: not a book's file name (see ValidName).
	ErrBadName = errors.New("not a book file name")
	// ErrExists: a book of that name is held already.
	ErrExists = errors.New("book already held")
	// ErrChecksum: the file's checksum differs from the one books.json gives for that name.
	ErrChecksum = errors.New("book checksum differs from books.json")
	// ErrEmpty: the file holds no position.
	ErrEmpty = errors.New("book holds no position")
	// ErrTooLarge: the file is larger than MaxSize.
	ErrTooLarge = errors.New("book too large")
	// ErrNotFound: no such book is held.
	ErrNotFound = errors.New("no such book")
)

// Book is a book the server holds.
type Book struct {
	Name string
	// SRI is its checksum as fishtest's books.json gives it (protocol.BookSRI).
	SRI  string
	Size int64
	// Positions counts its openings: the position lines of an EPD book, the games of a PGN one.
	Positions int
	// Shipped: one of the books Shoal ships, not a file of the operator's.
	Shipped bool
	// Added is when the file was last written (zero for a shipped book).
	Added time.Time
}

// ValidName checks a book's file name: letters, digits, dots, dashes and underscores, ending in
// .epd or .pgn, not starting with a dot, at most 100 bytes. Workers fetch books by name, so a
// path is refused.
func ValidName(name string) error {
	stem, ok := strings.CutSuffix(name, ".epd")
	if !ok {
		stem, ok = strings.CutSuffix(name, ".pgn")
	}
	if !ok || stem == "" || len(name) > 100 || strings.HasPrefix(name, ".") ||
		strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("%w: %q (want letters, digits, '.', '-' or '_', ending in .epd or .pgn)", ErrBadName, name)
	}
	return nil
}

// Store is the books a server holds: the shipped ones and the files of its directory. It is safe
// for concurrent use.
type Store struct {
	dir    string
	logger *slog.Logger

	// scan serialises Rescan (and so Add and SetKnown), so that an older scan never publishes
	// over a newer one. Lock order: scan, then mu.
	scan sync.Mutex

	mu    sync.RWMutex
	books map[string]Book   // what is served, by name
	known map[string]string // name -> sri from books.json
	// scanned remembers each file's book by size and modification time, so that a rescan
	// hashes only what changed.
	scanned map[string]scannedFile
}

type scannedFile struct {
	size    int64
	modTime time.Time
	book    Book
}

// Open returns the store of the books in dir (created if missing) and those Shoal ships.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("books: %w", err)
	}
	s := &Store{dir: dir, logger: logger, books: map[string]Book{}, known: map[string]string{},
		scanned: map[string]scannedFile{}}
	if err := s.Rescan(); err != nil {
		return nil, err
	}
	return s, nil
}

// shippedBooks reads the books Shoal ships.
func shippedBooks() map[string]Book {
	out := map[string]Book{}
	entries, _ := fs.ReadDir(Shipped, ".")
	for _, e := range entries {
		f, err := Shipped.Open(e.Name())
		if err != nil {
			continue // cannot happen: the names come from the same FS
		}
		b, err := measure(e.Name(), f)
		f.Close()
		if err != nil {
			continue
		}
		b.Shipped = true
		out[b.Name] = b
	}
	return out
}

// Rescan reads the directory again: new files are added, changed ones measured again, removed
// ones dropped. A file whose name is not a book's, or one of a shipped book, or whose checksum
// differs from books.json's, is left out with a warning.
func (s *Store) Rescan() error {
	s.scan.Lock()
	defer s.scan.Unlock()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("books: read %s: %w", s.dir, err)
	}
	s.mu.RLock()
	known := maps.Clone(s.known)
	scanned := maps.Clone(s.scanned)
	s.mu.RUnlock()

	next := shippedBooks()
	seen := map[string]scannedFile{}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || ValidName(name) != nil {
			continue // temporary files of uploads, and anything else not a book
		}
		if _, ok := next[name]; ok {
			s.logger.Warn("a book file has the name of a book Shoal ships: left out", "file", filepath.Join(s.dir, name))
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		sf, ok := scanned[name]
		if !ok || sf.size != info.Size() || !sf.modTime.Equal(info.ModTime()) {
			b, err := measureFile(filepath.Join(s.dir, name))
			if err != nil {
				s.logger.Warn("book file left out", "file", filepath.Join(s.dir, name), "err", err)
				continue
			}
			b.Added = info.ModTime()
			sf = scannedFile{size: info.Size(), modTime: info.ModTime(), book: b}
		}
		seen[name] = sf
		if want, ok := known[name]; ok && want != sf.book.SRI {
			s.logger.Warn("book file left out: its checksum differs from books.json's", "file", filepath.Join(s.dir, name),
				"sri", sf.book.SRI, "books_json_sri", want)
			continue
		}
		next[name] = sf.book
	}
	s.mu.Lock()
	s.books, s.scanned = next, seen
	s.mu.Unlock()
	return nil
}

// SetKnown sets the checksums books.json gives, by book name, and rescans: a file that
// disagrees with them is no longer served.
func (s *Store) SetKnown(sri map[string]string) error {
	s.mu.Lock()
	s.known = maps.Clone(sri)
	s.mu.Unlock()
	return s.Rescan()
}

// Get returns the held book name.
func (s *Store) Get(name string) (Book, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.books[name]
	return b, ok
}

// List returns every held book, by name.
func (s *Store) List() []Book {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.SortedFunc(maps.Values(s.books), func(a, b Book) int { return strings.Compare(a.Name, b.Name) })
}

// Names returns the names of the held books, sorted.
func (s *Store) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.books))
}

// Default is the book of a new test that names none: fishtest's default once the operator holds
// it, else the one Shoal ships.
func (s *Store) Default() string {
	if _, ok := s.Get(FishtestDefault); ok {
		return FishtestDefault
	}
	return ShippedDefault
}

// File is a held book open for reading.
type File interface {
	io.ReadSeekCloser
}

// Open opens the held book name for reading. Errors wrap ErrNotFound.
func (s *Store) Open(name string) (File, Book, error) {
	b, ok := s.Get(name)
	if !ok {
		return nil, Book{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if b.Shipped {
		f, err := Shipped.Open(name)
		if err != nil {
			return nil, Book{}, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return f.(File), b, nil // embed's files seek
	}
	f, err := os.Open(filepath.Join(s.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Book{}, fmt.Errorf("%w: %q (removed from %s)", ErrNotFound, name, s.dir)
	}
	if err != nil {
		return nil, Book{}, fmt.Errorf("open book %s: %w", name, err)
	}
	return f, b, nil
}

// Add stores the book name read from r (at most MaxSize bytes) as a file of the directory and
// returns it. Errors wrap ErrBadName, ErrExists, ErrChecksum, ErrEmpty or ErrTooLarge for what
// the caller sent, and are otherwise I/O errors; a refused book leaves nothing behind.
func (s *Store) Add(name string, r io.Reader) (Book, error) {
	if err := ValidName(name); err != nil {
		return Book{}, err
	}
	if _, ok := s.Get(name); ok {
		return Book{}, fmt.Errorf("%w: %q", ErrExists, name)
	}
	tmp, err := os.CreateTemp(s.dir, ".upload-*")
	if err != nil {
		return Book{}, fmt.Errorf("store book %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	n, err := io.Copy(tmp, io.LimitReader(r, MaxSize+1))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Book{}, fmt.Errorf("store book %s: %w", name, err)
	}
	if n > MaxSize {
		return Book{}, fmt.Errorf("%w: more than %d MiB", ErrTooLarge, MaxSize>>20)
	}
	b, err := measureFile(tmp.Name())
	if err != nil {
		return Book{}, err
	}
	b.Name = name
	s.mu.RLock()
	want, known := s.known[name]
	s.mu.RUnlock()
	if known && want != b.SRI {
		return Book{}, fmt.Errorf("%w: %q has sri %s, books.json says %s", ErrChecksum, name, b.SRI, want)
	}
	// Link, not rename: a book of the same name added meanwhile is not replaced.
	if err := os.Link(tmp.Name(), filepath.Join(s.dir, name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Book{}, fmt.Errorf("%w: %q", ErrExists, name)
		}
		return Book{}, fmt.Errorf("store book %s: %w", name, err)
	}
	if err := s.Rescan(); err != nil {
		return Book{}, err
	}
	got, ok := s.Get(name)
	if !ok {
		return Book{}, fmt.Errorf("store book %s: not held after it was written", name)
	}
	return got, nil
}

// measureFile measures the book in the file at path, named by its base name.
func measureFile(path string) (Book, error) {
	f, err := os.Open(path)
	if err != nil {
		return Book{}, err
	}
	defer f.Close()
	return measure(filepath.Base(path), f)
}

// measure reads a book: its size, checksum (protocol.BookSRI's, computed as the book streams
// by) and openings. A book with none is ErrEmpty.
func measure(name string, r io.Reader) (Book, error) {
	h := protocol.NewBookHash()
	br := bufio.NewReaderSize(r, 64<<10)
	pgn := strings.HasSuffix(name, ".pgn")
	b := Book{Name: name}
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: no book has one, but count it whole.
			rest, err2 := br.ReadBytes('\n')
			line, err = append(bytes.Clone(line), rest...), err2
		}
		if len(line) > 0 {
			b.Size += int64(len(line))
			h.Write(line)
			b.Positions += opening(line, pgn)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Book{}, fmt.Errorf("read book %s: %w", name, err)
		}
	}
	if b.Positions == 0 {
		return Book{}, fmt.Errorf("%w: %q", ErrEmpty, name)
	}
	b.SRI = h.SRI()
	return b, nil
}

// opening counts the openings a line starts: a position line of an EPD book, a game's first tag
// of a PGN one.
func opening(line []byte, pgn bool) int {
	t := bytes.TrimSpace(line)
	switch {
	case pgn && bytes.HasPrefix(t, []byte("[Event ")):
		return 1
	case !pgn && len(t) > 0 && t[0] != '#':
		return 1
	}
	return 0
}
