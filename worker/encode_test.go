package worker

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// randomText is a string of random pieces: plain ASCII, characters encoding/json escapes (HTML
// ones too), multi-byte UTF-8, the line separators it escapes and invalid UTF-8.
func randomText(rng *rand.Rand) string {
	pieces := []string{"", "a", "Linux 6.1", "0123456789abcdef01234567", `"`, `\`, "<", ">", "&", "\n", "\t",
		"\x00", "\x1f", "\x7f", "é", "♞", "\u2028", "\u2029", "\xff", "\xe2\x80", "+/=", " "}
	var b []byte
	for range rng.IntN(6) {
		b = append(b, pieces[rng.IntN(len(pieces))]...)
	}
	return string(b)
}

func randomInt(rng *rand.Rand) int {
	switch rng.IntN(4) {
	case 0:
		return 0
	case 1:
		return rng.IntN(100)
	case 2:
		return -rng.IntN(1000)
	}
	return int(rng.Int64()) - math.MaxInt64/2
}

func randomRequest(rng *rand.Rand) protocol.Request {
	ptr := func(s string) *string {
		if rng.IntN(3) == 0 {
			return nil
		}
		return &s
	}
	r := protocol.Request{Password: randomText(rng), RunID: ptr(randomText(rng)), PGN: ptr(randomText(rng)),
		Message: ptr(randomText(rng))}
	if rng.IntN(3) > 0 {
		id := randomInt(rng)
		r.TaskID = &id
	}
	if rng.IntN(3) == 0 {
		r.SPSA = &protocol.SPSAResult{Wins: randomInt(rng), Losses: randomInt(rng), Draws: randomInt(rng),
			NumGames: randomInt(rng), Sig: randomInt(rng)}
	}
	if rng.IntN(2) == 0 {
		r.Stats = &protocol.Stats{Wins: randomInt(rng), Losses: randomInt(rng), Draws: randomInt(rng),
			Crashes: randomInt(rng), TimeLosses: randomInt(rng)}
		for i := range r.Stats.Pentanomial {
			r.Stats.Pentanomial[i] = randomInt(rng)
		}
	}
	speeds := []float64{0, 1, 1.5e6, 123456.789, 1e-7, 1e21, 1e20, -3, math.NaN(), math.Inf(1)}
	r.WorkerInfo = protocol.WorkerInfo{Uname: randomText(rng), Architecture: [2]string{"64bit", randomText(rng)},
		Concurrency: randomInt(rng), MaxMemory: randomInt(rng), MinThreads: randomInt(rng), Username: randomText(rng),
		Version: randomInt(rng), PythonVersion: [3]int{1, randomInt(rng), 3}, GCCVersion: [3]int{9, 3, randomInt(rng)},
		Compiler: randomText(rng), UniqueKey: randomText(rng), Modified: rng.IntN(2) == 0, WorkerArch: randomText(rng),
		ARCH: randomText(rng), NPS: speeds[rng.IntN(len(speeds))], NearGithubAPILimit: rng.IntN(2) == 0}
	return r
}

// A request body is byte for byte what encoding/json makes of it, whatever its values, and a
// changed worker_info (a new speed) is encoded anew, not served from the last one's JSON.
func TestEncodeBodyIsEncodingJSONs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := &Worker{}
	var prev protocol.Request
	for i := range 20000 {
		r := randomRequest(rng)
		if i%3 == 0 { // the same worker_info again, perhaps with another speed
			nps := r.WorkerInfo.NPS
			r.WorkerInfo = prev.WorkerInfo
			if i%2 == 0 {
				r.WorkerInfo.NPS = nps
			}
		}
		prev = r
		want, wantErr := json.Marshal(r)
		got, err := w.encodeBody(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("request %+v:\n got %s (%v)\nwant %s (%v)", r, got, err, want, wantErr)
		}
	}
	other := struct {
		A string `json:"a"`
	}{"<x>"}
	if got, _ := w.encodeBody(other); string(got) != `{"a":"\u003cx\u003e"}` {
		t.Errorf("another payload: %s", got)
	}
}

func BenchmarkEncodeBody(b *testing.B) {
	w, err := New(Config{ServerURL: "http://localhost", Username: "alice", Password: "secret", Concurrency: 3,
		UniqueKey: NewUniqueKey("ab12")}, &SimSource{})
	if err != nil {
		b.Fatal(err)
	}
	r := w.taskRequest("0123456789abcdef01234567", 3)
	r.Stats = &protocol.Stats{Wins: 10, Losses: 8, Draws: 22, Pentanomial: [5]int{1, 4, 8, 5, 2}}
	for _, bc := range []struct {
		name   string
		encode func() ([]byte, error)
	}{{"encoding_json", func() ([]byte, error) { return json.Marshal(r) }}, {"worker", func() ([]byte, error) { return w.encodeBody(r) }}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A reply decodes to what json.Unmarshal makes of it, valid or not, flat or nested: replies
// built from pieces of JSON, most of them valid, some broken anywhere.
func TestDecodeObjectIsEncodingJSONs(t *testing.T) {
	fixed := []string{`{}`, ` { } `, `{"duration":0.0004,"task_alive":true}`, `null`, `[]`, `{"a":1}x`, `{"a":1,}`,
		`{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e400}`, `{"a":-0}`, `{"a":"\u00e9"}`,
		`{"a":"é"}`, "{\"a\":\"\x01\"}", `{"a":tru}`, `{"a":nul}`, `{"a":{"b":[1,2]}}`, `{"a":1,"a":2}`, `{"a" 1}`,
		`{"a":1 "b":2}`, `{"a":"\"}`, `{"a":"x`, `{`, ``, ` `, `{"a":1}}`, `{"a":1e+5,"b":-2.5E-3,"c":null,"d":false}`}
	pieces := []string{`{`, `}`, `[`, `]`, `,`, `:`, ` `, "\n", `"duration"`, `"task_alive"`, `"info"`, `"error"`, `"é"`,
		`"a\"b"`, `"<&>"`, `0`, `-0`, `12`, `0.0004`, `1e3`, `-2.5E-3`, `01`, `1.`, `true`, `false`, `null`, `tru`, `"x`,
		`1e400`, "\"\x7f\""}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		var b []byte
		switch rng.IntN(3) {
		case 0: // a nested object, sometimes broken
			b = appendRandomJSON(b, rng, pieces[8:], 0, true)
			if rng.IntN(4) == 0 {
				b = append(b[:rng.IntN(len(b))], pieces[rng.IntN(len(pieces))]...)
			}
		case 1: // a flat object, sometimes broken
			b = append(b, '{')
			for k := range rng.IntN(5) {
				if k > 0 {
					b = append(b, ',')
				}
				b = append(b, pieces[8+rng.IntN(6)]...)
				b = append(b, ':')
				b = append(b, pieces[8+rng.IntN(len(pieces)-8)]...)
			}
			b = append(b, '}')
			if rng.IntN(4) == 0 {
				b = append(b[:rng.IntN(len(b))], pieces[rng.IntN(len(pieces))]...)
			}
		default:
			for range rng.IntN(12) {
				b = append(b, pieces[rng.IntN(len(pieces))]...)
			}
		}
		fixed = append(fixed, string(b))
	}
	for _, text := range fixed {
		var want map[string]any
		err := json.Unmarshal([]byte(text), &want)
		wantOK := err == nil && want != nil
		got, ok := decodeObject([]byte(text))
		if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: got %#v (%v), json.Unmarshal %#v (%v)", text, got, ok, want, err)
		}
	}
}

// appendRandomJSON appends a random JSON value (an object when object is set) of scalars.
func appendRandomJSON(b []byte, rng *rand.Rand, scalars []string, depth int, object bool) []byte {
	switch k := rng.IntN(4); {
	case object || (k == 0 && depth < 5):
		b = append(b, '{')
		for i := range rng.IntN(4) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, scalars[rng.IntN(6)]...)
			b = append(b, ": "[:1+rng.IntN(2)]...)
			b = appendRandomJSON(b, rng, scalars, depth+1, false)
		}
		return append(b, '}')
	case k == 1 && depth < 5:
		b = append(b, '[')
		for i := range rng.IntN(4) {
			if i > 0 {
				b = append(b, ", "[:1+rng.IntN(2)]...)
			}
			b = appendRandomJSON(b, rng, scalars, depth+1, false)
		}
		return append(b, ']')
	}
	return append(b, scalars[rng.IntN(len(scalars))]...)
}

func BenchmarkDecodeObject(b *testing.B) {
	reply := []byte(`{"task_alive":true,"duration":0.0004}`)
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(reply, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeObject(reply); !ok {
				b.Fatal("not decoded")
			}
		}
	})
}

// upload_pgn's body, its base64 written in place, is byte for byte json.Marshal's of the request
// with the base64 as its PGN; a worker_info that cannot be encoded leaves the request to it.
func TestEncodePGNUploadIsEncodingJSONs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	w := &Worker{}
	for range 3000 {
		r := randomRequest(rng)
		r.PGN = nil
		gz := make([]byte, rng.IntN(300))
		for i := range gz {
			gz[i] = byte(rng.Uint32())
		}
		payload, size := w.encodePGNUpload(r, gz)
		pgn := base64.StdEncoding.EncodeToString(gz)
		r.PGN = &pgn
		want, wantErr := json.Marshal(r)
		got, err := w.encodeBody(payload)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) || size != len(pgn) {
			t.Fatalf("upload %+v:\n got %s (%v), size %d\nwant %s (%v), size %d", r, got, err, size, want, wantErr, len(pgn))
		}
	}
}

// The gzip stream of a PGN upload is the one of writing its batches whole, at every level, and a
// pooled writer and buffer carry nothing from one upload to the next.
func TestGzipPGNIsWritingTheBatchesWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	task := Task{RunID: "0123456789abcdef01234567", TaskID: 3, Args: protocol.RunArgs{NewTag: "patch", BaseTag: "master"}}
	for round := range 40 {
		level := gzip.HuffmanOnly + round%(gzip.BestCompression-gzip.HuffmanOnly+1)
		if level == gzip.NoCompression {
			level = gzip.BestSpeed
		}
		var pgn []string
		for range rng.IntN(8) {
			results := make([]gameResult, 2*(1+rng.IntN(200)))
			for i := range results {
				results[i] = gameResult(rng.IntN(3))
			}
			pgn = append(pgn, simPGN(task, results))
		}
		name := fmt.Sprintf("run-%d.pgn.gz", round)
		var want bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&want, level)
		zw.Name = name
		for _, p := range pgn {
			io.WriteString(zw, p)
		}
		zw.Close()
		var got []byte
		gzipPGN(level, name, pgn, func(gz []byte) { got = bytes.Clone(gz) })
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("level %d, %d batches: the stream differs from writing them whole", level, len(pgn))
		}
	}
}
