package protocol

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"
)

// The replies every worker call gets (beat, update_task, a request_task that waits, the
// version, errors) write their own JSON: encoding/json's reflection was the largest part of
// rendering a reply. Each AppendJSON appends exactly what encoding/json.Marshal writes for the
// same value, fields in the same order, and reports false, having appended nothing, for a
// value encoding/json refuses (a float that is NaN or infinite); TestRepliesAppendWhatMarshalWrites
// holds them to it.

// AppendJSON appends r as encoding/json.Marshal writes it.
func (r *UpdateReply) AppendJSON(b []byte) ([]byte, bool) {
	if !finite(r.Duration) {
		return b, false
	}
	b = append(b, `{"task_alive":`...)
	b = strconv.AppendBool(b, r.TaskAlive)
	b = appendOptionalString(b, `,"info":`, r.Info)
	b = appendOptionalString(b, `,"error":`, r.Error)
	b = append(b, `,"duration":`...)
	return append(appendFloat(b, r.Duration), '}'), true
}

// AppendJSON appends r as encoding/json.Marshal writes it.
func (r *VersionReply) AppendJSON(b []byte) ([]byte, bool) {
	if !finite(r.Duration) {
		return b, false
	}
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(r.Version), 10)
	b = append(b, `,"duration":`...)
	return append(appendFloat(b, r.Duration), '}'), true
}

// AppendJSON appends r as encoding/json.Marshal writes it.
func (r *ErrorReply) AppendJSON(b []byte) ([]byte, bool) {
	if !finite(r.Duration) {
		return b, false
	}
	b = append(b, `{"error":`...)
	b = AppendString(b, r.Error)
	b = append(b, `,"duration":`...)
	return append(appendFloat(b, r.Duration), '}'), true
}

// AppendJSON appends r as encoding/json.Marshal writes it.
func (r *DoneReply) AppendJSON(b []byte) ([]byte, bool) {
	if !finite(r.Duration) {
		return b, false
	}
	b = append(b, `{"duration":`...)
	return append(appendFloat(b, r.Duration), '}'), true
}

// AppendJSON appends r as encoding/json.Marshal writes it. A reply that hands out a task copies
// its run's args compacted, as encoding/json writes a raw message; args that it does not vouch
// for (not JSON, or not UTF-8, which encoding/json would copy as they are) are left to
// encoding/json (false).
func (r *TaskReply) AppendJSON(b []byte) ([]byte, bool) {
	if !finite(r.Duration) || r.RetryAfter != nil && !finite(*r.RetryAfter) {
		return b, false
	}
	start := len(b)
	b = append(b, '{')
	if r.TaskWaiting != nil {
		b = append(b, `"task_waiting":`...)
		b = strconv.AppendBool(b, *r.TaskWaiting)
	}
	b = appendOptionalString(b, `,"info":`, r.Info)
	b = appendOptionalString(b, `,"error":`, r.Error)
	if r.Run != nil {
		var ok bool
		if b, ok = r.Run.appendJSON(append(b, `,"run":`...)); !ok {
			return b[:start], false
		}
	}
	if r.TaskID != nil {
		b = append(b, `,"task_id":`...)
		b = strconv.AppendInt(b, int64(*r.TaskID), 10)
	}
	if r.RetryAfter != nil {
		b = append(b, `,"retry_after":`...)
		b = appendFloat(b, *r.RetryAfter)
	}
	b = append(b, `,"duration":`...)
	b = append(appendFloat(b, r.Duration), '}')
	if b[start+1] == ',' { // no task_waiting: the first field written began with a comma
		b = append(b[:start+1], b[start+2:]...)
	}
	return b, true
}

// appendJSON appends r as encoding/json.Marshal writes it, or reports false (see
// TaskReply.AppendJSON).
func (r *TaskRun) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"_id":`...)
	b = AppendString(b, r.ID)
	b, ok := appendRawMessage(append(b, `,"args":`...), r.Args)
	if !ok {
		return b, false
	}
	b = append(b, `,"my_task":{"num_games":`...)
	b = strconv.AppendInt(b, int64(r.MyTask.NumGames), 10)
	b = append(b, `,"start":`...)
	b = strconv.AppendInt(b, int64(r.MyTask.Start), 10)
	if st := r.MyTask.Stats; st != nil {
		b = append(b, `,"stats":{"wins":`...)
		b = strconv.AppendInt(b, int64(st.Wins), 10)
		b = append(b, `,"losses":`...)
		b = strconv.AppendInt(b, int64(st.Losses), 10)
		b = append(b, `,"draws":`...)
		b = strconv.AppendInt(b, int64(st.Draws), 10)
		b = append(b, `,"crashes":`...)
		b = strconv.AppendInt(b, int64(st.Crashes), 10)
		b = append(b, `,"time_losses":`...)
		b = strconv.AppendInt(b, int64(st.TimeLosses), 10)
		b = append(b, `,"pentanomial":[`...)
		for i, n := range st.Pentanomial {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, "]}"...)
	}
	return append(b, "}}"...), true
}

// appendRawMessage appends raw as encoding/json writes a json.RawMessage: null if nil, else
// without the spaces between tokens and with <, >, & and U+2028, U+2029 escaped (in strings,
// the only place valid JSON has them). It reports false, having appended nothing, unless raw
// is JSON and UTF-8 (parseBody's check, without its byte-order mark, which encoding/json
// refuses).
func appendRawMessage(b, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if len(raw) == 0 || bytes.HasPrefix(raw, utf8BOM) {
		return b, false
	}
	if _, _, err := parseBody(raw, nil); err != nil {
		return b, false
	}
	inString, start := false, 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		var esc string // what replaces raw[i:i+n]
		n := 1
		switch {
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
		case c == '"':
			inString = !inString
			continue
		case !inString:
			continue
		case c == '\\':
			i++ // the escaped character is copied as it is, a quote included
			continue
		case c == '<':
			esc = `\u003c`
		case c == '>':
			esc = `\u003e`
		case c == '&':
			esc = `\u0026`
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			esc, n = `\u2028`, 3
			if raw[i+2] == 0xA9 {
				esc = `\u2029`
			}
		default:
			continue
		}
		b = append(append(b, raw[start:i]...), esc...)
		i += n - 1
		start = i + 1
	}
	return append(b, raw[start:]...), true
}

// appendOptionalString appends key (with its leading comma and colon) and s, unless s is ""
// (omitempty).
func appendOptionalString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendString(append(b, key...), s)
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

// appendFloat appends f as encoding/json writes a float64: like ES6's number to string, the
// shortest representation, in exponent form below 1e-6 and from 1e21, with an exponent of at
// least one digit.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string as encoding/json writes it, HTML-safe: <, > and &
// escaped as \u003c, \u003e and \u0026, control characters as \b, \f, \n, \r, \t or \u00XX,
// invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
