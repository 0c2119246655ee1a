package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/servertest"
)

func gzipped(t testing.TB, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecodePGNUpload(t *testing.T) {
	gz := gzipped(t, "1. e4 e5 2. d4 d5")
	b64 := base64.StdEncoding.EncodeToString
	for _, c := range []struct {
		name     string
		in       string
		maxBytes int
		wantErr  string // "" for success
	}{
		{"gzip data", b64(gz), 1 << 20, ""},
		{"exactly at the limit", b64(gz), len(gz), ""},
		{"no limit given means the default", b64(gz), 0, ""},
		{"one byte over the limit", b64(gz), len(gz) - 1, "bytes compressed, over the limit of " + strconv.Itoa(len(gz)-1)},
		{"far over the limit, refused before decoding", b64(make([]byte, 4096)), 100, "over the limit of 100 bytes"},
		{"empty", "", 1 << 20, "pgn is empty"},
		{"not base64", "not-base64", 1 << 20, "not valid base64"},
		{"URL-safe base64 is not standard base64", base64.URLEncoding.EncodeToString([]byte{0x1f, 0x8b, 0xfb, 0xff}), 1 << 20, "not valid base64"},
		{"base64 of plain text", b64([]byte("1. e4 e5")), 1 << 20, "not gzip data"},
		{"a single byte", b64([]byte{0x1f}), 1 << 20, "not gzip data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := api.DecodePGNUpload(c.in, c.maxBytes, 0)
			if c.wantErr == "" {
				if err != nil || !bytes.Equal(got, gz) {
					t.Errorf("= %d bytes, %v; want the gzip data", len(got), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

func FuzzDecodePGNUpload(f *testing.F) {
	f.Add(base64.StdEncoding.EncodeToString(gzipped(f, "1. e4")), 64)
	f.Add("H4s=", 2)
	f.Add("====", 10)
	f.Fuzz(func(t *testing.T, in string, maxBytes int) {
		got, err := api.DecodePGNUpload(in, maxBytes, 0)
		if err != nil {
			return
		}
		limit := maxBytes
		if limit <= 0 {
			limit = api.DefaultMaxPGNBytes
		}
		if len(got) < 2 || got[0] != 0x1f || got[1] != 0x8b || len(got) > limit {
			t.Errorf("accepted %d bytes starting %x with limit %d", len(got), got[:min(2, len(got))], limit)
		}
	})
}

func insertPGN(t *testing.T, db *rundb.DB, runTask string, data []byte, size int) {
	t.Helper()
	if err := db.PGNs.Insert(context.Background(), &rundb.PGN{RunID: runTask, PGNZip: data, Size: size}); err != nil {
		t.Fatal(err)
	}
}

func TestDownloadPGN(t *testing.T) {
	s, db := newReadServer(t, nil)
	run := rundb.NewObjectID().Hex()
	text := "[Event \"task 3\"]\n\n1. e4 e5 *\n"
	gz := gzipped(t, text)
	insertPGN(t, db, run+"-3", gz, len(gz))
	name := run + "-3.pgn"

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			w := servertest.Do(s.Handler(), method, "/api/pgn/"+name)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			for header, want := range map[string]string{
				"Content-Type":        "application/gzip",
				"Content-Encoding":    "", // a file to save: no client inflates it on its own
				"Content-Length":      strconv.Itoa(len(gz)),
				"Content-Disposition": `attachment; filename="` + name + `.gz"`,
			} {
				if got := w.Header().Get(header); got != want {
					t.Errorf("%s = %q, want %q", header, got, want)
				}
			}
			if method == http.MethodHead {
				if w.Body.Len() != 0 {
					t.Errorf("HEAD sent a %d-byte body", w.Body.Len())
				}
				return
			}
			zr, err := gzip.NewReader(w.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(zr); err != nil || string(got) != text {
				t.Errorf("body decompresses to %q, %v; want %q", got, err, text)
			}
		})
	}
	t.Run("the name is cut at its first dot", func(t *testing.T) {
		if w := servertest.Do(s.Handler(), http.MethodGet, "/api/pgn/"+run+"-3.anything.else"); w.Code != http.StatusOK || w.Body.Len() != len(gz) {
			t.Errorf("= %d with %d bytes", w.Code, w.Body.Len())
		}
	})
	t.Run("a name with a quote is quoted in the header", func(t *testing.T) {
		w := servertest.Do(s.Handler(), http.MethodGet, "/api/pgn/"+run+`-3.pgn"x`)
		if got := w.Header().Get("Content-Disposition"); got != `attachment; filename="`+run+`-3.pgn\"x.gz"` {
			t.Errorf("Content-Disposition = %q", got)
		}
	})
	for _, c := range []struct{ name, file string }{
		{"a task without a PGN", run + "-4.pgn"},
		{"a run without PGNs", rundb.NewObjectID().Hex() + "-3.pgn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantAPIError(t, servertest.Do(s.Handler(), http.MethodGet, "/api/pgn/"+c.file), http.StatusNotFound, "/api/pgn/"+c.file, "No data found for "+c.file)
		})
	}
}

func TestDownloadRunPGNs(t *testing.T) {
	s, db := newReadServer(t, nil)
	run := rundb.NewObjectID().Hex()
	texts := map[int]string{}
	total := 0
	// Inserted out of order, with task 10 to catch a string sort; another run's PGN must not
	// be included.
	for _, task := range []int{10, 0, 2} {
		texts[task] = "[Round \"" + strconv.Itoa(task) + "\"]\n\n1. d4 *\n\n"
		gz := gzipped(t, texts[task])
		insertPGN(t, db, run+"-"+strconv.Itoa(task), gz, len(gz))
		total += len(gz)
	}
	other := gzipped(t, "another run")
	insertPGN(t, db, rundb.NewObjectID().Hex()+"-1", other, len(other))
	name := run + ".pgn.gz"

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			w := servertest.Do(s.Handler(), method, "/api/run_pgns/"+name)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			for header, want := range map[string]string{
				"Content-Type":        "application/gzip",
				"Content-Encoding":    "",
				"Content-Length":      strconv.Itoa(total),
				"Content-Disposition": `attachment; filename="` + name + `"`,
			} {
				if got := w.Header().Get(header); got != want {
					t.Errorf("%s = %q, want %q", header, got, want)
				}
			}
			if method == http.MethodHead {
				if w.Body.Len() != 0 {
					t.Errorf("HEAD sent a %d-byte body", w.Body.Len())
				}
				return
			}
			if w.Body.Len() != total {
				t.Errorf("body is %d bytes, Content-Length says %d", w.Body.Len(), total)
			}
			zr, err := gzip.NewReader(w.Body) // reads every member of a multi-member gzip
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if want := texts[0] + texts[2] + texts[10]; err != nil || string(got) != want {
				t.Errorf("body decompresses to %q, %v\nwant the tasks in order %q", got, err, want)
			}
		})
	}

	for _, c := range []struct {
		name, file string
		status     int
		want       string
	}{
		{"a run without PGNs", rundb.NewObjectID().Hex() + ".pgn.gz", http.StatusNotFound, "No data found for "},
		{"a name without .pgn.gz", run + ".pgn", http.StatusBadRequest, "Invalid filename format for "},
		{"a name with a dash", run + "-1.pgn.gz", http.StatusBadRequest, "Invalid filename format for "},
		{"a name with a regex character", "a.b.pgn.gz", http.StatusBadRequest, "Invalid filename format for "},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantAPIError(t, servertest.Do(s.Handler(), http.MethodGet, "/api/run_pgns/"+c.file), c.status, "/api/run_pgns/"+c.file, c.want+c.file)
		})
	}

	t.Run("a PGN whose size field lies ends the download there", func(t *testing.T) {
		run := rundb.NewObjectID().Hex()
		good, bad := gzipped(t, "good"), gzipped(t, "bad")
		insertPGN(t, db, run+"-0", good, len(good))
		insertPGN(t, db, run+"-1", bad, len(bad)+5)
		w := servertest.Do(s.Handler(), http.MethodGet, "/api/run_pgns/"+run+".pgn.gz")
		if w.Header().Get("Content-Length") != strconv.Itoa(len(good)+len(bad)+5) || !bytes.Equal(w.Body.Bytes(), good) {
			t.Errorf("sent %d bytes with Content-Length %s; want only the first PGN, so the client sees a short body",
				w.Body.Len(), w.Header().Get("Content-Length"))
		}
	})
}
