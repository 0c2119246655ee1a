package worker

import (
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/shoal-chess/shoal/protocol"
)

// This file encodes the worker's request bodies and decodes its replies without reflection,
// byte for byte and value for value as encoding/json does: every call sends one and reads one,
// and a fleet of thousands of simulated workers in one process spends more on encoding/json's
// reflection than on the rest of the call. Strings are written by protocol.AppendString, as the
// server writes its replies' strings. What the fast paths do not cover exactly (a reply with an
// escaped or non-ASCII string) goes to encoding/json itself.

// encodedInfo is a worker_info with its JSON encoding.
type encodedInfo struct {
	info protocol.WorkerInfo
	json []byte
}

// encodedBody is a request body already encoded, which encodeBody sends as it is.
type encodedBody []byte

// encodeBody is payload's JSON, as json.Marshal makes it.
func (w *Worker) encodeBody(payload any) ([]byte, error) {
	if b, ok := payload.(encodedBody); ok {
		return b, nil
	}
	r, ok := payload.(protocol.Request)
	if !ok {
		return json.Marshal(payload)
	}
	info := w.infoJSON(r.WorkerInfo)
	if info == nil {
		return json.Marshal(payload) // not encodable (a NaN speed): json.Marshal's error
	}
	n := len(r.Password) + len(info) + 256
	if r.PGN != nil {
		n += len(*r.PGN)
	}
	if r.Message != nil {
		n += len(*r.Message)
	}
	return appendRequest(make([]byte, 0, n), &r, info, nil), nil
}

// encodePGNUpload is the body of upload_pgn: r with the base64 of gz as its PGN, as
// json.Marshal makes it, the base64 written in place instead of in a string of its own (its
// alphabet needs no escaping in JSON). size is the base64's length. payload is what post takes:
// the encoded body, or r itself when its worker_info cannot be encoded (json.Marshal's error).
func (w *Worker) encodePGNUpload(r protocol.Request, gz []byte) (payload any, size int) {
	size = base64.StdEncoding.EncodedLen(len(gz))
	info := w.infoJSON(r.WorkerInfo)
	if info == nil {
		pgn := base64.StdEncoding.EncodeToString(gz)
		r.PGN = &pgn
		return r, size
	}
	n := len(r.Password) + len(info) + size + 256
	return encodedBody(appendRequest(make([]byte, 0, n), &r, info, gz)), size
}

// infoJSON is info's JSON, from the last one encoded when it is the same (a worker's info
// changes only with the speed its game source measures); nil if it cannot be encoded.
func (w *Worker) infoJSON(info protocol.WorkerInfo) []byte {
	if c := w.lastInfo.Load(); c != nil && c.info == info {
		return c.json
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil
	}
	w.lastInfo.Store(&encodedInfo{info: info, json: data})
	return data
}

// appendRequest appends r's JSON, with info the JSON of r.WorkerInfo, in protocol.Request's field
// order, leaving out the nil pointers (omitempty); with gz, the PGN is its base64 (r.PGN nil).
func appendRequest(b []byte, r *protocol.Request, info, gz []byte) []byte {
	b = append(b, `{"password":`...)
	b = protocol.AppendString(b, r.Password)
	if r.RunID != nil {
		b = append(b, `,"run_id":`...)
		b = protocol.AppendString(b, *r.RunID)
	}
	if r.TaskID != nil {
		b = append(b, `,"task_id":`...)
		b = strconv.AppendInt(b, int64(*r.TaskID), 10)
	}
	if r.PGN != nil {
		b = append(b, `,"pgn":`...)
		b = protocol.AppendString(b, *r.PGN)
	} else if gz != nil {
		b = append(b, `,"pgn":"`...)
		b = base64.StdEncoding.AppendEncode(b, gz)
		b = append(b, '"')
	}
	if r.Message != nil {
		b = append(b, `,"message":`...)
		b = protocol.AppendString(b, *r.Message)
	}
	b = append(b, `,"worker_info":`...)
	b = append(b, info...)
	if s := r.SPSA; s != nil {
		b = appendInts(append(b, `,"spsa":`...), []string{"wins", "losses", "draws", "num_games", "sig"},
			s.Wins, s.Losses, s.Draws, s.NumGames, s.Sig)
	}
	if s := r.Stats; s != nil {
		b = appendInts(append(b, `,"stats":`...), []string{"wins", "losses", "draws", "crashes", "time_losses"},
			s.Wins, s.Losses, s.Draws, s.Crashes, s.TimeLosses)
		b = append(b[:len(b)-1], `,"pentanomial":[`...)
		for i, n := range s.Pentanomial {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, "]}"...)
	}
	return append(b, '}')
}

// appendInts appends an object of integers, names[i]: values[i].
func appendInts(b []byte, names []string, values ...int) []byte {
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, int64(values[i]), 10)
	}
	return append(b, '}')
}

// decodeObject is json.Unmarshal of a reply into a map: the replies parseValue covers parsed
// here, anything else by encoding/json. ok is false when data is not a JSON object
// (json.Unmarshal's error or null).
func decodeObject(data []byte) (m map[string]any, ok bool) {
	if i := skipSpace(data, 0); i < len(data) && data[i] == '{' {
		if v, next, ok := parseValue(data, i, 0); ok && skipSpace(data, next) == len(data) {
			return v.(map[string]any), true
		}
	}
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

// maxPlainDepth is the deepest nesting parseValue takes; deeper goes to encoding/json.
const maxPlainDepth = 64

// parseValue parses the JSON value at data[i:] as json.Unmarshal does into an any, when its
// strings are printable ASCII without escapes: objects, arrays, strings, numbers, true, false,
// null. ok false (a string it does not cover, invalid JSON) says to leave it to encoding/json.
func parseValue(data []byte, i, depth int) (v any, next int, ok bool) {
	if i == len(data) {
		return nil, i, false
	}
	switch c := data[i]; {
	case c == '{':
		return parseObject(data, i, depth+1)
	case c == '[':
		return parseArray(data, i, depth+1)
	case c == '"':
		return flatString(data, i)
	case c == '-' || (c >= '0' && c <= '9'):
		end, ok := scanNumber(data, i)
		if !ok {
			return nil, i, false
		}
		f, err := strconv.ParseFloat(string(data[i:end]), 64)
		return f, end, err == nil
	}
	for _, lit := range [...]struct {
		text  string
		value any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(data)-i >= len(lit.text) && string(data[i:i+len(lit.text)]) == lit.text {
			return lit.value, i + len(lit.text), true
		}
	}
	return nil, i, false
}

// parseObject is parseValue of the object at data[i] ('{').
func parseObject(data []byte, i, depth int) (_ any, next int, ok bool) {
	if depth > maxPlainDepth {
		return nil, i, false
	}
	m := make(map[string]any, 4)
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return m, i + 1, true
	}
	for {
		key, next, ok := flatKey(data, i)
		if !ok {
			return nil, i, false
		}
		i = skipSpace(data, next)
		if i == len(data) || data[i] != ':' {
			return nil, i, false
		}
		var v any
		if v, i, ok = parseValue(data, skipSpace(data, i+1), depth); !ok {
			return nil, i, false
		}
		m[key] = v
		i = skipSpace(data, i)
		switch {
		case i == len(data):
			return nil, i, false
		case data[i] == ',':
			i = skipSpace(data, i+1)
		case data[i] == '}':
			return m, i + 1, true
		default:
			return nil, i, false
		}
	}
}

// parseArray is parseValue of the array at data[i] ('['): never nil, as encoding/json makes it.
func parseArray(data []byte, i, depth int) (_ any, next int, ok bool) {
	if depth > maxPlainDepth {
		return nil, i, false
	}
	a := make([]any, 0)
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return a, i + 1, true
	}
	for {
		var v any
		if v, i, ok = parseValue(data, i, depth); !ok {
			return nil, i, false
		}
		a = append(a, v)
		i = skipSpace(data, i)
		switch {
		case i == len(data):
			return nil, i, false
		case data[i] == ',':
			i = skipSpace(data, i+1)
		case data[i] == ']':
			return a, i + 1, true
		default:
			return nil, i, false
		}
	}
}

// flatString parses the string at data[i:] if it has only printable ASCII and no escape.
func flatString(data []byte, i int) (s string, next int, ok bool) {
	if i == len(data) || data[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return string(data[i+1 : j]), j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", i, false
		}
	}
	return "", i, false
}

// replyKeys are the keys of the worker API's replies, which flatKey does not copy.
var replyKeys = [...]string{"duration", "task_alive", "info", "error", "task_waiting", "version", "run", "task_id"}

// flatKey is flatString for a key: a key of replyKeys is that constant, not a new string.
func flatKey(data []byte, i int) (s string, next int, ok bool) {
	for _, k := range replyKeys {
		if end := i + len(k) + 2; end <= len(data) && data[i] == '"' && data[end-1] == '"' && string(data[i+1:end-1]) == k {
			return k, end, true
		}
	}
	return flatString(data, i)
}

// scanNumber returns the end of the JSON number at data[i:]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(data []byte, i int) (end int, ok bool) {
	digits := func(j int) int {
		for j < len(data) && data[j] >= '0' && data[j] <= '9' {
			j++
		}
		return j
	}
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(i)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}
