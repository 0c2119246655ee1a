package ui

import (
	"fmt"
	"html/template"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// templateFuncs returns every function page templates may call: the shared ones below and
// each area's own (areas, which New is given), which must not reuse a name.
func templateFuncs(areas ...template.FuncMap) template.FuncMap {
	all := template.FuncMap{}
	for _, m := range append([]template.FuncMap{baseFuncs}, areas...) {
		for name := range m {
			if _, dup := all[name]; dup {
				panic("server: template function " + name + " defined twice")
			}
		}
		maps.Copy(all, m)
	}
	return all
}

// baseFuncs are the formatting helpers every page uses.
var baseFuncs = template.FuncMap{
	// num writes an integer with thousands separators: 1234567 -> "1,234,567".
	"num": func(n any) string { return humanize.Comma(toInt64(n)) },
	// fixed writes x with d decimals; NaN and infinities as "-".
	"fixed": func(d int, x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "-"
		}
		return strconv.FormatFloat(x, 'f', d, 64)
	},
	// signed writes x with d decimals and an explicit sign: "+1.23", "-0.50".
	"signed": func(d int, x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "-"
		}
		return fmt.Sprintf("%+.*f", d, x)
	},
	// si writes a count the short way: 123456789 -> "123M".
	"si": siFormat,
	// ago writes how long ago t was: "3 minutes ago"; "never" for the zero time.
	"ago": func(t time.Time) string { return agoFrom(time.Now(), t) },
	// unixTime turns fishtest's float seconds (action times) into a time.
	"unixTime": func(sec float64) time.Time {
		s, frac := math.Modf(sec)
		return time.Unix(int64(s), int64(frac*1e9)).UTC()
	},
	// datetime writes t in UTC, to the minute: "2026-11-22 10:59".
	"datetime": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04")
	},
	// isoTime writes t for a <time datetime=...> attribute.
	"isoTime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	// short cuts a commit sha (or any long id) to its first 7 characters.
	"short": func(s string) string {
		if len(s) > 7 {
			return s[:7]
		}
		return s
	},
	// diffClass and diffOp mark a diff line by its op (gitmirror.Line): added, removed,
	// context, or git's "\ No newline at end of file".
	"diffClass": func(op byte) string {
		switch op {
		case '+':
			return "add"
		case '-':
			return "del"
		case '\\':
			return "note"
		}
		return "ctx"
	},
	"diffOp": func(op byte) string {
		switch op {
		case '+', '-':
			return string(op)
		}
		return " "
	},
	// truncate cuts s to n runes, ending with an ellipsis when cut.
	"truncate": func(n int, s string) string {
		r := []rune(s)
		if len(r) <= n {
			return s
		}
		return string(r[:n-1]) + "…"
	},
	"add":  func(a, b int) int { return a + b },
	"sub":  func(a, b int) int { return a - b },
	"join": strings.Join,
	// contains reports whether list holds s.
	"contains": func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	},
	// dict builds a map from key/value pairs, to pass several values to a partial.
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("dict: odd number of arguments")
		}
		m := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
	// navClass marks the navigation link of the current section.
	"navClass": func(path, prefix string) string {
		if path == prefix || (prefix != "/tests" && strings.HasPrefix(path, prefix+"/")) {
			return "current"
		}
		// "Tests" is the homepage and a run's own pages; the other /tests pages have their
		// own items.
		if prefix == "/tests" && strings.HasPrefix(path, "/tests/") {
			for _, own := range []string{"/tests/run", "/tests/finished", "/tests/machines"} {
				if path == own {
					return ""
				}
			}
			return "current"
		}
		return ""
	},
}

func toInt64(n any) int64 {
	switch v := n.(type) {
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case float64:
		return int64(math.Round(v))
	case uint64:
		return int64(v)
	default:
		panic(fmt.Sprintf("num: %T is not a number", n))
	}
}

func siFormat(x float64) string {
	switch a := math.Abs(x); {
	case a >= 1e9:
		return strconv.FormatFloat(x/1e9, 'f', 1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 0, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 0, 64) + "k"
	default:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
}

func agoFrom(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	unit := func(n int, name string) string {
		if n == 1 {
			return "1 " + name + " ago"
		}
		return strconv.Itoa(n) + " " + name + "s ago"
	}
	switch {
	case d < time.Minute:
		return unit(int(d/time.Second), "second")
	case d < time.Hour:
		return unit(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int(d/time.Hour), "hour")
	default:
		return unit(int(d/(24*time.Hour)), "day")
	}
}

// ClipRunes cuts s to at most n runes, without an ellipsis (for filters and short labels).
func ClipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
