package match

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/shoal-chess/shoal/books"
)

// The opening books that come with the worker are the ones Shoal ships (package books), which
// the server holds too.

// Book is an opening book: start positions as FENs, in the book's order.
type Book []string

// ErrNoBook is a book the worker does not have.
var ErrNoBook = errors.New("opening book not found")

// CheckBookName refuses a name that is not a book's file name (a path, a hidden file): a
// wrapped ErrNoBook.
func CheckBookName(name string) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("%w: %q is not a book's file name", ErrNoBook, name)
	}
	return nil
}

// LoadBook finds the book a run names: a file of that name in dir (if dir is set), else one the
// worker ships. Books are in fishtest's EPD format, one position a line.
func LoadBook(name, dir string) (Book, error) {
	if err := CheckBookName(name); err != nil {
		return nil, err
	}
	if dir != "" {
		f, err := os.Open(filepath.Join(dir, name))
		if err == nil {
			defer f.Close()
			return ParseEPD(f)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	f, err := books.Shipped.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is neither in the books directory nor one of the books the worker ships (%s)",
			ErrNoBook, name, strings.Join(ShippedBooks(), ", "))
	}
	defer f.Close()
	return ParseEPD(f)
}

// ShippedBook returns the text of a book the worker ships, false if it ships none of that name.
func ShippedBook(name string) ([]byte, bool) {
	if CheckBookName(name) != nil {
		return nil, false
	}
	data, err := fs.ReadFile(books.Shipped, name)
	return data, err == nil
}

// ShippedBooks lists the books the worker ships.
func ShippedBooks() []string {
	entries, _ := fs.ReadDir(books.Shipped, ".")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// ParseEPD reads an EPD book: each line a board, the side to move, castling rights and the en
// passant square, then optional operations, of which the half-move clock (hmvc) and the move
// number (fmvn) are used. Empty lines and lines starting with # are skipped. Every position must
// be legal.
func ParseEPD(r io.Reader) (Book, error) {
	var b Book
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			return nil, fmt.Errorf("book line %d: %q is not an EPD position", n, line)
		}
		clock, move := "0", "1"
		for _, op := range strings.Split(strings.Join(f[4:], " "), ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(op), " "); ok {
				switch k {
				case "hmvc":
					clock = strings.TrimSpace(v)
				case "fmvn":
					move = strings.TrimSpace(v)
				}
			}
		}
		fen := strings.Join(append(f[:4:4], clock, move), " ")
		if strings.Count(f[0], "K") != 1 || strings.Count(f[0], "k") != 1 {
			return nil, fmt.Errorf("book line %d: %q: each side needs one king", n, line)
		}
		g, err := newGame(fen)
		if err != nil {
			return nil, fmt.Errorf("book line %d: %q: %w", n, line, err)
		}
		if len(g.ValidMoves()) == 0 {
			return nil, fmt.Errorf("book line %d: %q: the game is over there", n, line)
		}
		b = append(b, fen)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("the book holds no position")
	}
	return b, nil
}

// Opening is the start position of the pair at index i (from the run's first game pair) of a
// run whose openings are drawn with seed: the same for every worker that plays that pair, and
// spread over the whole book.
func (b Book) Opening(seed string, i int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", seed, i)
	return b[h.Sum64()%uint64(len(b))]
}
