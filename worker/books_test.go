package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build/buildtest"
	"github.com/shoal-chess/shoal/worker/match"
)

const serverBookText = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 hmvc 0; fmvn 1;\n" +
	"rnbqkbnr/pppppppp/8/8/3P4/8/PPP1PPPP/RNBQKBNR b KQkq d3 hmvc 0; fmvn 1;\n"

// bookSource is an EngineSource of its own directory, connected to a stub server whose files
// are books.
func bookSource(t *testing.T, dir string) (*EngineSource, *buildtest.Files) {
	t.Helper()
	files := buildtest.NewFiles()
	files.AddBook("UHO_Lichess_4852_v1.epd", []byte(serverBookText))
	st := newStubWithFiles(t, nil, files)
	src := &EngineSource{Dir: dir}
	if _, err := New(testConfig(st, &syncBuffer{}), src); err != nil {
		t.Fatal(err)
	}
	return src, files
}

// A run's book comes from the operator's directory, the worker's own, the books it ships, and
// last from the server, which checks against the run's sri and keeps the server's copy.
func TestEngineSourceBooks(t *testing.T) {
	ctx := context.Background()
	sri := protocol.BookSRI([]byte(serverBookText))

	t.Run("fetched from the server and kept", func(t *testing.T) {
		dir := t.TempDir()
		src, files := bookSource(t, dir)
		b, err := src.loadBook(ctx, "UHO_Lichess_4852_v1.epd", sri)
		if err != nil || len(b) != 2 || files.Requests("books") != 1 {
			t.Fatalf("book %q, %v after %d requests", b, err, files.Requests("books"))
		}
		kept, err := os.ReadFile(filepath.Join(dir, "books", "UHO_Lichess_4852_v1.epd"))
		if err != nil || string(kept) != serverBookText {
			t.Errorf("the book was not kept: %v", err)
		}
		again, files2 := bookSource(t, dir) // another worker of the same directory
		if b, err := again.loadBook(ctx, "UHO_Lichess_4852_v1.epd", sri); err != nil || len(b) != 2 || files2.Requests("books") != 0 {
			t.Errorf("the kept book: %q, %v after %d requests; want it read without asking", b, err, files2.Requests("books"))
		}
	})
	t.Run("a kept book whose checksum is not the run's is fetched again", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "books"), 0o755); err != nil {
			t.Fatal(err)
		}
		stale := "4k3/8/8/8/8/8/4P3/4K3 w - - hmvc 3; fmvn 12;\n"
		if err := os.WriteFile(filepath.Join(dir, "books", "UHO_Lichess_4852_v1.epd"), []byte(stale), 0o644); err != nil {
			t.Fatal(err)
		}
		src, files := bookSource(t, dir)
		if b, err := src.loadBook(ctx, "UHO_Lichess_4852_v1.epd", sri); err != nil || len(b) != 2 || files.Requests("books") != 1 {
			t.Errorf("book %q, %v after %d requests; want the server's", b, err, files.Requests("books"))
		}
	})
	t.Run("the server's book does not match the run's checksum", func(t *testing.T) {
		dir := t.TempDir()
		src, _ := bookSource(t, dir)
		_, err := src.loadBook(ctx, "UHO_Lichess_4852_v1.epd", "sha384-not-this-one")
		if err == nil || !strings.Contains(err.Error(), "UHO_Lichess_4852_v1.epd") || !strings.Contains(err.Error(), "book_sri") {
			t.Errorf("%v, want the book refused for its checksum", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "books", "UHO_Lichess_4852_v1.epd")); err == nil {
			t.Error("the refused book was kept")
		}
	})
	t.Run("a book the server does not hold", func(t *testing.T) {
		src, files := bookSource(t, t.TempDir())
		_, err := src.loadBook(ctx, "8moves_v3.epd", "")
		if !errors.Is(err, match.ErrNoBook) || !strings.Contains(err.Error(), "the server does not hold the run's book 8moves_v3.epd") ||
			files.Requests("books") != 1 {
			t.Errorf("%v, want ErrNoBook naming the book", err)
		}
	})
	t.Run("the shipped book without asking", func(t *testing.T) {
		src, files := bookSource(t, t.TempDir())
		shipped, _ := match.ShippedBook("shoal_openings_v1.epd")
		for _, sri := range []string{"", protocol.BookSRI(shipped)} {
			if b, err := src.loadBook(ctx, "shoal_openings_v1.epd", sri); err != nil || len(b) != 1000 {
				t.Errorf("sri %q: %d positions, %v", sri, len(b), err)
			}
		}
		if n := files.Requests("books"); n != 0 {
			t.Errorf("%d book requests, want none", n)
		}
		if _, err := src.loadBook(ctx, "shoal_openings_v1.epd", "sha384-another"); !errors.Is(err, match.ErrNoBook) || files.Requests("books") != 1 {
			t.Errorf("a shipped book of another checksum: %v after %d requests, want the server asked", err, files.Requests("books"))
		}
	})
	t.Run("the operator's directory first, unchecked", func(t *testing.T) {
		src, files := bookSource(t, t.TempDir())
		src.Books = t.TempDir()
		mine := "4k3/8/8/8/8/8/4P3/4K3 w - - hmvc 3; fmvn 12;\n"
		if err := os.WriteFile(filepath.Join(src.Books, "UHO_Lichess_4852_v1.epd"), []byte(mine), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := src.loadBook(ctx, "UHO_Lichess_4852_v1.epd", sri); err != nil || len(b) != 1 || files.Requests("books") != 0 {
			t.Errorf("book %q, %v after %d requests; want the operator's", b, err, files.Requests("books"))
		}
	})
	t.Run("a PGN book", func(t *testing.T) {
		src, files := bookSource(t, t.TempDir())
		_, err := src.loadBook(ctx, "UHO_4060_v4.pgn", "")
		if err == nil || !strings.Contains(err.Error(), "UHO_4060_v4.pgn is a PGN book") || files.Requests("books") != 0 {
			t.Errorf("%v, want a clear refusal", err)
		}
	})
}
