package ui

import (
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/books"
)

// The opening books this server holds, which workers download from /api/books/{name}: the ones
// Shoal ships and the ones an operator added (files in DataDir/books, or an approver's upload
// here), each with its checksum (fishtest's sri). A new test may name only these.

// BooksPath is the books page, which also takes an approver's upload (a multipart body).
const BooksPath = "/books"

// booksData is the /books page.
type booksData struct {
	page
	Books   []books.Book
	Default string
	MaxSize string
	Errors  map[string]string // "book"
}

func (s *Server) booksPage(c *gin.Context, status int, errs map[string]string) {
	if errs == nil {
		errs = map[string]string{}
	}
	d := booksData{page: s.page(c, "Opening books"), MaxSize: nnSize(books.MaxSize), Errors: errs}
	if s.deps.Books != nil {
		d.Books, d.Default = s.deps.Books.List(), s.deps.Books.Default()
	}
	s.render(c, status, "books", d)
}

// BooksPage is GET /books: the books tests may use, with their checksums; approvers get the
// upload form.
func (s *Server) BooksPage(c *gin.Context) { s.booksPage(c, http.StatusOK, nil) }

// BooksSubmit is POST /books: an approver adds a book. The body is streamed to the books
// directory after the CSRF token (the form's first field) is checked; a refused book is stored
// nowhere and the page says why.
func (s *Server) BooksSubmit(c *gin.Context) {
	if _, ok := s.requireApprover(c); !ok || !s.requirePrimaryPage(c) {
		return
	}
	if s.deps.Books == nil {
		s.PageError(c, http.StatusServiceUnavailable, "This server keeps no books.")
		return
	}
	s.transfers.AllowSlowBody(c) // only once an approver is known
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, books.MaxSize+1<<20)
	name, file, err := s.openBookUpload(c)
	if err == nil {
		var b books.Book
		b, err = s.deps.Books.Add(name, file)
		if err == nil {
			s.flash(c, "success", "Book "+b.Name+" added: "+groupThousands(int64(b.Positions))+" openings.")
			s.redirect(c, BooksPath)
			return
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errNNUploadCSRF):
		s.PageError(c, http.StatusForbidden, "This form has expired or did not come from Shoal. Go back, reload the page and try again.")
	case errors.As(err, &tooBig), errors.Is(err, books.ErrTooLarge):
		s.booksPage(c, http.StatusBadRequest, map[string]string{"book": "The book must be smaller than " + nnSize(books.MaxSize) + "."})
	case errors.Is(err, errNoBookFile), errors.Is(err, books.ErrBadName), errors.Is(err, books.ErrExists),
		errors.Is(err, books.ErrChecksum), errors.Is(err, books.ErrEmpty):
		s.booksPage(c, http.StatusBadRequest, map[string]string{"book": err.Error()})
	default:
		s.uiError(c, err)
	}
}

// errNoBookFile is an upload without a file.
var errNoBookFile = errors.New("choose a book file to upload")

// openBookUpload finds the book file in the multipart body, checking the CSRF token (header, or
// a field before the file) before a byte of the file is read.
func (s *Server) openBookUpload(c *gin.Context) (string, io.Reader, error) {
	token := c.GetHeader("X-CSRF-Token")
	mr, err := c.Request.MultipartReader()
	if err != nil {
		if !csrfTokenMatches(c, token) {
			return "", nil, errNNUploadCSRF
		}
		return "", nil, errNoBookFile
	}
	for {
		part, err := mr.NextPart()
		switch {
		case errors.Is(err, io.EOF):
			if !csrfTokenMatches(c, token) {
				return "", nil, errNNUploadCSRF
			}
			return "", nil, errNoBookFile
		case err != nil:
			return "", nil, err
		}
		switch part.FormName() {
		case csrfField:
			v, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return "", nil, err
			}
			if token == "" {
				token = string(v)
			}
		case "book":
			if !csrfTokenMatches(c, token) {
				return "", nil, errNNUploadCSRF
			}
			if part.FileName() == "" {
				return "", nil, errNoBookFile
			}
			return part.FileName(), part, nil
		default:
			if _, err := io.Copy(io.Discard, io.LimitReader(part, 64<<10)); err != nil {
				return "", nil, err
			}
		}
	}
}
