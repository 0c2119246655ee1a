package match

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/worker/match/internal/genbook/gen"
)

// The shipped book is what its generator writes, so anyone can make it again; every position in
// it is one a game can start from.
func TestShippedBookIsRegenerable(t *testing.T) {
	data, err := fs.ReadFile(books.Shipped, "shoal_openings_v1.epd")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Split(strings.TrimSpace(string(data)), "\n"), gen.Book(); !slices.Equal(got, want) {
		t.Fatalf("the shipped book (%d lines) is not what genbook writes (%d lines): run go generate ./books", len(got), len(want))
	}
	b, err := LoadBook("shoal_openings_v1.epd", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != gen.Positions {
		t.Errorf("%d positions, want %d", len(b), gen.Positions)
	}
}

// A run's book is found in the books directory first, then among the shipped ones; a book the
// worker does not have is ErrNoBook, which names what it has; a name with a path is refused.
func TestLoadBook(t *testing.T) {
	dir := t.TempDir()
	epd := "# a comment\n\nrnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 hmvc 0; fmvn 1;\n" +
		"4k3/8/8/8/8/8/4P3/4K3 w - - hmvc 3; fmvn 12;\n"
	if err := os.WriteFile(filepath.Join(dir, "mine.epd"), []byte(epd), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := LoadBook("mine.epd", dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Book{"rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1", "4k3/8/8/8/8/8/4P3/4K3 w - - 3 12"}
	if !slices.Equal(b, want) {
		t.Errorf("read %q, want %q", b, want)
	}
	if _, err := LoadBook("shoal_openings_v1.epd", dir); err != nil {
		t.Errorf("a shipped book not in the directory: %v", err)
	}
	for _, name := range []string{"UHO_Lichess_4852_v1.epd", "../mine.epd", "", ".hidden.epd"} {
		_, err := LoadBook(name, dir)
		if !errors.Is(err, ErrNoBook) {
			t.Errorf("book %q: %v, want ErrNoBook", name, err)
		} else if name == "UHO_Lichess_4852_v1.epd" && !strings.Contains(err.Error(), "shoal_openings_v1.epd") {
			t.Errorf("the error does not say which books there are: %v", err)
		}
	}
}

func TestParseEPDRefusesBadLines(t *testing.T) {
	for _, bad := range []string{"", "# only a comment\n", "rnbqkbnr/pppppppp w KQkq\n", "8/8/8/8/8/8/8/8 w - -\n", "xyz w - - extra\n"} {
		if b, err := ParseEPD(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseEPD(%q) = %q, want an error", bad, b)
		}
	}
}

// A pair's opening depends on the run's seed and the pair's index alone, so every worker plays
// the same opening for the same pair, and a run's pairs spread over the book.
func TestOpeningsAreStableAndSpread(t *testing.T) {
	b, err := LoadBook("shoal_openings_v1.epd", "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 200 {
		o := b.Opening("run-1", i)
		if o != b.Opening("run-1", i) {
			t.Fatalf("pair %d: two openings", i)
		}
		seen[o] = true
	}
	if len(seen) < 150 {
		t.Errorf("200 pairs played %d openings of %d", len(seen), len(b))
	}
	if b.Opening("run-1", 7) == b.Opening("run-2", 7) && b.Opening("run-1", 8) == b.Opening("run-2", 8) {
		t.Error("two runs play the same openings")
	}
}
