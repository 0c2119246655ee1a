package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// booksKey is the kvstore key of the opening books' metadata, fishtest's: an object keyed by
// book file name. FerretDB refuses keys with dots, so there the same JSON is stored as a string
// under booksJSONKey.
const (
	booksKey     = "books"
	booksJSONKey = "books_json"
)

// book is what Shoal reads of one entry of books.json; the rest is stored as it came.
type book struct {
	SRI string `json:"sri" bson:"sri"`
}

// setBooks replaces the book checksums, and makes the books this server holds agree with them.
func (s *Scheduler) setBooks(metadata map[string]book) {
	sri := make(map[string]string, len(metadata))
	for name, b := range metadata {
		if b.SRI != "" {
			sri[name] = b.SRI
		}
	}
	s.mu.Lock()
	s.bookSRI = sri
	s.mu.Unlock()
	if s.cfg.Books != nil {
		if err := s.cfg.Books.SetKnown(sri); err != nil {
			s.logger.Error("check the held books against books.json", "err", err)
		}
	}
}

// bookChecksum is the checksum workers verify the book name against: the held book's, else
// books.json's ("" when neither knows the book).
func (s *Scheduler) bookChecksum(name string) string {
	if s.cfg.Books != nil {
		if b, ok := s.cfg.Books.Get(name); ok {
			return b.SRI
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bookSRI[name]
}

// loadBooks reads the books' metadata the database holds.
func (s *Scheduler) loadBooks(ctx context.Context) {
	var books map[string]book
	if err := s.db.kv.Get(ctx, booksKey, &books); err == nil {
		s.setBooks(books)
		return
	}
	var raw string
	if err := s.db.kv.Get(ctx, booksJSONKey, &raw); err == nil {
		if err := json.Unmarshal([]byte(raw), &books); err == nil {
			s.setBooks(books)
			return
		}
	}
	s.logger.Info("no opening book metadata in the database yet")
}

// saveBooks stores books.json as fishtest does, or as a string where the database refuses its
// keys.
func (s *Scheduler) saveBooks(ctx context.Context, raw []byte) error {
	var all map[string]map[string]any
	var books map[string]book
	if err := json.Unmarshal(raw, &all); err != nil {
		return fmt.Errorf("books metadata is not a JSON object of books: %w", err)
	}
	if err := json.Unmarshal(raw, &books); err != nil {
		return fmt.Errorf("books metadata: %w", err)
	}
	if err := s.db.kv.Put(ctx, booksKey, all); err != nil {
		if err := s.db.kv.Put(ctx, booksJSONKey, string(raw)); err != nil {
			return err
		}
	}
	s.setBooks(books)
	return nil
}

// booksClient fetches books.json; a slow or unreachable server must not hold the job up.
var booksClient = &http.Client{Timeout: 30 * time.Second}

// RefreshBooks reads the books directory again (a book dropped there is served from then on),
// then downloads books.json from BooksURL and stores it; on failure the books known so far stay
// in use.
func (s *Scheduler) RefreshBooks(ctx context.Context) error {
	if s.cfg.Books != nil {
		if err := s.cfg.Books.Rescan(); err != nil {
			return err
		}
	}
	if s.cfg.BooksURL == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.BooksURL, nil)
	if err != nil {
		return err
	}
	resp, err := booksClient.Do(req)
	if err != nil {
		return fmt.Errorf("download books metadata: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download books metadata: %s", resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("download books metadata: %w", err)
	}
	return s.saveBooks(ctx, raw)
}
