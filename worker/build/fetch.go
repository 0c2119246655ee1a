package build

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// HTTPError is a download the server answered with another status than 200 OK: a 404 is a
// file it does not hold (or, for a source, a commit that is no active run's).
type HTTPError struct {
	What    string // what was asked for: "source of 4901218d4c", "network nn-....nnue"
	Status  int
	Message string // the server's "error", or the start of its reply
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: the server answered %d %s: %s", e.What, e.Status, http.StatusText(e.Status), e.Message)
}

// Download GETs path from srv and returns the body of a 200 reply, at most limit bytes; what
// names the file in errors. Another status is an *HTTPError.
func Download(ctx context.Context, srv Server, path, what string, limit int64) ([]byte, error) {
	resp, err := srv.Fetch(ctx, path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	return readBody(resp, what, limit)
}

// readBody reads a 200 response's body, at most limit bytes; any other status is an
// *HTTPError with the server's message (the worker API's {"error": ...}).
func readBody(resp *http.Response, what string, limit int64) ([]byte, error) {
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp, what)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d MiB a worker takes", what, resp.ContentLength, limit>>20)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than the %d MiB a worker takes", what, limit>>20)
	}
	return data, nil
}

// statusError reads a refusal: its {"error": ...} when it is the worker API's shape, else the
// start of its text.
func statusError(resp *http.Response, what string) *HTTPError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var reply struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &reply) == nil && reply.Error != "" {
		msg = reply.Error
	}
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "..."
	}
	return &HTTPError{What: what, Status: resp.StatusCode, Message: msg}
}
