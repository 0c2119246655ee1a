package protocol

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// The decoders below walk the body themselves instead of unmarshalling it into structs, for
// three reasons: encoding/json matches keys case-insensitively (so "ARCH" and "arch" would
// collide and "PASSWORD" would pass for "password"), it cannot tell 1 from 1.0 or true from 1 in
// an int field the way Python does, and it allocates far more. The walk runs only over a body
// that parseBody has checked is well-formed JSON, so it never has to report a syntax error; it is
// still bounds-checked everywhere, so that a bug here cannot panic on hostile input.

// span locates a JSON value in the body: body[start:end]. The zero span means "absent": every
// present value has end > 0.
type span struct{ start, end int }

func (s span) present() bool { return s.end > 0 }

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseBody checks that body is JSON as Python's json.loads reads bytes (UTF-8, an optional BOM)
// and returns the body without the BOM and the span of its top-level value.
func parseBody(body []byte) ([]byte, span, error) {
	body = bytes.TrimPrefix(body, utf8BOM)
	if !utf8.Valid(body) || !json.Valid(body) {
		return nil, span{}, ErrNotJSON
	}
	i := skipSpace(body, 0)
	return body, span{i, skipValue(body, i)}, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the offset just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // a number or a literal ends at a delimiter
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the offset just past the string that starts with the quote at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); {
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return len(b)
}

// members iterates over the members of the object at a span, in body order.
type members struct {
	b     []byte
	i     int
	end   int
	first bool
}

func newMembers(b []byte, obj span) members {
	return members{b: b, i: obj.start + 1, end: obj.end, first: true}
}

// next returns the next member's key (the raw string token, quotes included) and value.
func (m *members) next() (key, val span, ok bool) {
	b := m.b[:m.end]
	i := skipSpace(b, m.i)
	if !m.first && i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	m.first = false
	if i >= len(b) || b[i] != '"' {
		return span{}, span{}, false
	}
	key = span{i, skipString(b, i)}
	i = skipSpace(b, key.end)
	if i >= len(b) || b[i] != ':' {
		return span{}, span{}, false
	}
	i = skipSpace(b, i+1)
	val = span{i, skipValue(b, i)}
	if val.end <= val.start {
		return span{}, span{}, false
	}
	m.i = val.end
	return key, val, true
}

// elements iterates over the elements of the array at a span.
type elements struct {
	b     []byte
	i     int
	end   int
	first bool
}

func newElements(b []byte, arr span) elements {
	return elements{b: b, i: arr.start + 1, end: arr.end, first: true}
}

func (e *elements) next() (val span, ok bool) {
	b := e.b[:e.end]
	i := skipSpace(b, e.i)
	if !e.first && i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	e.first = false
	if i >= len(b) || b[i] == ']' {
		return span{}, false
	}
	val = span{i, skipValue(b, i)}
	if val.end <= val.start {
		return span{}, false
	}
	e.i = val.end
	return val, true
}

// collect records in spans[k] the value of each member whose key is keys[k]. A repeated key
// keeps its last value, as Python's json.loads does. The first member whose key is not in keys
// (in body order) is returned as unknown, the zero span if there is none.
func collect(b []byte, obj span, keys []string, spans []span) (unknown span) {
	m := newMembers(b, obj)
	for {
		key, val, ok := m.next()
		if !ok {
			return unknown
		}
		k := lookup(b, key, keys)
		if k < 0 {
			if !unknown.present() {
				unknown = key
			}
			continue
		}
		spans[k] = val
	}
}

// lookup returns the index in keys of the key token at a span, or -1.
func lookup(b []byte, key span, keys []string) int {
	raw := b[key.start+1 : key.end-1]
	if bytes.IndexByte(raw, '\\') >= 0 { // rare: an escaped key, e.g. "pass\u0077ord"
		s, ok := unquote(b[key.start:key.end])
		if !ok {
			return -1
		}
		raw = []byte(s)
	}
	for k, name := range keys {
		if string(raw) == name {
			return k
		}
	}
	return -1
}

// unquote decodes a string token, quotes included.
func unquote(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[0] != '"' || tok[len(tok)-1] != '"' {
		return "", false
	}
	raw := tok[1 : len(tok)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return "", false
	}
	return s, true
}

// numKind classifies a JSON value read as an integer.
type numKind uint8

const (
	numInt      numKind = iota // an integral JSON number that fits in an int
	numNotInt                  // not a number, or a number with a fraction or an exponent
	numTooLarge                // an integral JSON number beyond the range of an int
)

// parseInt reads an integer the way Python's json.loads makes an int: only a JSON number
// without fraction or exponent is one (1.0 and 1e3 are floats, true is a bool).
func parseInt(raw []byte) (int, numKind) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	if i == len(raw) {
		return 0, numNotInt
	}
	limit := uint64(math.MaxInt)
	if neg {
		limit++
	}
	var u uint64
	tooLarge := false
	for ; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return 0, numNotInt
		}
		d := uint64(c - '0')
		if tooLarge || u > (limit-d)/10 {
			tooLarge = true // keep going: "1e999999..." is still a float, not an int
			continue
		}
		u = u*10 + d
	}
	if tooLarge {
		return 0, numTooLarge
	}
	if neg {
		return int(-u), numInt // -u wraps to MinInt for u == MaxInt+1, which is right
	}
	return int(u), numInt
}

// parseNumber reads a JSON number (int or float, like vtjson's float schema). ok is false for
// anything else and for a number too large for a float64.
func parseNumber(raw []byte) (f float64, ok bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	if n, kind := parseInt(raw); kind == numInt {
		return float64(n), true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}
