package fleet

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// spoilRate is the share of a bad-data worker's update_task calls that carry bad stats.
const spoilRate = 0.25

// spoiler is the HTTP transport of a worker that sends bad data: it rewrites some update_task
// bodies so that their stats are ones the server must refuse, in turn an odd number of games and
// an inconsistent pentanomial. It works on the wire
// because the worker checks its source's batches itself and would never send them. Safe for
// concurrent use (a worker's beat and its updates may overlap).
type spoiler struct {
	base http.RoundTripper
	rec  *recorder

	mu   sync.Mutex
	rand *rand.Rand
	n    int // spoiled so far, picks the next kind
}

func (s *spoiler) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || !strings.HasSuffix(req.URL.Path, "/api/update_task") {
		return s.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	spoil := s.rand.Float64() < spoilRate
	kind := s.n % 2
	s.mu.Unlock()
	if spoil {
		if spoiled, ok := spoilUpdate(body, kind); ok {
			body = spoiled
			s.mu.Lock()
			s.n++
			s.mu.Unlock()
			s.rec.badBatch()
		}
	}
	// RoundTrip must not modify the caller's request: send a copy with the new body.
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return s.base.RoundTrip(out)
}

// spoilUpdate rewrites an update_task body's stats: kind 0 removes one game (an odd count),
// kind 1 moves a game pair to a pentanomial cell of another pair score, so that wins-losses no
// longer matches the pentanomial. ok is false when the body cannot be spoiled that way.
func spoilUpdate(body []byte, kind int) ([]byte, bool) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return nil, false
	}
	st, _ := m["stats"].(map[string]any)
	ptnml, _ := st["pentanomial"].([]any)
	if st == nil || len(ptnml) != 5 {
		return nil, false
	}
	num := func(k string) float64 { f, _ := st[k].(float64); return f }
	cell := func(i int) float64 { f, _ := ptnml[i].(float64); return f }
	switch kind {
	case 0:
		switch {
		case num("draws") > 0:
			st["draws"] = num("draws") - 1
		case num("wins") > 0:
			st["wins"] = num("wins") - 1
		case num("losses") > 0:
			st["losses"] = num("losses") - 1
		default:
			return nil, false
		}
	default:
		from := -1
		for i := range 5 {
			if cell(i) > 0 {
				from = i
				break
			}
		}
		if from < 0 {
			return nil, false
		}
		to := (from + 2) % 5 // a different pair score: wins-losses no longer matches
		ptnml[from], ptnml[to] = cell(from)-1, cell(to)+1
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	return out, true
}
