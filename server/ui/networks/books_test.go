package networks_test

import (
	"bytes"
	"html"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
)

// newBooksEnv is a UI over a fresh books directory.
func newBooksEnv(t *testing.T) (*uiEnv, *books.Store) {
	t.Helper()
	held, err := books.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := newUIEnvSched(t, scheduler.Config{Books: held}, func(d *server.Deps) { d.Books = held })
	return env, held
}

func TestUIBooksPage(t *testing.T) {
	env, held := newBooksEnv(t)
	book := "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -\n"
	upload := func(b *browser, name string) *httptest.ResponseRecorder {
		return uploadBook(b, name, book, b.CSRF())
	}
	if w := uploadBook(env.as("bob"), "forged.epd", book, "not-the-token"); w.Code != http.StatusForbidden {
		t.Errorf("an upload without the session's CSRF token: %d; want 403", w.Code)
	}
	if _, ok := held.Get("forged.epd"); ok {
		t.Error("a forged upload was stored")
	}
	if w := upload(env.as("alice"), "mine.epd"); w.Code != http.StatusForbidden {
		t.Errorf("a user's upload: %d; want 403 (approvers only)", w.Code)
	}
	if w := upload(env.as("bob"), "notes.txt"); w.Code != http.StatusBadRequest || !strings.Contains(body(w), "not a book file name") {
		t.Errorf("an upload that is no book: %d; want 400 saying why", w.Code)
	}
	if w := upload(env.as("bob"), books.FishtestDefault); w.Code != http.StatusSeeOther {
		t.Fatalf("an approver's upload: %d\n%s", w.Code, body(w))
	}
	if got := held.Default(); got != books.FishtestDefault {
		t.Errorf("default book %q after the upload; want %q", got, books.FishtestDefault)
	}
	page := body(env.anon().Get("/books"))
	for _, want := range []string{books.FishtestDefault, books.ShippedDefault, "shipped with Shoal"} {
		if !strings.Contains(page, want) {
			t.Errorf("/books lacks %q", want)
		}
	}
	if strings.Contains(page, `enctype="multipart/form-data"`) {
		t.Error("/books shows the upload form to someone not logged in")
	}
	// A new test's form proposes the default book now.
	if got, _ := formInputValue(body(env.as("alice").Get("/tests/run")), "book"); got != books.FishtestDefault {
		t.Errorf("the form's book is %q; want the new default", got)
	}
}

// uploadBook posts a book file to /books with the given CSRF token, as the page's form does.
func uploadBook(b *browser, name, content, token string) *httptest.ResponseRecorder {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("csrf_token", token)
	fw, _ := mw.CreateFormFile("book", name)
	_, _ = fw.Write([]byte(content))
	_ = mw.Close()
	req := httptest.NewRequest(http.MethodPost, "/books", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return b.Do(req)
}

// formInputValue returns the value of the page's input (or textarea) named name, unescaped, and
// whether there is one.
func formInputValue(page, name string) (string, bool) {
	q := regexp.QuoteMeta(name)
	if m := regexp.MustCompile(`<input[^>]*\sname="` + q + `"[^>]*\svalue="([^"]*)"`).FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1]), true
	}
	if m := regexp.MustCompile(`<textarea[^>]*\sname="` + q + `"[^>]*>([^<]*)</textarea>`).FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1]), true
	}
	return "", false
}
