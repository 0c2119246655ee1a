package books

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

const twoPositions = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -\r\n# a comment\r\nrnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq -\r\n"

func TestShippedBookIsHeldWithItsChecksum(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := s.Get(ShippedDefault)
	if !ok || !b.Shipped {
		t.Fatalf("Get(%q) = %+v, %v; want the shipped book", ShippedDefault, b, ok)
	}
	f, _, err := s.Open(ShippedDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if b.SRI != protocol.BookSRI(data) || b.Size != int64(len(data)) || b.Positions != 1000 {
		t.Errorf("shipped book = %+v; want sri %s, size %d, 1000 positions", b, protocol.BookSRI(data), len(data))
	}
	if got := s.Default(); got != ShippedDefault {
		t.Errorf("Default() = %q without fishtest's book; want %q", got, ShippedDefault)
	}
}

func TestAddedBookIsServedAndBecomesTheDefault(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Add(FishtestDefault, strings.NewReader(twoPositions))
	if err != nil {
		t.Fatal(err)
	}
	if b.SRI != protocol.BookSRI([]byte(twoPositions)) || b.Positions != 2 || b.Shipped {
		t.Errorf("Add = %+v; want sri %s and 2 positions", b, protocol.BookSRI([]byte(twoPositions)))
	}
	if got := s.Default(); got != FishtestDefault {
		t.Errorf("Default() = %q with fishtest's book held; want it", got)
	}
	if _, err := s.Add(FishtestDefault, strings.NewReader(twoPositions)); !errors.Is(err, ErrExists) {
		t.Errorf("adding it again: %v; want ErrExists", err)
	}
	// A store opened later finds it in the directory, and nothing else (no temporary file).
	again, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get(FishtestDefault); !ok || got.SRI != b.SRI {
		t.Errorf("reopened: %+v, %v; want %+v", got, ok, b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries; want the book alone", len(entries))
	}
}

func TestRefusedBooksLeaveNothing(t *testing.T) {
	tests := []struct {
		name, book, content string
		known               map[string]string
		want                error
	}{
		{"a path", "../x.epd", twoPositions, nil, ErrBadName},
		{"another extension", "x.txt", twoPositions, nil, ErrBadName},
		{"a hidden file", ".x.epd", twoPositions, nil, ErrBadName},
		{"the shipped book's name", ShippedDefault, twoPositions, nil, ErrExists},
		{"no position", "empty.epd", "# nothing\n\n", nil, ErrEmpty},
		{"a checksum books.json contradicts", "b.epd", twoPositions, map[string]string{"b.epd": "xyz"}, ErrChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.known != nil {
				if err := s.SetKnown(tt.known); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Add(tt.book, strings.NewReader(tt.content)); !errors.Is(err, tt.want) {
				t.Fatalf("Add(%q): %v; want %v", tt.book, err, tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the refusal left %d files behind", len(entries))
			}
		})
	}
}

func TestRescanFollowsTheDirectoryAndBooksJSON(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dropped.epd")
	if err := os.WriteFile(path, []byte(twoPositions), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Rescan(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("dropped.epd"); !ok {
		t.Fatal("a file dropped in the directory is not held after a rescan")
	}
	// books.json knows the name with another checksum: the file is no longer served.
	if err := s.SetKnown(map[string]string{"dropped.epd": "other"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("dropped.epd"); ok {
		t.Error("a file whose checksum differs from books.json's is still held")
	}
	if err := s.SetKnown(map[string]string{"dropped.epd": protocol.BookSRI([]byte(twoPositions))}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("dropped.epd"); !ok {
		t.Error("a file whose checksum matches books.json's is not held")
	}
	os.Remove(path)
	if err := s.Rescan(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("dropped.epd"); ok {
		t.Error("a removed file is still held")
	}
}

// A scan running while a book is added never publishes a view without it: the book an approver
// was told was added is served.
func TestConcurrentScansKeepAnAddedBook(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := "book" + strconv.Itoa(i) + ".epd"
		done := make(chan error, 1)
		go func() { done <- s.Rescan() }()
		if _, err := s.Add(name, strings.NewReader(twoPositions)); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Get(name); !ok {
			t.Fatalf("%s is not held after a scan that ran while it was added", name)
		}
	}
}
