package protocol_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shoal-chess/shoal/protocol"
)

// validBodies are bodies at the edges of what JSON and UTF-8 allow.
var validBodies = []string{
	"", " ", "{}", "[]", " {} ", "\t\n\r{}\r\n", "{} x", "{}{}", "[1,]", "[,1]", "{,}", `{"a":1,}`, `{"a" 1}`, `{1:2}`,
	"0", "-0", "01", "-", "1.", ".5", "1.5", "1e5", "1E+5", "1e-5", "1e", "1e+", "-1.5e-10", "1.5.5", "+1", "0x10",
	"true", "false", "null", "tru", "nul", "truex", "True", "NaN", "Infinity",
	`""`, `"\"\\\/\b\f\n\r\t"`, `"\u0041\uD800\udFfF"`, `"\u004"`, `"\u00g1"`, `"\x"`, `"\'"`, `"a`, `"\`,
	"\"\x00\"", "\"\x1f\"", "\"\x7f\"", "\"caf\xc3\xa9\"", "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
	"\xff", "{\"a\":\"\xe2\x80\"}", "\xef\xbb\xbf{}", "\xef\xbb\xbf\xef\xbb\xbf{}", "\xef\xbb{}",
	`{"a":[1,{"b":null}],"c":"d"}`, `[[[]]]`, `[[[]]`, `{"a":{"b":}}`, `{"a"}`, `["a":1]`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 9999) + "[]" + strings.Repeat("}", 9999),
	strings.Repeat(`{"a":`, 10000) + "[]" + strings.Repeat("}", 10000),
	strings.Repeat("[", 20000),
	requestTaskBody, updateTaskBody, spsaUpdateBody, uploadPGNBody,
}

// wantJSON is what ParseBody accepted before it checked the body itself: utf8.Valid and
// json.Valid, after an optional BOM.
func wantJSON(body []byte) bool {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	return utf8.Valid(body) && json.Valid(body)
}

// ParseBody accepts exactly what utf8.Valid and json.Valid accept, with the documented error.
func TestParseBodyAcceptsWhatValidAccepts(t *testing.T) {
	for _, body := range validBodies {
		_, err := protocol.ParseBody([]byte(body))
		if want := wantJSON([]byte(body)); (err == nil) != want {
			t.Errorf("%.60q: error %v, want JSON %v", body, err, want)
		}
		if err != nil && err != protocol.ErrNotJSON {
			t.Errorf("%.60q: error %v, want ErrNotJSON", body, err)
		}
	}
}

// FuzzParseBody holds ParseBody to utf8.Valid and json.Valid on any bytes.
func FuzzParseBody(f *testing.F) {
	for _, body := range validBodies {
		if len(body) < 1000 {
			f.Add([]byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := protocol.ParseBody(body)
		if want := wantJSON(body); (err == nil) != want {
			t.Fatalf("%q: error %v, want JSON %v", body, err, want)
		}
	})
}
