package apiclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPost(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		reply   string
		wantErr string // "" for success
	}{
		{"a 200 reply is decoded", http.StatusOK, `{"run_id": "abc"}`, ""},
		{"a refusal carries the server's message", http.StatusBadRequest, `{"error": "/api/create_run: missing tc"}`, "server refused (400 Bad Request): /api/create_run: missing tc"},
		{"a reply without a message shows its start", http.StatusBadGateway, "<html>bad gateway</html>", "server answered 502 Bad Gateway: <html>bad gateway</html>"},
		{"a 200 that is not JSON is an error", http.StatusOK, "not json", "unexpected reply from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var gotBody, gotType string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody, gotType = string(b), r.Header.Get("Content-Type")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.reply)
			}))
			defer srv.Close()
			c := &Client{Server: srv.URL, Username: "alice", Password: "secret", HTTP: srv.Client()}
			var out struct {
				RunID string `json:"run_id"`
			}
			err := c.Post(context.Background(), "/api/create_run", map[string]string{"username": c.Username}, &out)
			if gotBody != `{"username":"alice"}` || gotType != "application/json" {
				t.Errorf("the server got %q (%s), want the body as JSON", gotBody, gotType)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Post: %v", err)
			case tc.wantErr == "" && out.RunID != "abc":
				t.Errorf("decoded %+v, want run_id abc", out)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Post: error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPostUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := &Client{Server: url, HTTP: http.DefaultClient}
	err := c.Post(context.Background(), "/api/approve_run", struct{}{}, &struct{}{})
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach "+url) {
		t.Errorf("Post to a closed server: %v, want cannot reach %s", err, url)
	}
}

func TestSnippet(t *testing.T) {
	long := strings.Repeat("x", 250)
	tests := []struct{ name, in, want string }{
		{"an empty reply says so", "  \n", "(empty reply)"},
		{"spaces around are trimmed", "  oops\n", "oops"},
		{"a long reply is cut at 200 bytes", long, strings.Repeat("x", 200) + "..."},
	}
	for _, tc := range tests {
		if got := Snippet([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: Snippet = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, "0123456789")
		default:
			http.Error(w, "no such run", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if got, err := Get(ctx, srv.Client(), srv.URL+"/ok", 100); err != nil || string(got) != "0123456789" {
		t.Errorf("a 200: %q, %v", got, err)
	}
	if got, err := Get(ctx, srv.Client(), srv.URL+"/ok", 4); err != nil || string(got) != "0123" {
		t.Errorf("a 200 past the limit: %q, %v, want its first 4 bytes", got, err)
	}
	if _, err := Get(ctx, srv.Client(), srv.URL+"/missing", 100); err == nil || err.Error() != "404 Not Found: no such run" {
		t.Errorf("a 404: %v, want its status and message", err)
	}
}
