package networks

import (
	"errors"
	"net/http"

	"github.com/dustin/go-humanize"
	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/server/ui"
)

// The opening books this server holds, which workers download from /api/books/{name}: the ones
// Shoal ships and the ones an operator added (files in DataDir/books, or an approver's upload
// here), each with its checksum (fishtest's sri). A new test may name only these.

// booksData is the /books page.
type booksData struct {
	ui.Page
	Books   []books.Book
	Default string
	MaxSize string
	Errors  map[string]string // "book"
}

func (s *Server) booksPage(c *gin.Context, status int, errs map[string]string) {
	if errs == nil {
		errs = map[string]string{}
	}
	d := booksData{Page: s.ui.Page(c, "Opening books"), MaxSize: nnSize(books.MaxSize), Errors: errs}
	if s.deps.Books != nil {
		d.Books, d.Default = s.deps.Books.List(), s.deps.Books.Default()
	}
	s.ui.Render(c, status, "books", d)
}

// BooksPage is GET /books: the books tests may use, with their checksums; approvers get the
// upload form.
func (s *Server) BooksPage(c *gin.Context) { s.booksPage(c, http.StatusOK, nil) }

// BooksSubmit is POST /books: an approver adds a book. The body is streamed to the books
// directory after the CSRF token (the form's first field) is checked (openFileUpload); a refused
// book is stored nowhere and the page says why.
func (s *Server) BooksSubmit(c *gin.Context) {
	if _, ok := s.ui.RequireApprover(c); !ok || !s.ui.RequirePrimary(c) {
		return
	}
	if s.deps.Books == nil {
		s.ui.PageError(c, http.StatusServiceUnavailable, "This server keeps no books.")
		return
	}
	s.transfers.AllowSlowBody(c) // only once an approver is known
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, books.MaxSize+1<<20)
	up, err := openFileUpload(c, "book")
	if err == nil {
		defer up.file.Close()
		var b books.Book
		b, err = s.deps.Books.Add(up.name, up.file)
		if err == nil {
			s.ui.Flash(c, "success", "Book "+b.Name+" added: "+humanize.Comma(int64(b.Positions))+" openings.")
			s.ui.Redirect(c, ui.BooksPath)
			return
		}
	}
	switch {
	case errors.Is(err, errUploadCSRF):
		s.ui.PageError(c, http.StatusForbidden, "This form has expired or did not come from Shoal. Go back, reload the page and try again.")
	case tooBig(err), errors.Is(err, books.ErrTooLarge):
		s.booksPage(c, http.StatusBadRequest, map[string]string{"book": "The book must be smaller than " + nnSize(books.MaxSize) + "."})
	case errors.Is(err, errUploadNoFile):
		s.booksPage(c, http.StatusBadRequest, map[string]string{"book": "Choose a book file to upload."})
	case errors.Is(err, books.ErrBadName), errors.Is(err, books.ErrExists),
		errors.Is(err, books.ErrChecksum), errors.Is(err, books.ErrEmpty):
		s.booksPage(c, http.StatusBadRequest, map[string]string{"book": err.Error()})
	default:
		s.ui.Error(c, err)
	}
}
