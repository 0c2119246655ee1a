package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build"
	"github.com/shoal-chess/shoal/worker/match"
)

// Bounds of a book from the server: fishtest's largest are tens of megabytes.
const (
	maxBookBytes = 512 << 20
	bookTimeout  = 10 * time.Minute
)

// loadedBook is a book read for a task, kept for the next task that names it.
type loadedBook struct {
	name, sri string
	book      match.Book
}

// loadBook finds the book a run names, checked against the run's sri (book_sri) when it gives
// one, in this order: the operator's Books directory (unchecked: the operator's own), the
// worker's Dir/books, the books the worker ships, and last the server, whose copy is kept in
// Dir/books. A book the server does not hold fails the task with ErrNoBook naming it; so does a
// PGN book, which the worker cannot read yet. The last book read is kept for the next task.
func (s *EngineSource) loadBook(ctx context.Context, name, sri string) (match.Book, error) {
	if err := match.CheckBookName(name); err != nil {
		return nil, err
	}
	if strings.HasSuffix(strings.ToLower(name), ".pgn") {
		return nil, fmt.Errorf("%w: the run's book %s is a PGN book, which this worker cannot read yet (EPD books only)", match.ErrNoBook, name)
	}
	if s.lastBook.name == name && s.lastBook.sri == sri && s.lastBook.book != nil {
		return s.lastBook.book, nil
	}
	b, err := s.findBook(ctx, name, sri)
	if err != nil {
		return nil, err
	}
	s.lastBook = loadedBook{name: name, sri: sri, book: b}
	return b, nil
}

func (s *EngineSource) findBook(ctx context.Context, name, sri string) (match.Book, error) {
	if s.Books != "" {
		data, err := os.ReadFile(filepath.Join(s.Books, name))
		if err == nil {
			return parseBook(name, "the books directory", data)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("book %s: %w", name, err)
		}
	}
	matches := func(data []byte) bool { return sri == "" || protocol.BookSRI(data) == sri }
	kept := ""
	if s.Dir != "" {
		kept = filepath.Join(s.Dir, "books", name)
		if data, err := os.ReadFile(kept); err == nil && matches(data) {
			return parseBook(name, kept, data)
		}
	}
	if data, ok := match.ShippedBook(name); ok && matches(data) {
		return parseBook(name, "the books the worker ships", data)
	}
	if s.Server == nil {
		return nil, fmt.Errorf("%w: %q is neither in the books directory nor one of the books the worker ships (%s), and there is no server to ask",
			match.ErrNoBook, name, strings.Join(match.ShippedBooks(), ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, bookTimeout)
	defer cancel()
	data, err := build.Download(ctx, s.Server, protocol.BooksPath+url.PathEscape(name), "book "+name, maxBookBytes)
	if he := (*build.HTTPError)(nil); errors.As(err, &he) && he.Status == http.StatusNotFound {
		return nil, fmt.Errorf("%w: the server does not hold the run's book %s (%s)", match.ErrNoBook, name, he.Message)
	}
	if err != nil {
		return nil, fmt.Errorf("book %s from the server: %w", name, err)
	}
	if got := protocol.BookSRI(data); sri != "" && got != sri {
		return nil, fmt.Errorf("book %s from the server: its checksum (sri) is %s, the run's book_sri %s", name, got, sri)
	}
	b, err := parseBook(name, "the server", data)
	if err != nil {
		return nil, err
	}
	if kept != "" {
		if err := keepFile(kept, data); err != nil {
			return nil, fmt.Errorf("book %s: keep it: %w", name, err)
		}
	}
	return b, nil
}

// parseBook reads an EPD book's text; where says where it came from, for errors.
func parseBook(name, where string, data []byte) (match.Book, error) {
	b, err := match.ParseEPD(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("book %s (from %s): %w", name, where, err)
	}
	return b, nil
}

// keepFile writes data to path through a temporary file beside it, so that the file is whole or
// absent; its directory is made if missing.
func keepFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, bytes.NewReader(data))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

var _ build.Server = (*Worker)(nil)
