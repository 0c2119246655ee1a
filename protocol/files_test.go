package protocol_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

const sourceSHA = "7150183d07a40653aff6ba64a73f27fe049f525d"

// sourceBody is a source request as Shoal's worker sends it.
var sourceBody = strings.Replace(requestTaskBody, `"password": "secret"}`, `"password": "secret", "sha": "`+sourceSHA+`"}`, 1)

func decodeSource(body string) (*protocol.SourceRequest, error) {
	p, err := protocol.ParseBody([]byte(body))
	if err != nil {
		return nil, err
	}
	return p.SourceRequest(legacy)
}

func TestSourceRequest(t *testing.T) {
	r, err := decodeSource(sourceBody)
	if err != nil {
		t.Fatal(err)
	}
	if r.SHA != sourceSHA || r.Password != "secret" || r.WorkerInfo.Username != "fakeworker" || r.WorkerInfo.Concurrency != 4 {
		t.Errorf("decoded %+v", r)
	}
	cases := []struct{ old, new, field string }{
		{sourceSHA, strings.ToUpper(sourceSHA), "sha"},
		{sourceSHA, sourceSHA[:12], "sha"},
		{`"` + sourceSHA + `"`, `40`, "sha"},
		{`, "sha": "` + sourceSHA + `"`, ``, "request"},
		{`"sha":`, `"run_id": "65a1b2c3d4e5f60718293a4b", "sha":`, "request"},
		{`"concurrency": 4`, `"concurrency": 0`, "worker_info.concurrency"},
		{`"password": "secret"`, `"password": 1`, "password"},
	}
	for _, c := range cases {
		body := strings.Replace(sourceBody, c.old, c.new, 1)
		_, err := decodeSource(body)
		var ve *protocol.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s -> %s: %v; want a %s error", c.old, c.new, err, c.field)
		}
	}
}

func TestBookSRI(t *testing.T) {
	// fishtest's worker reads the book as text: the three line ends give one checksum.
	unix := protocol.BookSRI([]byte("a b c d\ne f g h\n"))
	for _, text := range []string{"a b c d\r\ne f g h\r\n", "a b c d\re f g h\r"} {
		if got := protocol.BookSRI([]byte(text)); got != unix {
			t.Errorf("BookSRI(%q) = %s; want %s, the same as with \\n", text, got, unix)
		}
	}
	// base64 of the sha384 of "a b c d\ne f g h\n", as Python computes it:
	// base64.b64encode(hashlib.sha384(b"a b c d\ne f g h\n").digest()).
	if want := "IXLxhnhFkv1vvlTwIfoCy+/aneKgk9BUXwWvE7liC1aW1xm9T7PwAgGI13Aa1rMg"; unix != want {
		t.Errorf("BookSRI = %s; want %s", unix, want)
	}
}

// A book hashed in pieces, a "\r\n" cut between two, has the checksum of the whole.
func TestBookHashInPieces(t *testing.T) {
	text := []byte("a b c d\r\ne f g h\r\ri j k l\r")
	whole := protocol.BookSRI(text)
	for cut := range len(text) + 1 {
		h := protocol.NewBookHash()
		h.Write(text[:cut])
		h.Write(text[cut:])
		if got := h.SRI(); got != whole {
			t.Errorf("cut at %d: %s; want %s", cut, got, whole)
		}
	}
}

func TestNetsInSource(t *testing.T) {
	sf16 := []byte("#define EvalFileDefaultName   \"nn-5af11540bbfe.nnue\"\n")
	sf17 := []byte("#define EvalFileDefaultNameBig \"nn-1111cefa1111.nnue\"\n#define EvalFileDefaultNameSmall \"nn-37f18f62d772.nnue\"\n" +
		"// nn-000000000000.nnue is not a default\n")
	sf12ucioption := []byte(`  o["EvalFile"] << Option("nn-82215d0fd0df.nnue", on_eval_file);` + "\n")
	cases := []struct {
		name           string
		evaluate, opts []byte
		want           []string
	}{
		{"Stockfish 16", sf16, nil, []string{"nn-5af11540bbfe.nnue"}},
		{"Stockfish 17", sf17, nil, []string{"nn-1111cefa1111.nnue", "nn-37f18f62d772.nnue"}},
		{"before embedding", []byte("// classical only\n"), sf12ucioption, []string{"nn-82215d0fd0df.nnue"}},
		{"Stockfish 11", nil, []byte("o[\"Hash\"] << Option(16, 1, 131072);\n"), nil},
	}
	for _, c := range cases {
		if got := protocol.NetsInSource(c.evaluate, c.opts); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
	if !protocol.NetNameMatches("nn-e3b0c44298fc.nnue", nil) || protocol.NetNameMatches("nn-e3b0c44298fc.nnue", []byte("x")) {
		t.Error("NetNameMatches does not check the name against the content's sha256")
	}
}

// FuzzSourceRequest feeds SourceRequest arbitrary bodies: it must never panic; what it accepts has
// a full lower-case SHA and a valid worker_info and is JSON with no other keys; what it refuses,
// it refuses with one of the documented errors.
func FuzzSourceRequest(f *testing.F) {
	f.Add([]byte(sourceBody))
	f.Add([]byte(strings.Replace(sourceBody, sourceSHA, "x", 1)))
	f.Add([]byte(`{"password": "p", "worker_info": {}, "sha": ""}`))
	full := regexp.MustCompile(`^[0-9a-f]{40}$`)
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := protocol.ParseBody(body)
		if err != nil {
			checkRejection(t, body, err)
			return
		}
		r, err := p.SourceRequest(legacy)
		if err != nil {
			checkRejection(t, body, err)
			return
		}
		if !full.MatchString(r.SHA) || !protocol.ValidUsername(r.WorkerInfo.Username) && !legacy(r.WorkerInfo.Username) {
			t.Fatalf("accepted %+v from %q", r, body)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(body, &keys); err != nil {
			// A BOM is allowed before the object, as fishtest's json.loads takes it.
			return
		}
		for k := range keys {
			if k != "password" && k != "worker_info" && k != "sha" {
				t.Fatalf("accepted the unknown key %q", k)
			}
		}
	})
}
