package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
)

// storeNet writes a network as the upload does (gzipped under DataDir/nn) and, if known,
// records it.
func storeNet(t *testing.T, dataDir string, db *rundb.DB, content []byte, known bool) string {
	t.Helper()
	sum := sha256.Sum256(content)
	name := "nn-" + hex.EncodeToString(sum[:])[:12] + ".nnue"
	dir := filepath.Join(dataDir, "nn")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(content)
	_ = zw.Close()
	if err := os.WriteFile(filepath.Join(dir, name+".gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if known {
		if err := db.NNs.Insert(context.Background(), &rundb.NN{Name: name, User: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

func TestNNDownloadServesTheStoredFile(t *testing.T) {
	dataDir := t.TempDir()
	s, db := newReadServer(t, func(d *server.Deps) { d.DataDir = dataDir; d.NNURL = "https://elsewhere.example.org" })
	content := bytes.Repeat([]byte("a network's weights "), 500)
	name := storeNet(t, dataDir, db, content, true)
	path := "/api/nn/" + name
	downloads := func() int {
		t.Helper()
		n, err := db.NNs.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return n.Downloads
	}
	sha := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

	cases := []struct {
		name           string
		method         string
		acceptEncoding string
		gzipped        bool
	}{
		{"to a client that accepts gzip, as stored", http.MethodGet, "gzip, deflate", true},
		{"to a client that accepts anything", http.MethodGet, "*", true},
		{"to a client without Accept-Encoding, gunzipped", http.MethodGet, "", false},
		{"to a client that refuses gzip, gunzipped", http.MethodGet, "gzip;q=0, identity", false},
		{"HEAD, gzipped", http.MethodHead, "gzip", true},
		{"HEAD, gunzipped", http.MethodHead, "", false},
	}
	want := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			header := map[string]string{}
			if c.acceptEncoding != "" {
				header["Accept-Encoding"] = c.acceptEncoding
			}
			w := doWith(s, c.method, path, "", header)
			if w.Code != http.StatusOK {
				t.Fatalf("= %d, want 200: %s", w.Code, w.Body)
			}
			h := w.Header()
			if h.Get("Content-Type") != "application/octet-stream" || h.Get("Content-Disposition") != `attachment; filename="`+name+`"` {
				t.Errorf("Content-Type %q, Content-Disposition %q", h.Get("Content-Type"), h.Get("Content-Disposition"))
			}
			var size int
			if c.gzipped {
				fi, err := os.Stat(filepath.Join(dataDir, "nn", name+".gz"))
				if err != nil {
					t.Fatal(err)
				}
				size = int(fi.Size())
				if h.Get("Content-Encoding") != "gzip" {
					t.Errorf("Content-Encoding = %q, want gzip", h.Get("Content-Encoding"))
				}
			} else {
				size = len(content)
				if h.Get("Content-Encoding") != "" {
					t.Errorf("Content-Encoding = %q, want none", h.Get("Content-Encoding"))
				}
			}
			if h.Get("Content-Length") != strconv.Itoa(size) {
				t.Errorf("Content-Length = %q, want %d", h.Get("Content-Length"), size)
			}
			if c.method == http.MethodHead {
				if w.Body.Len() != 0 {
					t.Errorf("HEAD sent %d bytes", w.Body.Len())
				}
			} else {
				want++
				got := w.Body.Bytes()
				if c.gzipped {
					zr, err := gzip.NewReader(bytes.NewReader(got))
					if err != nil {
						t.Fatal(err)
					}
					if got, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				// What fishtest's worker checks: the SHA-256 of the content begins with the
				// name's 12 hex digits.
				if !bytes.Equal(got, content) || sha(got)[:12] != name[3:15] {
					t.Errorf("the client got %d bytes with SHA-256 %s, want the network", len(got), sha(got)[:12])
				}
			}
			if d := downloads(); d != want {
				t.Errorf("downloads = %d, want %d", d, want)
			}
		})
	}
}

func TestNNDownloadWithoutAFile(t *testing.T) {
	dataDir := t.TempDir()
	s, db := newReadServer(t, func(d *server.Deps) { d.DataDir = dataDir })
	t.Run("a known network without a file here is redirected", func(t *testing.T) {
		const name = "nn-0123456789ab.nnue"
		if err := db.NNs.Insert(context.Background(), &rundb.NN{Name: name, User: "alice"}); err != nil {
			t.Fatal(err)
		}
		w := doWith(s, http.MethodGet, "/api/nn/"+name, "", map[string]string{"Accept-Encoding": "gzip"})
		if w.Code != http.StatusFound || w.Header().Get("Location") != "http://example.com/nn/"+name {
			t.Errorf("= %d to %q, want 302 to this server's /nn/", w.Code, w.Header().Get("Location"))
		}
		if n, err := db.NNs.Get(context.Background(), name); err != nil || n.Downloads != 1 {
			t.Errorf("downloads = %+v, %v; want 1", n, err)
		}
	})
	t.Run("a file of an unknown network is not served", func(t *testing.T) {
		name := storeNet(t, dataDir, db, []byte("not recorded"), false)
		path := "/api/nn/" + name
		wantAPIError(t, doWith(s, http.MethodGet, path, "", nil), http.StatusNotFound, path, "The network "+name+" does not exist")
	})
	t.Run("an unknown network is 404", func(t *testing.T) {
		path := "/api/nn/nn-ffffffffffff.nnue"
		wantAPIError(t, doWith(s, http.MethodGet, path, "", nil), http.StatusNotFound, path, "does not exist")
	})
	t.Run("only files with a network's name are served", func(t *testing.T) {
		// A document with an odd name (imported, say) must not make any file under the data
		// directory reachable: only nn-<12 hex digits>.nnue names are looked up on disk.
		if err := os.WriteFile(filepath.Join(dataDir, "secret.gz"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := db.NNs.Insert(context.Background(), &rundb.NN{Name: "../secret", User: "alice"}); err != nil {
			t.Fatal(err)
		}
		if got := api.NetworkFile(s.API(), "../secret"); got != "" {
			t.Errorf("NetworkFile(\"../secret\") = %q, want none", got)
		}
	})
}

func TestNNDownloadAcceptsGzip(t *testing.T) {
	for _, c := range []struct {
		header []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"deflate, gzip;q=1.0, *;q=0.5"}, true},
		{[]string{"deflate", "x-gzip"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.000"}, false},
		{[]string{"identity"}, false},
		{[]string{"br, *"}, true},
		{[]string{"gzipper"}, false},
	} {
		if got := api.NNAcceptsGzip(c.header); got != c.want {
			t.Errorf("api.NNAcceptsGzip(%q) = %v, want %v", c.header, got, c.want)
		}
	}
}
