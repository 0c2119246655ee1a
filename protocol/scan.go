package protocol

import (
	"bytes"
	"encoding/json"
	"math"
	"math/bits"
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
// and returns the body without the BOM and the span of its top-level value. It accepts exactly
// what utf8.Valid and json.Valid both accept, in one pass over the body instead of two and a
// third to find the value's end (TestParseBodyAcceptsWhatValidAccepts, FuzzParseBody). If ix is
// not nil and the value is an object, the same pass notes in ix where its members are (index).
func parseBody(body []byte, ix *index) ([]byte, span, error) {
	body = bytes.TrimPrefix(body, utf8BOM)
	v := validator{b: body, ix: ix}
	start := skipSpace(body, 0)
	var end int
	var ok bool
	if ix != nil && start < len(body) && body[start] == '{' {
		end, ok = v.object(start, 1, requestKeySet, ix.top[:], &ix.unknown)
	} else {
		end, ok = v.value(start, 0)
	}
	if !ok || skipSpace(body, end) != len(body) {
		return nil, span{}, ErrNotJSON
	}
	return body, span{start, end}, nil
}

// maxNestingDepth is encoding/json's: json.Valid refuses arrays and objects nested deeper.
const maxNestingDepth = 10000

// validator checks JSON's grammar, as json.Valid does, and that strings are UTF-8, as
// utf8.Valid does (the grammar allows no other bytes past 0x7f outside strings).
type validator struct {
	b  []byte
	ix *index // where object notes the members of the top-level object, if not nil
}

// value checks the value that starts at b[i], within depth arrays or objects, and returns the
// offset just past it.
func (v *validator) value(i, depth int) (int, bool) {
	b := v.b
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return v.string(i)
	case c == '{' || c == '[':
		if depth >= maxNestingDepth {
			return i, false
		}
		return v.container(i, depth+1)
	case c == '-' || '0' <= c && c <= '9':
		return v.number(i)
	case c == 't':
		return v.literal(i, "true")
	case c == 'f':
		return v.literal(i, "false")
	case c == 'n':
		return v.literal(i, "null")
	}
	return i, false
}

// container checks the object or array that opens at b[i].
func (v *validator) container(i, depth int) (int, bool) {
	b := v.b
	object, closing := b[i] == '{', byte(']')
	if object {
		closing = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		if object {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			if i, ok = v.string(i); !ok {
				return i, false
			}
			if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
		}
		if i, ok = v.value(i, depth); !ok {
			return i, false
		}
		switch i = skipSpace(b, i); {
		case i >= len(b):
			return i, false
		case b[i] == closing:
			return i + 1, true
		case b[i] != ',':
			return i, false
		}
		i = skipSpace(b, i+1)
	}
}

// object is container for an object, at depth, that also notes where its members are: in
// into[k] the value of the last member whose key is keys.names[k], in unknown the first key not in
// keys, as collect does. In the top-level object (depth 1) the members of each worker_info
// and stats that is an object are noted in v.ix likewise (index.nested).
func (v *validator) object(i, depth int, keys *keySet, into []span, unknown *span) (int, bool) {
	b, next := v.b, 0
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		key := span{start: i}
		var ok bool
		if key.end, ok = v.string(i); !ok {
			return key.end, false
		}
		if i = skipSpace(b, key.end); i >= len(b) || b[i] != ':' {
			return i, false
		}
		i = skipSpace(b, i+1)
		val, k := span{start: i}, lookupFrom(b, key, keys, next)
		if k >= 0 {
			next = k + 1
		}
		var nested *keySet
		var nestedInto []span
		var nestedUnknown *span
		if depth == 1 && i < len(b) && b[i] == '{' {
			nested, nestedInto, nestedUnknown = v.ix.nested(k)
		}
		if nested != nil { // the last one's members are the ones read
			clear(nestedInto)
			*nestedUnknown = span{}
			val.end, ok = v.object(i, depth+1, nested, nestedInto, nestedUnknown)
		} else {
			val.end, ok = v.value(i, depth)
		}
		if !ok {
			return val.end, false
		}
		if k >= 0 {
			into[k] = val
		} else if !unknown.present() {
			*unknown = key
		}
		switch i = skipSpace(b, val.end); {
		case i >= len(b):
			return i, false
		case b[i] == '}':
			return i + 1, true
		case b[i] != ',':
			return i, false
		}
		i = skipSpace(b, i+1)
	}
}

// string checks the string that opens with the quote at b[i]: no control characters, only
// JSON's escapes, UTF-8.
func (v *validator) string(i int) (int, bool) {
	b := v.b
	start, ascii := i+1, true
	for i++; i < len(b); i++ {
		c := b[i]
		if plainInString[c] { // most bytes: one load and a branch instead of the switch's four
			continue
		}
		switch {
		case c == '"':
			return i + 1, ascii || utf8.Valid(b[start:i])
		case c < 0x20:
			return i, false
		case c >= utf8.RuneSelf:
			ascii = false
		case c == '\\':
			if i++; i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// plainInString[c] is set for the bytes a JSON string holds as they are, with nothing to check:
// ASCII from 0x20 on, but the quote and the backslash.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// number checks the number that starts at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number(i int) (int, bool) {
	b := v.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		i = digits(b, i)
	}
	return i, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digits returns the offset past the digits that start at b[i].
func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// literal checks that b[i:] begins with word.
func (v *validator) literal(i int, word string) (int, bool) {
	if len(v.b)-i < len(word) || string(v.b[i:i+len(word)]) != word {
		return i, false
	}
	return i + len(word), true
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

// collect records in spans[k] the value of each member whose key is keys.names[k]. A repeated
// key keeps its last value, as Python's json.loads does. The first member whose key is not in
// keys (in body order) is returned as unknown, the zero span if there is none.
func collect(b []byte, obj span, keys *keySet, spans []span) (unknown span) {
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

// keySet is a schema's keys, looked up by their length first: a key is compared with the one
// or few of its length instead of with each in turn (worker_info has sixteen).
type keySet struct {
	names []string
	byLen [maxKeyLen + 1]uint32 // bit k set: names[k] has that length
}

// maxKeyLen is the length of the longest key a keySet holds.
const maxKeyLen = 31

func newKeySet(names []string) *keySet {
	ks := &keySet{names: names}
	for k, name := range names {
		if k >= 32 || len(name) > maxKeyLen {
			panic("protocol: a keySet holds up to 32 keys of up to 31 bytes")
		}
		ks.byLen[len(name)] |= 1 << k
	}
	return ks
}

// find returns the index of the key raw (unquoted), or -1.
func (ks *keySet) find(raw []byte) int {
	if len(raw) > maxKeyLen {
		return -1
	}
	for m := ks.byLen[len(raw)]; m != 0; m &= m - 1 {
		k := bits.TrailingZeros32(m)
		if string(raw) == ks.names[k] {
			return k
		}
	}
	return -1
}

// lookupFrom is lookup that tries keys.names[next] first: clients send an object's keys in one
// order, often the schema's.
func lookupFrom(b []byte, key span, keys *keySet, next int) int {
	if next < len(keys.names) && key.end-key.start == len(keys.names[next])+2 && string(b[key.start+1:key.end-1]) == keys.names[next] {
		return next
	}
	return lookup(b, key, keys)
}

// lookup returns the index in keys of the key token at a span, or -1.
func lookup(b []byte, key span, keys *keySet) int {
	raw := b[key.start+1 : key.end-1]
	if bytes.IndexByte(raw, '\\') >= 0 { // rare: an escaped key, e.g. "pass\u0077ord"
		s, ok := unquote(b[key.start:key.end])
		if !ok {
			return -1
		}
		raw = []byte(s)
	}
	return keys.find(raw)
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
