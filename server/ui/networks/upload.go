package networks

import (
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"
	"github.com/shoal-chess/shoal/server/ui"
)

// The two uploads (networks, books) stream their file: CheckCSRF leaves a multipart body alone,
// and openFileUpload reads it up to the file, checking the CSRF token before a byte of the file
// is read.

// Errors of openFileUpload besides the body's read errors.
var (
	// errUploadCSRF is an upload whose form did not carry the session's CSRF token.
	errUploadCSRF = errors.New("upload without the CSRF token")
	// errUploadNoFile is an upload without a file.
	errUploadNoFile = errors.New("no file in the upload")
)

// fileUpload is a streamed upload form: the small fields that came before its file, and the file.
type fileUpload struct {
	fields map[string]string
	name   string        // the file's name as sent
	file   io.ReadCloser // the file, a stream the caller bounds
}

// openFileUpload reads the multipart body of c up to its file field fileField. The fields before
// it are kept (at most 1 KiB each; fields other than the CSRF token and kept must be small, the
// rest is skipped, 64 KiB at most each). The CSRF token is the X-CSRF-Token header or the form's
// field before the file. Errors: errUploadCSRF, errUploadNoFile, or the body's read error; the
// fields read so far are returned with them.
func openFileUpload(c *gin.Context, fileField string, kept ...string) (fileUpload, error) {
	up := fileUpload{fields: map[string]string{}}
	token := c.GetHeader("X-CSRF-Token")
	mr, err := c.Request.MultipartReader()
	if err != nil {
		if !ui.CSRFTokenMatches(c, token) {
			return up, errUploadCSRF
		}
		return up, errUploadNoFile
	}
	for {
		part, err := mr.NextPart()
		switch {
		case errors.Is(err, io.EOF):
			if !ui.CSRFTokenMatches(c, token) {
				return up, errUploadCSRF
			}
			return up, errUploadNoFile
		case err != nil:
			return up, err
		}
		name := part.FormName()
		switch {
		case name == fileField:
			if !ui.CSRFTokenMatches(c, token) {
				return up, errUploadCSRF
			}
			if part.FileName() == "" {
				return up, errUploadNoFile
			}
			up.name, up.file = part.FileName(), part
			return up, nil
		case name == ui.CSRFField || slices.Contains(kept, name):
			v, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return up, err
			}
			if name == ui.CSRFField {
				if token == "" {
					token = string(v)
				}
			} else {
				up.fields[name] = string(v)
			}
		default:
			if _, err := io.Copy(io.Discard, io.LimitReader(part, 64<<10)); err != nil {
				return up, err
			}
		}
	}
}

// tooBig reports whether err is a body past its MaxBytesReader's limit.
func tooBig(err error) bool {
	var e *http.MaxBytesError
	return errors.As(err, &e)
}
