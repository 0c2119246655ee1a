package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/stats"
)

// finishedRunsPageSize is the page size of /api/finished_runs, as in fishtest.
const finishedRunsPageSize = 50

// maxActions is the most actions /api/actions returns, as in fishtest.
const maxActions = 200

// maxActionsBody bounds the /api/actions request body: a filter of a few scalars is tiny.
const maxActionsBody = 64 << 10

// allowAnyOrigin adds the CORS headers fishtest sends on /api/actions and /api/get_run, so that
// pages on other sites can read them.
func allowAnyOrigin(c *gin.Context) {
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Access-Control-Allow-Headers", "content-type")
}

// pythonTime formats t as Python's str() of a UTC datetime, the form fishtest's API gives
// dates in: "2026-11-01 10:00:00.123000+00:00", without the fraction when it is zero.
func pythonTime(t time.Time) string {
	t = t.UTC()
	s := t.Format("2006-01-02 15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	return s + "+00:00"
}

// jsonValue turns a value read from the database into what fishtest's API would show: dates as
// Python strings, binary data as a list of byte values, infinities as "inf"/"-inf" (JSON has
// none), nested containers likewise.
func jsonValue(v any) any {
	switch v := v.(type) {
	case time.Time:
		return pythonTime(v)
	case []byte:
		ints := make([]int, len(v))
		for i, b := range v {
			ints[i] = int(b)
		}
		return ints
	case float64:
		return jsonFloat(v)
	case map[string]any:
		for k, x := range v {
			v[k] = jsonValue(x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = jsonValue(x)
		}
		return v
	}
	return v
}

// jsonFloat is f, or Python's name for it when JSON cannot carry it.
func jsonFloat(f float64) any {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return f
}

// toMap encodes v as a JSON object and decodes it into a map, numbers kept as written.
func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// finiteRun returns a copy of the listed run r whose numbers that JSON cannot carry (NaN, the
// infinities) are 0: the arguments' rates and the SPRT's and SPSA's state.
func finiteRun(r *rundb.Run) *rundb.Run {
	fin := func(xs ...*float64) {
		for _, x := range xs {
			if math.IsNaN(*x) || math.IsInf(*x, 0) {
				*x = 0
			}
		}
	}
	out := *r
	fin(&out.Args.Throughput, &out.Args.ITP, &out.Args.Priority)
	if r.Args.SPRT != nil {
		sp := *r.Args.SPRT
		fin(&sp.Alpha, &sp.Beta, &sp.Elo0, &sp.Elo1, &sp.LLR, &sp.LowerBound, &sp.UpperBound)
		if sp.Overshoot != nil {
			o := *sp.Overshoot
			fin(&o.Ref0, &o.M0, &o.Sq0, &o.Ref1, &o.M1, &o.Sq1)
			sp.Overshoot = &o
		}
		out.Args.SPRT = &sp
	}
	if r.Args.SPSA != nil {
		sp := *r.Args.SPSA
		fin(&sp.A, &sp.Alpha, &sp.Gamma)
		sp.Params = slices.Clone(sp.Params)
		for i := range sp.Params {
			p := &sp.Params[i]
			fin(&p.Start, &p.Min, &p.Max, &p.CEnd, &p.REnd, &p.C, &p.AEnd, &p.A, &p.Theta)
		}
		out.Args.SPSA = &sp
	}
	return &out
}

// addExtra puts into m the stored fields Shoal does not model, so that the API shows a run
// written by fishtest (or a newer Shoal) whole. Modelled fields win.
func addExtra(m map[string]any, extra rundb.Extra) {
	for k, v := range extra.Plain() {
		if _, ok := m[k]; !ok {
			m[k] = jsonValue(v)
		}
	}
}

// runView says which of fishtest's two run shapes runJSON makes.
type runView int

const (
	// listed is a run in /api/active_runs and /api/finished_runs: the database projection
	// leaves tasks, bad_tasks and args.spsa.param_history out entirely.
	listed runView = iota
	// stripped is fishtest's strip_run (/api/get_run, /api/get_elo): tasks, bad_tasks and
	// args.spsa.param_history are present but empty.
	stripped
)

// runJSON gives a run in fishtest's API shape: _id, start_time and last_updated as strings and,
// per view, the heavy parts left out or emptied.
func runJSON(r *rundb.Run, view runView) (map[string]any, error) {
	m, err := toMap(r.Listed())
	var nonFinite *json.UnsupportedValueError
	if errors.As(err, &nonFinite) {
		// A run stored with a number JSON cannot carry (an SPRT bound of 1e308 made NaN of its
		// LLR, say): the read answers anyway, with those numbers as 0.
		m, err = toMap(finiteRun(r.Listed()))
	}
	if err != nil {
		return nil, fmt.Errorf("encode run %s: %w", r.ID, err)
	}
	m["_id"] = r.ID.Hex()
	m["start_time"] = pythonTime(r.StartTime)
	m["last_updated"] = pythonTime(r.LastUpdated)
	switch view {
	case listed:
		delete(m, "tasks")
		delete(m, "bad_tasks")
	case stripped:
		m["tasks"], m["bad_tasks"] = []any{}, []any{}
	}
	addExtra(m, r.Extra)
	if args, ok := m["args"].(map[string]any); ok {
		addExtra(args, r.Args.Extra)
		if sprt, ok := args["sprt"].(map[string]any); ok && r.Args.SPRT != nil {
			addExtra(sprt, r.Args.SPRT.Extra)
		}
		if spsa, ok := args["spsa"].(map[string]any); ok && r.Args.SPSA != nil {
			addExtra(spsa, r.Args.SPSA.Extra)
			if view == stripped {
				spsa["param_history"] = []any{}
			}
		}
	}
	return m, nil
}

// runsObject is a JSON object of runs keyed by id, written in the slice's order: fishtest's
// listings are Python dicts, which keep the order the runs were found in.
type runsObject []map[string]any

// MarshalJSON writes the runs as {"<id>": run, ...} in order.
func (rs runsObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(r["_id"])
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// listedRuns encodes runs for a listing.
func listedRuns(runs []*rundb.Run) (runsObject, error) {
	out := make(runsObject, 0, len(runs))
	for _, r := range runs {
		m, err := runJSON(r, listed)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ActiveRuns is GET /api/active_runs: every unfinished run, keyed by id, oldest first.
func (s *Server) ActiveRuns(c *gin.Context) {
	s.replyRuns(c, s.deps.Runs.Active)
}

// replyRuns answers a run listing: the runs fetch returns (under a database token), keyed by
// id as listedRuns makes them.
func (s *Server) replyRuns(c *gin.Context, fetch func(ctx context.Context) ([]*rundb.Run, error)) {
	var runs []*rundb.Run
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		runs, err = fetch(ctx)
		return err
	})
	if err != nil {
		s.internalError(c, err)
		return
	}
	out, err := listedRuns(runs)
	if err != nil {
		s.internalError(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

var (
	pagePattern      = regexp.MustCompile(`^[0-9]+$`)
	timestampPattern = regexp.MustCompile(`^([0-9]{10})(?:\.([0-9]+))?$`)
)

// parseTimestamp reads Unix seconds with optional decimals exactly (no float rounding).
func parseTimestamp(s string) (time.Time, bool) {
	m := timestampPattern.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	frac := (m[2] + "000000000")[:9]
	nsec, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, nsec).UTC(), true
}

// FinishedRuns is GET /api/finished_runs: one page of 50 finished runs, keyed by id, most
// recently updated first. page is required (1-based, digits only); username, success_only,
// yellow_only and ltc_only filter (a flag is on when it is not empty, whatever it says, as in
// fishtest); timestamp keeps runs last updated at or after that Unix time.
func (s *Server) FinishedRuns(c *gin.Context) {
	q := c.Request.URL.Query()
	pageParam := q.Get("page")
	if pageParam == "" {
		Error(c, http.StatusBadRequest, "Please provide a Page number: page is missing.")
		return
	}
	page, err := strconv.ParseInt(pageParam, 10, 32)
	if !pagePattern.MatchString(pageParam) || err != nil || page < 1 {
		Error(c, http.StatusBadRequest, fmt.Sprintf(
			"Please provide a valid Page number: page=%q is not a whole number from 1 to %d.", pageParam, math.MaxInt32))
		return
	}
	f := rundb.FinishedFilter{
		Username:    q.Get("username"),
		SuccessOnly: q.Get("success_only") != "",
		YellowOnly:  q.Get("yellow_only") != "",
		LTCOnly:     q.Get("ltc_only") != "",
	}
	if ts := q.Get("timestamp"); ts != "" {
		t, ok := parseTimestamp(ts)
		if !ok {
			Error(c, http.StatusBadRequest, fmt.Sprintf(
				"Please provide a valid UNIX timestamp: timestamp=%q is not 10 digits of seconds with optional decimals.", ts))
			return
		}
		f.Since = &t
	}
	s.replyRuns(c, func(ctx context.Context) ([]*rundb.Run, error) {
		return s.deps.Runs.Finished(ctx, f, int(page), finishedRunsPageSize)
	})
}

// snapshotRun reads a run for a reply. A malformed id is a run that does not exist.
func (s *Server) snapshotRun(c *gin.Context, id string) (*rundb.Run, error) {
	oid, err := rundb.ParseObjectID(id)
	if err != nil {
		return nil, fmt.Errorf("run %q: %w", id, rundb.ErrNotFound)
	}
	var r *rundb.Run
	err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		r, err = s.runs().Snapshot(ctx, oid)
		return err
	})
	return r, err
}

// runOr404 reads the run named by the :id parameter; a missing run is answered with 404
// "The run ... does not exist", a failure with 500.
func (s *Server) runOr404(c *gin.Context) (*rundb.Run, bool) {
	id := c.Param("id")
	r, err := s.snapshotRun(c, id)
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("The run %s does not exist", id))
		return nil, false
	case err != nil:
		s.internalError(c, err)
		return nil, false
	}
	return r, true
}

// GetRun is GET /api/get_run/{id}: the run without its tasks (fishtest's strip_run).
func (s *Server) GetRun(c *gin.Context) {
	allowAnyOrigin(c)
	r, ok := s.runOr404(c)
	if !ok {
		return
	}
	m, err := runJSON(r, stripped)
	if err != nil {
		s.internalError(c, err)
		return
	}
	c.JSON(http.StatusOK, m)
}

// taskIndex reads get_task's task id: digits, optionally followed by "bad" for a bad task.
var taskIndex = regexp.MustCompile(`^([0-9]{1,9})(bad)?$`)

// GetTask is GET /api/get_task/{id}/{task_id}: one task, with the worker's unique key cut to 8
// characters and its address hidden; {task_id} ending in "bad" indexes bad_tasks.
func (s *Server) GetTask(c *gin.Context) {
	id, taskParam := c.Param("id"), c.Param("task_id")
	notFound := func() {
		Error(c, http.StatusNotFound, fmt.Sprintf("The task %s/%s does not exist", id, taskParam))
	}
	m := taskIndex.FindStringSubmatch(taskParam)
	if m == nil {
		notFound()
		return
	}
	n, _ := strconv.Atoi(m[1])
	r, err := s.snapshotRun(c, id)
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		notFound()
		return
	case err != nil:
		s.internalError(c, err)
		return
	}
	tasks := r.Tasks
	if m[2] != "" {
		tasks = r.BadTasks
	}
	if n >= len(tasks) {
		notFound()
		return
	}
	out, err := taskJSON(tasks[n])
	if err != nil {
		s.internalError(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// taskJSON gives a task as fishtest's get_task does.
func taskJSON(t rundb.Task) (map[string]any, error) {
	residual := t.Residual
	t.Residual = nil // JSON cannot carry the infinite residual of a task purged as an outlier
	m, err := toMap(&t)
	if err != nil {
		return nil, fmt.Errorf("encode task: %w", err)
	}
	m["last_updated"] = pythonTime(t.LastUpdated)
	if residual != nil {
		m["residual"] = jsonFloat(*residual)
	}
	if wi, ok := m["worker_info"].(map[string]any); ok {
		key := t.WorkerInfo.UniqueKey
		if len(key) > 8 {
			key = key[:8]
		}
		wi["unique_key"] = key + "..."
		wi["remote_addr"] = "?.?.?.?"
		addExtra(wi, t.WorkerInfo.Extra)
	}
	if sp, ok := m["spsa_params"].(map[string]any); ok && t.SPSAParams != nil {
		sp["packed_flips"] = jsonValue(t.SPSAParams.PackedFlips)
	}
	addExtra(m, t.Extra)
	return m, nil
}

// GetElo is GET /api/get_elo/{id}: for an SPRT run, the stripped run with "elo", the SPRT Elo
// estimate of its results; for any other run, {}.
func (s *Server) GetElo(c *gin.Context) {
	r, ok := s.runOr404(c)
	if !ok {
		return
	}
	sprt := r.Args.SPRT
	if sprt == nil {
		c.JSON(http.StatusOK, protocol.EmptyReply{})
		return
	}
	model := sprt.EloModel
	if model == "" { // runs from before elo_model was stored
		model = stats.ModelBayesElo
	}
	res := stats.Results{Wins: r.Results.Wins, Losses: r.Results.Losses, Draws: r.Results.Draws, Pentanomial: r.Results.Pentanomial}
	// A run stored before the bounds were checked (or by another server) may hold bounds the
	// estimate cannot take; it gets no estimate rather than an error.
	var elo any
	if e, err := stats.EstimateSPRTElo(res, sprt.Alpha, sprt.Beta, 0.05, sprt.Elo0, sprt.Elo1, model); err != nil {
		s.logger.Warn("no SPRT Elo estimate for a stored run", "run_id", r.ID.Hex(), "err", err)
	} else if _, err := json.Marshal(e); err == nil {
		elo = e
	}
	m, err := runJSON(r, stripped)
	if err != nil {
		s.internalError(c, err)
		return
	}
	if args, ok := m["args"].(map[string]any); ok {
		if sp, ok := args["sprt"].(map[string]any); ok {
			sp["elo_model"] = model
		}
	}
	m["elo"] = elo
	c.JSON(http.StatusOK, m)
}

// actionFilterKeys are the keys /api/actions accepts, with what each must be.
var actionFilterKeys = map[string]string{
	"action": "a string", "username": "a string", "run_id": "a string", "run": "a string",
	"worker": "a string", "user": "a string", "nn": "a string",
	"task_id": "an integer", "before": "a number", "after": "a number",
}

// actionFilterHelp lists the accepted keys for error messages.
const actionFilterHelp = "the filter keys are action, username, run_id, run, task_id, worker, user, nn, " +
	"before and after (Unix seconds), each with a plain value"

// parseActionFilter reads /api/actions' body: a JSON object of filter keys with plain values.
// fishtest runs the body as a raw MongoDB filter; Shoal takes only equality on the documented
// fields plus a time range, so a caller cannot run $where or other operators on the server.
// An empty body is the empty filter.
func parseActionFilter(body []byte) (rundb.ActionFilter, error) {
	var f rundb.ActionFilter
	if len(bytes.TrimSpace(body)) == 0 {
		return f, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return f, fmt.Errorf("the body must be a JSON object; %s", actionFilterHelp)
	}
	strFields := map[string]*string{
		"action": &f.Action, "username": &f.Username, "run_id": &f.RunID, "run": &f.Run,
		"worker": &f.Worker, "user": &f.User, "nn": &f.NN,
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := bytes.TrimSpace(raw[k])
		if strings.HasPrefix(k, "$") {
			return f, fmt.Errorf("%q: operators are not accepted; %s", k, actionFilterHelp)
		}
		kind, ok := actionFilterKeys[k]
		if !ok {
			return f, fmt.Errorf("%q is not a filter key; %s", k, actionFilterHelp)
		}
		if len(v) > 0 && (v[0] == '{' || v[0] == '[') {
			return f, fmt.Errorf("%q: operators are not accepted; give %s", k, kind)
		}
		if bytes.Equal(v, []byte("null")) {
			return f, fmt.Errorf("%q must be %s, not null", k, kind)
		}
		var err error
		switch k {
		case "task_id":
			var n int
			err = json.Unmarshal(v, &n)
			f.TaskID = &n
		case "before", "after":
			var x float64
			err = json.Unmarshal(v, &x)
			if k == "before" {
				f.Before = &x
			} else {
				f.After = &x
			}
		default:
			err = json.Unmarshal(v, strFields[k])
		}
		if err != nil {
			if len(v) > 40 {
				v = append(v[:40:40], "..."...)
			}
			return f, fmt.Errorf("%q must be %s, not %s", k, kind, v)
		}
	}
	return f, nil
}

// Actions is POST /api/actions: up to 200 actions matching the body's filter, newest first.
// See parseActionFilter for the filter; an empty string value matches everything, as if the key
// were left out.
func (s *Server) Actions(c *gin.Context) {
	allowAnyOrigin(c)
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxActionsBody))
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		Error(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes; a filter is a few keys", maxActionsBody))
		return
	} else if err != nil {
		Error(c, http.StatusBadRequest, "the body could not be read: "+err.Error())
		return
	}
	f, err := parseActionFilter(body)
	if err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return
	}
	if !s.heavy.Slot(c) {
		if c.Request.Context().Err() == nil {
			Error(c, http.StatusServiceUnavailable, guard.HeavyBusyText)
		}
		return
	}
	defer s.heavy.Release()
	var list []*rundb.Action
	err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		list, err = s.deps.Actions.Find(ctx, f, maxActions)
		return err
	})
	if err != nil {
		s.internalError(c, err)
		return
	}
	out := make([]map[string]any, 0, len(list))
	for _, a := range list {
		m, err := toMap(a)
		if err != nil {
			s.internalError(c, fmt.Errorf("encode action %s: %w", a.ID, err))
			return
		}
		addExtra(m, a.Extra)
		out = append(out, m)
	}
	c.JSON(http.StatusOK, out)
}

// RateLimit is GET /api/rate_limit. fishtest answers its cached GitHub API rate limit; Shoal
// makes no GitHub calls yet, so it says so rather than invent numbers.
func (s *Server) RateLimit(c *gin.Context) {
	c.JSON(http.StatusOK, protocol.RateLimitReply{
		Message: "Shoal has no GitHub client, so it makes no GitHub API calls and has no rate limit to report.",
	})
}

// DownloadNN is GET /api/nn/{name}: count a download of a known network and send it. A network
// uploaded here (DataDir/nn/{name}.gz) is served from that file: as stored, with Content-Encoding:
// gzip, to a client that accepts gzip, else gunzipped on the fly; either way the client ends up
// with the network's own bytes, whose SHA-256 fishtest's workers check against the name. A
// network known without a file here is redirected to where the files are served (NNURL, or this
// server's own /nn/). HEAD checks the network exists without counting a download.
func (s *Server) DownloadNN(c *gin.Context) {
	name := c.Param("name")
	file := s.deps.NetworkFile(name)
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		if c.Request.Method == http.MethodHead {
			_, err := s.deps.Networks.Get(ctx, name)
			return err
		}
		return s.deps.Networks.CountDownload(ctx, name)
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("The network %s does not exist", name))
		return
	case err != nil:
		s.internalError(c, err)
		return
	}
	if file != "" && s.serveNN(c, name, file) {
		return
	}
	base := strings.TrimRight(s.deps.NNURL, "/")
	if base == "" {
		base = requestScheme(c.Request) + "://" + c.Request.Host
	}
	c.Redirect(http.StatusFound, base+"/nn/"+url.PathEscape(name))
}

// requestScheme is the scheme the client used: https behind a TLS-terminating proxy that says
// so with X-Forwarded-Proto, or when Shoal serves TLS itself.
func requestScheme(r *http.Request) string {
	switch proto := r.Header.Get("X-Forwarded-Proto"); proto {
	case "http", "https":
		return proto
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
