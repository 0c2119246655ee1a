package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// maxReplyBytes bounds what is read of a reply; request_task's carries a run's args, which for
// an SPSA run with a long history can be large, but never this large.
const maxReplyBytes = 64 << 20

// errInvalidReply is a reply that is not a JSON object with a numeric duration: fishtest's
// worker raises WorkerException for it (or fails reading "duration"), and backs off.
var errInvalidReply = errors.New("the reply was not a json encoded dictionary with a duration")

// reply is a worker API reply that was a JSON object with a duration.
type reply struct {
	status int
	body   []byte
	m      map[string]any
}

func (r *reply) has(key string) bool {
	_, ok := r.m[key]
	return ok
}

// errorMessage returns the reply's "error", if it has one: fishtest's worker treats any reply
// with that key as a failure, whatever the HTTP status.
func (r *reply) errorMessage() (string, bool) {
	v, ok := r.m["error"]
	if !ok {
		return "", false
	}
	if s, isString := v.(string); isString {
		return s, true
	}
	return fmt.Sprint(v), true
}

func (r *reply) hasError() bool {
	_, bad := r.errorMessage()
	return bad
}

// taskAlive reads task_alive, or def when it is absent or not a boolean.
func (r *reply) taskAlive(def bool) bool {
	if v, ok := r.m["task_alive"].(bool); ok {
		return v
	}
	return def
}

// decode fills v, one of protocol's reply types, matching keys exactly (protocol.DecodeReply).
func (r *reply) decode(v any) error { return protocol.DecodeReply(r.body, v) }

// post sends payload to /api/<endpoint> and reads the reply. The error is a transport error, a
// cancelled ctx, or errInvalidReply (wrapped); a reply with an "error" key is not an error here,
// it is logged as fishtest's worker prints it and left to the caller. The Observer sees every call.
func (w *Worker) post(ctx context.Context, endpoint string, payload any) (*reply, error) {
	start := time.Now()
	r, status, err := w.do(ctx, endpoint, payload)
	took := time.Since(start)
	if w.obs != nil {
		var m map[string]any
		if r != nil {
			m = r.m
		}
		w.obs.Request(endpoint, took, status, m, err)
	}
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("Request failed", "endpoint", endpoint, "status", status, "err", err)
		}
		return nil, err
	}
	if msg, bad := r.errorMessage(); bad {
		w.log.Warn("Error from remote: "+msg, "endpoint", endpoint, "status", status)
	} else if info, ok := r.m["info"]; ok {
		w.log.Info(fmt.Sprint("Info from remote: ", info), "endpoint", endpoint)
	}
	if w.log.Enabled(ctx, slog.LevelDebug) { // its arguments cost allocations even when discarded
		w.log.Debug("Post request handled", "endpoint", endpoint, "took", took,
			"server_ms", 1000*r.m["duration"].(float64))
	}
	return r, nil
}

// postRetrying is post for the calls about a task that a server restart must not lose
// (request_spsa, failed_task, stop_run, upload_pgn): a call that got no reply, or a reply that
// is not a JSON object (a restarting server's 503), is tried again up to updateAttempts times,
// retryDelay apart, as update_task is. A reply, with or without "error", ends it.
func (w *Worker) postRetrying(ctx context.Context, endpoint string, payload any) (*reply, error) {
	for attempt := 1; ; attempt++ {
		r, err := w.post(ctx, endpoint, payload)
		if err == nil || ctx.Err() != nil || attempt == updateAttempts {
			return r, err
		}
		if err := sleep(ctx, w.retryDelay()); err != nil {
			return nil, err
		}
	}
}

// jsonHeader is every call's header unless an http.Client with a cookie jar makes it. The calls
// share it: a transport does not write to a request's header, nor does http.Client but to add a
// jar's cookies, and one map less per call is garbage a fleet of thousands of workers on one core
// does not make.
var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// readReply reads a reply's body, up to maxReplyBytes: of the length the server announced, in
// one allocation of that size, when it did (Shoal and fishtest do), instead of ReadAll's 512
// bytes and more for a reply of a few dozen.
func readReply(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxReplyBytes {
		data := make([]byte, n)
		_, err := io.ReadFull(resp.Body, data)
		return data, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
}

// do makes the HTTP call. status is 0 when no response arrived.
func (w *Worker) do(ctx context.Context, endpoint string, payload any) (*reply, int, error) {
	body, err := w.encodeBody(payload)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: encode request: %w", endpoint, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+"/api/"+endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", endpoint, err)
	}
	if w.ownHeader {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header = jsonHeader
	}
	resp, err := w.send(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	data, err := readReply(resp)
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("%s: read reply: %w", endpoint, err)
	}
	m, ok := decodeObject(data)
	if !ok {
		return nil, resp.StatusCode, fmt.Errorf("%s: HTTP %d: %w", endpoint, resp.StatusCode, errInvalidReply)
	}
	if _, ok := m["duration"].(float64); !ok {
		return &reply{status: resp.StatusCode, body: data, m: m}, resp.StatusCode,
			fmt.Errorf("%s: HTTP %d: no duration: %w", endpoint, resp.StatusCode, errInvalidReply)
	}
	return &reply{status: resp.StatusCode, body: data, m: m}, resp.StatusCode, nil
}

// Fetch makes one call to the server for a file (build.Server): a GET of path (below the
// server's URL) when body is nil, else a POST of body's JSON. It goes through the worker's
// HTTP client (or RoundTripper), but not its 30 s timeout: a download may take longer, and ctx
// bounds it, body included. A GET follows redirects (a network may be on another host) and
// carries no credentials; a POST, whose body carries the password, follows none: a redirect is
// an error. The caller closes the body.
func (w *Worker) Fetch(ctx context.Context, path string, body any) (*http.Response, error) {
	method := http.MethodGet
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: encode request: %w", path, err)
		}
		method, reader = http.MethodPost, bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, reader)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	var c http.Client
	if w.client != nil {
		c = *w.client
		c.Timeout = 0
	} else {
		c.Transport = w.cfg.RoundTripper
	}
	return c.Do(req)
}

// SourceRequest is the body of a source request for the commit sha (build.Server): the
// worker's password and worker_info, as every call carries them.
func (w *Worker) SourceRequest(sha string) protocol.SourceRequest {
	return protocol.SourceRequest{Password: w.cfg.Password, WorkerInfo: w.currentInfo(), SHA: sha}
}
