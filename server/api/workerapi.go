package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/tokenpool"
)

// Body limits of the worker API: a PGN upload carries a task's games (base64 of gzip); every
// other call is a few hundred bytes.
const (
	maxWorkerBody = 1 << 20
	maxUploadBody = DefaultMaxPGNBytes*4/3 + 1<<20
)

// maxConcurrentUploads bounds the PGN uploads decoded and stored at once: a fleet that stops all
// at once uploads ten thousand PGNs in the same second, and each holds its decoded gzip and its
// check in memory until it is stored. uploadSlotWait bounds the wait for one: a worker gives up
// on a call after 30 s.
const (
	maxConcurrentUploads = 32
	uploadSlotWait       = 20 * time.Second
)

// uploadSlot waits for an upload slot, once the call is authenticated and its body read: a
// client that sends nothing, or no credentials, never holds one. It reports whether it got one
// (then the caller must release it); if not, the reply is written.
func (s *Server) uploadSlot(c *gin.Context) bool {
	ctx, cancel := context.WithTimeout(c.Request.Context(), uploadSlotWait)
	defer cancel()
	if err := s.uploads.Acquire(ctx); err != nil {
		if c.Request.Context().Err() == nil { // the caller is still there: tell it to come back
			c.Header("Retry-After", "15")
			guard.ExpectRefusal(c)
			Error(c, http.StatusServiceUnavailable, "too many PGN uploads at once, try again later")
		}
		return false
	}
	return true
}

// PrimaryOnly turns a worker call away on an instance that does not schedule (a secondary),
// before reading anything, so that it is retried (RetryLater). fishtest answers a JSON error
// here, which its worker takes as final; behind nginx a 503 also sends the call on to the next
// upstream.
func (s *Server) PrimaryOnly(c *gin.Context) {
	role := s.deps.Role()
	sched := role.Scheduler
	if sched == nil {
		why := primaryRequired
		if role.Starting {
			why = primaryStarting
		}
		RetryLater(c, why)
		return
	}
	// The handler uses this scheduler even if the instance steps down meanwhile.
	c.Set(schedulerKey, sched)
	c.Next()
}

// schedulerKey is where PrimaryOnly keeps the scheduler a worker call is handled by; primaryOf
// is the one way to read it.
const schedulerKey = "shoal.scheduler"

// primaryOf is the scheduler PrimaryOnly let the call c in with, or nil on a route without
// PrimaryOnly. A worker call's handlers read it once, as workerRequest.sched.
func primaryOf(c *gin.Context) Scheduler {
	v, _ := c.Get(schedulerKey)
	sched, _ := v.(Scheduler)
	return sched
}

// RetryLater answers a worker call that this instance cannot take now, shutting down or not the
// primary, the way workers retry instead of abandoning their task: protocol.RetryLaterStatus
// with Retry-After and a body that is text, not JSON.
func RetryLater(c *gin.Context, why string) {
	c.Header("Retry-After", "15")
	c.Header("Cache-Control", "no-store")
	guard.ExpectRefusal(c) // by design, and as many as workers send
	c.String(protocol.RetryLaterStatus, "%s: %s; retry later\n", c.Request.URL.Path, why)
	c.Abort()
}

// workerRequest is a worker call that passed fishtest's validate_request: authenticated, well
// formed, naming an existing run and one of its own tasks.
type workerRequest struct {
	body *protocol.Request
	user *rundb.User
	run  rundb.ObjectID // zero if the call names no run
	// owner is the worker_info of the call's task (hasOwner: the call names a task): its
	// address, which the task keeps, and its lists, which a new worker_info shares if equal.
	owner    rundb.WorkerInfo
	hasOwner bool
	// wi holds what info made, within the pooled call state.
	wi rundb.WorkerInfo
	// sched is the scheduler the call is handled by (PrimaryOnly's; for upload_pgn the
	// instance's, nil on a secondary): read once, so that a step-down meanwhile does not change
	// it halfway. Handlers behind PrimaryOnly find it set.
	sched Scheduler
}

// info is the worker_info to store: the request's, with the address the task was created
// from (or the caller's, for a new task) and the country nginx reports. Made on demand: most
// calls (beat) store none. It is w's own, valid as long as w.
func (w *workerRequest) info(c *gin.Context) *rundb.WorkerInfo {
	if w.hasOwner {
		w.wi = toWorkerInfoLike(&w.body.WorkerInfo, &w.owner)
		w.wi.RemoteAddr = w.owner.RemoteAddr
	} else {
		w.wi = toWorkerInfo(&w.body.WorkerInfo)
		w.wi.RemoteAddr = guard.ClientIP(c)
	}
	w.wi.CountryCode = countryCode(c)
	return &w.wi
}

// hasTask reports whether the call names a task.
func (w *workerRequest) hasTask() bool { return w.body.TaskID != nil }

func (w *workerRequest) taskID() int { return *w.body.TaskID }

// message is the request's message, or "".
func (w *workerRequest) message() string {
	if w.body.Message == nil {
		return ""
	}
	return *w.body.Message
}

// maxPresized is the largest body readBody reads into a buffer sized by its Content-Length:
// every worker call but a PGN upload is far smaller.
const maxPresized = 64 << 10

// maxPooledBody is the largest buffer that goes back to bodyBuffers: a worker call's body is
// under a kilobyte, and a rare larger one must not stay in memory for them.
const maxPooledBody = 8 << 10

// bodyBuffer holds a worker call's body in a buffer reused from one call to the next: a fresh
// one per call was several percent of the server's allocations.
type bodyBuffer struct{ b []byte }

var bodyBuffers = sync.Pool{New: func() any { return new(bodyBuffer) }}

// callState is what a worker call holds from its body to its reply, reused from call to call
// (callStates): the body, the request decoded from it and the workerRequest made of them, a
// kilobyte or more that was allocated anew per call. Nothing of it outlives the call: the
// decoders copy what they keep of the body, and what a handler hands on (to the scheduler, the
// journal, the database) it copies out of the request: a WorkerInfo by value with its own
// lists (toWorkerInfo), strings, results with their own pentanomial (taskResults).
type callState struct {
	body bodyBuffer
	req  protocol.RequestBuffer
	w    workerRequest
}

var callStates = sync.Pool{New: func() any { return new(callState) }}

// release gives st back to callStates once the call is answered, keeping a small body's buffer
// and nothing else: not a large upload's text, nor the user or the strings of the last call.
func (st *callState) release() {
	st.body.reset()
	st.req = protocol.RequestBuffer{}
	st.w = workerRequest{}
	callStates.Put(st)
}

// readBody reads the request body up to limit bytes; a longer body is a 400, not a truncation.
// The body is the caller's.
func readBody(c *gin.Context, limit int64) ([]byte, bool) {
	return readBodyInto(c, limit, nil)
}

// release gives the buffer back to bodyBuffers; the body it held must not be read after.
func (buf *bodyBuffer) release() {
	buf.reset()
	bodyBuffers.Put(buf)
}

// reset empties the buffer for its next use, dropping one too large to keep (maxPooledBody).
func (buf *bodyBuffer) reset() {
	if cap(buf.b) > maxPooledBody {
		buf.b = nil
	}
	buf.b = buf.b[:0]
}

// readBodyInto is readBody, into buf's buffer when it is large enough (nil: a new one).
func readBodyInto(c *gin.Context, limit int64, buf *bodyBuffer) ([]byte, bool) {
	var b []byte
	var err error
	if n := c.Request.ContentLength; n > 0 && n <= min(limit, maxPresized) {
		// The length is known (workers send it): one buffer of the right size instead of
		// ReadAll's doublings, and no limit to enforce, as n is within it. net/http ends the
		// body at the length; a shorter one is an unexpected EOF, a body that could not be
		// read. Only for a small length: a larger one is only a claim, and memory must grow
		// with what a client sends, not with what it announces before it has logged in.
		if buf != nil && int64(cap(buf.b)) >= n {
			b = buf.b[:n]
		} else {
			b = make([]byte, n)
		}
		_, err = io.ReadFull(c.Request.Body, b)
	} else {
		b, err = io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	}
	if err != nil {
		bodyError(c, limit, err)
		return nil, false
	}
	return b, true
}

// bodyError answers a body that could not be read, or was larger than limit.
func bodyError(c *gin.Context, limit int64, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		Error(c, http.StatusBadRequest, fmt.Sprintf("request body larger than %d bytes", limit))
		return
	}
	Error(c, http.StatusBadRequest, "request body could not be read")
}

// authenticate checks the credentials of a call (fishtest's validate_username_password): a body
// without them is a 400, wrong ones a 401 with the reason. Failed logins are limited per client
// address (reserveAPILogin): over the limit the call is a 429 with Retry-After, whatever its
// password, as the password is not checked then. It returns the body checked to be JSON, once
// for the credentials and the request; with buf not nil, parsed into buf
// (protocol.ParseBodyInto), so that the request is decoded from what the check found.
func (s *Server) authenticate(c *gin.Context, raw []byte, buf *protocol.RequestBuffer) (*rundb.User, protocol.Body, bool) {
	var username, password string
	var body protocol.Body
	var err error
	if buf != nil {
		body, err = protocol.ParseBodyInto(buf, raw)
	} else {
		body, err = protocol.ParseBody(raw)
	}
	if err == nil {
		username, password, err = body.Access()
	}
	if err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return nil, body, false
	}
	creds := s.apiGood.sum(username, password)
	var res *guard.Reservation
	if !s.apiGood.has(creds, time.Now()) {
		var ok bool
		if res, ok = s.reserveAPILogin(c, username); !ok {
			return nil, body, false
		}
		defer res.Release() // a panic must not keep the token held
	}
	// A worker token is accepted where the password goes, so that fishtest's worker runs with
	// one unchanged.
	access := rundb.Access{Username: username, Secret: password, Scope: rundb.ScopeWorker, Address: guard.ClientIP(c)}
	u, err := s.apiLogin(c.Request.Context(), access)
	if res != nil {
		res.Settle(err)
	}
	if err == nil || errors.Is(err, rundb.ErrBadCredentials) {
		s.apiGood.settle(creds, err == nil, time.Now())
	}
	if res != nil || err != nil { // a known-good call is trusted already
		s.logins.Checked(c, "worker api", username, err)
	}
	switch {
	case isAuthError(err):
		Error(c, http.StatusUnauthorized, err.Error())
		return nil, body, false
	case err != nil:
		s.internalError(c, err)
		return nil, body, false
	}
	return u, body, true
}

// apiTooManyLoginsText is the 429's message to an API call over the login limits.
const apiTooManyLoginsText = "too many failed logins from this address; retry in %d s"

// reserveAPILogin reserves the tokens of an API call's password check (worker and submission
// calls) for the client's address and, unless this client logged in as the user before, for
// the username from anywhere. Over a limit it answers 429 in the API's error shape, with
// Retry-After, and returns false.
func (s *Server) reserveAPILogin(c *gin.Context, username string) (*guard.Reservation, bool) {
	r, wait := s.logins.ReserveAPILogin(c.Request.Context(), guard.ClientKey(c), username)
	if wait > 0 {
		wait = guard.TooMany(c, wait)
		s.logins.Refused(c, "api", username, wait)
		Error(c, http.StatusTooManyRequests, fmt.Sprintf(apiTooManyLoginsText, int64(wait.Seconds())))
		return nil, false
	}
	return r, true
}

// apiLogin checks API credentials through the user cache. A cached user costs no database work
// and so takes no token of the pool: a flood of calls waiting for the database must not hold
// up the ones that need none. Otherwise the user is read (or a token's last use written) under
// one.
func (s *Server) apiLogin(ctx context.Context, a rundb.Access) (*rundb.User, error) {
	u, cached, err := s.deps.Users.AuthenticateAccessIfCached(ctx, a)
	if cached {
		return u, err
	}
	err = s.deps.Tokens.Do(ctx, func(ctx context.Context) error {
		var err error
		u, err = s.deps.Users.AuthenticateAccessCached(ctx, a)
		return err
	})
	return u, err
}

// RequestVersion answers the protocol version to any authenticated caller, however old its
// worker_info: the worker updates itself if it is behind.
func (s *Server) RequestVersion(c *gin.Context) {
	st := callStates.Get().(*callState)
	defer st.release()
	body, ok := readBodyInto(c, maxWorkerBody, &st.body)
	if !ok {
		return
	}
	st.body.b = body
	if _, _, ok := s.authenticate(c, body, &st.req); !ok {
		return
	}
	replyVersion(c, protocol.VersionReply{Version: protocol.Version, Duration: duration(c)})
}

// RequestTask is POST /api/request_task.
func (s *Server) RequestTask(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.requestTask) }

// UpdateTask is POST /api/update_task.
func (s *Server) UpdateTask(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.updateTask) }

// Beat is POST /api/beat.
func (s *Server) Beat(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.beat) }

// RequestSPSA is POST /api/request_spsa.
func (s *Server) RequestSPSA(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.requestSPSA) }

// FailedTask is POST /api/failed_task.
func (s *Server) FailedTask(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.failedTask) }

// StopRun is POST /api/stop_run.
func (s *Server) StopRun(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.stopRun) }

// UploadPGN is POST /api/upload_pgn, whose body may arrive slowly (guard.Transfers.AllowSlowBody).
func (s *Server) UploadPGN(c *gin.Context) { s.workerCall(c, maxUploadBody, s.uploadPGN) }

// WorkerLog is POST /api/worker_log.
func (s *Server) WorkerLog(c *gin.Context) { s.workerCall(c, maxWorkerBody, s.workerLog) }

// workerCall handles an endpoint in fishtest's validate_request: credentials, the strict
// schema, the run, the task, and the task's owner, in that order, each failure a 400 or 401 in
// the JSON error shape; then handle.
// limit bounds the request body.
func (s *Server) workerCall(c *gin.Context, limit int64, handle func(*gin.Context, *workerRequest)) {
	st := callStates.Get().(*callState)
	defer st.release()
	body, ok := readBodyInto(c, limit, &st.body)
	if !ok {
		return
	}
	st.body.b = body
	user, parsed, ok := s.authenticate(c, body, &st.req)
	if !ok {
		return
	}
	sched := primaryOf(c)
	if sched == nil { // upload_pgn, which any instance takes
		sched = s.scheduler()
	}
	var legacy func(string) bool
	if sched != nil {
		legacy = sched.LegacyUsername
	}
	req, err := parsed.RequestInto(&st.req, legacy)
	if err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return
	}
	w := &st.w
	*w = workerRequest{body: req, user: user, sched: sched}
	if req.RunID != nil {
		id, err := rundb.ParseObjectID(*req.RunID)
		if err != nil {
			Error(c, http.StatusBadRequest, "Invalid run_id: "+*req.RunID)
			return
		}
		w.run = id
		owner, tasks, err := s.runTask(c.Request.Context(), sched, id, req.TaskID)
		switch {
		case errors.Is(err, rundb.ErrNotFound), errors.Is(err, scheduler.ErrRunNotFound):
			Error(c, http.StatusBadRequest, "Invalid run_id: "+*req.RunID)
			return
		case err != nil:
			s.workerFailure(c, err)
			return
		}
		if req.TaskID != nil {
			t := *req.TaskID
			if t < 0 || t >= tasks {
				Error(c, http.StatusBadRequest, fmt.Sprintf("Invalid task_id %d for run_id %s", t, *req.RunID))
				return
			}
			for _, f := range []struct{ key, task, request string }{
				{"unique_key", owner.UniqueKey, req.WorkerInfo.UniqueKey},
				{"username", owner.Username, req.WorkerInfo.Username},
			} {
				if f.task != f.request {
					Error(c, http.StatusBadRequest, fmt.Sprintf("Invalid %s for task %s/%d. From task: %s. From request: %s.",
						f.key, *req.RunID, t, f.task, f.request))
					return
				}
			}
			w.owner, w.hasOwner = owner, true
		}
	}
	handle(c, w)
}

// runTask returns the owner of a task (when taskID is given) and the run's number of tasks:
// from the scheduler on the primary, without copying the run, or from the database on a
// secondary.
func (s *Server) runTask(ctx context.Context, sched Scheduler, id rundb.ObjectID, taskID *int) (rundb.WorkerInfo, int, error) {
	var owner rundb.WorkerInfo
	var tasks int
	err := s.memoryOrDB(sched, id).do(ctx, func(ctx context.Context) error {
		if sched != nil {
			t := -1
			if taskID != nil {
				t = *taskID
			}
			wi, err := sched.TaskOwner(ctx, id, t)
			switch {
			case errors.Is(err, scheduler.ErrTaskNotFound):
				return nil // tasks stays 0: any task_id is out of range
			case err != nil:
				return err
			}
			owner, tasks = wi, t+1
			return nil
		}
		r, err := s.runs().Snapshot(ctx, id)
		if err != nil {
			return err
		}
		tasks = len(r.Tasks)
		if taskID != nil && *taskID >= 0 && *taskID < tasks {
			owner = r.Tasks[*taskID].WorkerInfo
		}
		return nil
	})
	return owner, tasks, err
}

// countryCode is nginx's X-Country-Code, "?" when absent or unknown.
func countryCode(c *gin.Context) string {
	// Only a trusted proxy says where a client is (nginx sets the header, replacing the
	// client's); anyone else would pick their own.
	if !guard.FromProxy(c) {
		return "?"
	}
	cc := strings.ToUpper(c.GetHeader("X-Country-Code"))
	if len(cc) != 2 || cc[0] < 'A' || cc[0] > 'Z' || cc[1] < 'A' || cc[1] > 'Z' || cc == "ZZ" {
		return "?"
	}
	return cc
}

// taskResults are the stats a task keeps. Its pentanomial is a copy: a slice of st's array would
// keep the whole decoded request for as long as the task keeps its stats (see toWorkerInfo).
func taskResults(st *protocol.Stats) rundb.Results {
	return rundb.Results{Wins: st.Wins, Losses: st.Losses, Draws: st.Draws, Crashes: st.Crashes,
		TimeLosses: st.TimeLosses, Pentanomial: slices.Clone(st.Pentanomial[:])}
}

// toWorkerInfo is the worker_info a task keeps. Its lists are slices of one small allocation of
// their own: slices of w's arrays would keep, for as long as the task keeps its worker_info,
// whatever holds w (the decoded request, every string of it): about 700 bytes a task, a quarter
// of the server's live heap at 500,000 equivalent workers (27,500 tasks).
func toWorkerInfo(w *protocol.WorkerInfo) rundb.WorkerInfo { return toWorkerInfoLike(w, nil) }

// toWorkerInfoLike is toWorkerInfo that shares the lists of like (the task's worker_info, if
// not nil) when they are equal to w's, as they are on every update but the rare one after a
// worker's upgrade: no list of a worker_info is changed once made, only replaced.
func toWorkerInfoLike(w *protocol.WorkerInfo, like *rundb.WorkerInfo) rundb.WorkerInfo {
	var arch []string
	var python, gcc []int
	if like != nil && slices.Equal(like.Architecture, w.Architecture[:]) &&
		slices.Equal(like.PythonVersion, w.PythonVersion[:]) && slices.Equal(like.GCCVersion, w.GCCVersion[:]) {
		arch, python, gcc = like.Architecture, like.PythonVersion, like.GCCVersion
	} else {
		lists := &struct {
			arch        [2]string
			python, gcc [3]int
		}{w.Architecture, w.PythonVersion, w.GCCVersion}
		arch, python, gcc = lists.arch[:], lists.python[:], lists.gcc[:]
	}
	return rundb.WorkerInfo{
		Uname: w.Uname, Architecture: arch, Concurrency: w.Concurrency, MaxMemory: w.MaxMemory,
		MinThreads: w.MinThreads, Username: w.Username, Version: w.Version, PythonVersion: python,
		GCCVersion: gcc, Compiler: w.Compiler, UniqueKey: w.UniqueKey, Modified: w.Modified,
		WorkerArch: w.WorkerArch, ARCH: w.ARCH, NPS: w.NPS, NearGithubAPILimit: w.NearGithubAPILimit,
	}
}

// requirePrimary answers a 503 in the API's error shape with msg when this instance does not
// schedule (a secondary): the JSON endpoints that submit work (worker calls use PrimaryOnly).
func (s *Server) requirePrimary(c *gin.Context, msg string) bool {
	if s.scheduler() == nil {
		Error(c, http.StatusServiceUnavailable, msg)
		return false
	}
	return true
}

// primaryRequired is why a secondary turns a worker call away, in fishtest's words.
const primaryRequired = "primary instance required"

// primaryStarting is why a primary that is still loading its runs turns a worker call away.
const primaryStarting = "the primary is starting (loading its runs)"

// needTask checks what the task endpoints share: a run_id and a task_id.
func needTask(c *gin.Context, w *workerRequest) bool {
	return need(c, w.run != rundb.ObjectID{}, "run_id") && need(c, w.hasTask(), "task_id")
}

// need answers a 400 for a missing field the endpoint needs.
func need(c *gin.Context, present bool, what string) bool {
	if !present {
		Error(c, http.StatusBadRequest, "Missing "+what)
	}
	return present
}

func (s *Server) requestTask(c *gin.Context, w *workerRequest) {
	if !s.taskLimits.allow(w.user.Username, w.user.EffectiveMachineLimit(), taskLimitAddress(c), time.Now()) {
		// fishtest's worker waits and asks again on this reply, as on "too busy".
		replyTask(c, protocol.TaskReply{TaskWaiting: new(false), Info: taskLimitedInfo,
			RetryAfter: s.pacer.retryAfter(), Duration: duration(c)})
		return
	}
	// No token here: request_task is memory work but for its rare database reads and writes,
	// which take one through the scheduler's DBGate. A storm's requests must not queue for
	// tokens behind the database's other work.
	reply, err := w.sched.RequestTask(c.Request.Context(), *w.info(c), w.user.EffectiveMachineLimit(), requestScheme(c.Request)+"://"+c.Request.Host)
	if err == nil {
		err = reply.Stored(c.Request.Context())
	}
	if err != nil {
		s.workerFailure(c, err)
		return
	}
	if reply.Waiting {
		out := protocol.TaskReply{TaskWaiting: new(false), Info: reply.Info, Error: reply.Error, Duration: duration(c)}
		if reply.Info == scheduler.TooBusy {
			out.RetryAfter = s.pacer.retryAfter()
		}
		replyTask(c, out)
		return
	}
	s.pacer.gaveTask(time.Now())
	stats := protocol.Stats{Wins: reply.Task.Stats.Wins, Losses: reply.Task.Stats.Losses, Draws: reply.Task.Stats.Draws,
		Crashes: reply.Task.Stats.Crashes, TimeLosses: reply.Task.Stats.TimeLosses}
	copy(stats.Pentanomial[:], reply.Task.Stats.Pentanomial)
	replyTask(c, protocol.TaskReply{
		Run: &protocol.TaskRun{ID: reply.RunID.Hex(), Args: reply.Args,
			MyTask: protocol.MyTask{NumGames: reply.Task.NumGames, Start: reply.Task.Start, Stats: &stats}},
		TaskID:   &reply.TaskID,
		Duration: duration(c),
	})
}

// The scheduler's answers in the worker protocol's reply types: each endpoint's reply has
// exactly fishtest's keys (the golden tests hold them to the reference).

// updateReply answers the reply of update_task and beat.
func updateReply(c *gin.Context, r scheduler.Reply) {
	replyUpdate(c, protocol.UpdateReply{TaskAlive: r.TaskAlive != nil && *r.TaskAlive, Info: r.Info, Error: r.Error, Duration: duration(c)})
}

// failedReply answers failed_task's: {} for the task it ended, the update reply's shape for a
// task that was no longer active.
func failedReply(c *gin.Context, r scheduler.Reply) {
	if r.TaskAlive == nil {
		replyDone(c, protocol.DoneReply{Duration: duration(c)})
		return
	}
	updateReply(c, r)
}

// spsaReply answers request_spsa's: the batch's parameters, or task_alive false with the reason.
func spsaReply(c *gin.Context, r scheduler.Reply) {
	c.JSON(http.StatusOK, spsaReplyOf(c, r))
}

// spsaReplyOf is spsaReply's reply.
func spsaReplyOf(c *gin.Context, r scheduler.Reply) protocol.SPSAReply {
	out := protocol.SPSAReply{TaskAlive: r.TaskAlive != nil && *r.TaskAlive, Info: r.Info, Duration: duration(c)}
	if b := r.SPSA; b != nil {
		out.WParams = make([]protocol.SPSAWParam, len(b.WParams))
		for i, p := range b.WParams {
			out.WParams[i] = protocol.SPSAWParam{Name: p.Name, Value: p.Value, C: p.C, R: p.R, Flip: p.Flip}
		}
		out.BParams = make([]protocol.SPSABParam, len(b.BParams))
		for i, p := range b.BParams {
			out.BParams[i] = protocol.SPSABParam{Name: p.Name, Value: p.Value}
		}
		out.Sig = b.Sig
	}
	return out
}

// gate is what work needs before it may touch the database: a token of the pool, or nothing
// (free). A struct, not a function: a gate and the closures run through it then stay on the
// stack of a worker call.
type gate struct {
	tokens *tokenpool.Pool
	free   bool
}

// do runs fn through the gate: with a token of the pool (tokenpool.Pool.Do), or at once.
func (g gate) do(ctx context.Context, fn func(context.Context) error) error {
	if g.free {
		return fn(ctx)
	}
	return g.tokens.Do(ctx, fn)
}

// tokenGate is the gate of work that may touch the database: a token of the pool.
func (s *Server) tokenGate() gate { return gate{tokens: s.deps.Tokens} }

// memoryOrDB is the gate of work that reads or changes run id and nothing else in the
// database: none when the primary's run cache holds the run (no database work, so no token: a
// flood of calls waiting for the database must not hold up these), a token otherwise.
func (s *Server) memoryOrDB(sched Scheduler, id rundb.ObjectID) gate {
	return gate{tokens: s.deps.Tokens, free: sched != nil && sched.Cached(id)}
}

// schedulerCall runs a scheduler operation through its gate and answers its reply with answer,
// in the endpoint's shape; a task that vanished between validation and the call is a 400 like
// an invalid task_id.
func (s *Server) schedulerCall(c *gin.Context, through gate, answer func(*gin.Context, scheduler.Reply),
	op func(ctx context.Context) (scheduler.Reply, error)) {
	var reply scheduler.Reply
	err := through.do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		reply, err = op(ctx)
		return err
	})
	if err == nil {
		// Waited for with the token given back: the journal's writer does the database work,
		// for many requests at once.
		err = reply.Stored(c.Request.Context())
	}
	switch {
	case errors.Is(err, scheduler.ErrTaskNotFound), errors.Is(err, scheduler.ErrRunNotFound), errors.Is(err, scheduler.ErrNotSPSA):
		Error(c, http.StatusBadRequest, err.Error())
	case err != nil:
		s.workerFailure(c, err)
	default:
		answer(c, reply)
	}
}

// workerFailure answers a worker call that failed here. A change the journal did not store
// (the database failed, or this primary lost its lease and is stepping down) is made in memory
// but not acknowledged: the worker is told to retry, which is harmless (a repeated update is
// not counted twice) and, behind nginx, reaches the new primary. So is a call that passed
// PrimaryOnly just before the scheduler stopped (a step-down, or a shutdown after its drain):
// it changed nothing. Anything else is a 500.
func (s *Server) workerFailure(c *gin.Context, err error) {
	switch {
	case errors.Is(err, rundb.ErrNotStored):
		s.logger.Warn("worker call not acknowledged: its change was not stored", "path", c.Request.URL.Path, "err", err)
		RetryLater(c, "the change could not be stored")
	case errors.Is(err, scheduler.ErrStopped):
		RetryLater(c, "primary instance required")
	default:
		s.internalError(c, err)
	}
}

func (s *Server) updateTask(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) || !need(c, w.body.Stats != nil, "stats") {
		return
	}
	results, info := taskResults(w.body.Stats), w.info(c)
	var spsa *scheduler.SPSAUpdate
	if sp := w.body.SPSA; sp != nil {
		spsa = &scheduler.SPSAUpdate{Wins: sp.Wins, Losses: sp.Losses, Draws: sp.Draws, NumGames: sp.NumGames, Sig: uint32(sp.Sig)}
		if sp.Sig < 0 || sp.Sig > 1<<32-1 {
			spsa.Sig = 0 // never a CRC32: the update is refused by the signature check
		}
	}
	s.schedulerCall(c, s.tokenGate(), updateReply, func(ctx context.Context) (scheduler.Reply, error) {
		return w.sched.UpdateTask(ctx, *info, w.run, w.taskID(), results, spsa)
	})
}

func (s *Server) beat(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) {
		return
	}
	s.schedulerCall(c, s.memoryOrDB(w.sched, w.run), updateReply, func(ctx context.Context) (scheduler.Reply, error) {
		return w.sched.Beat(ctx, w.run, w.taskID())
	})
}

func (s *Server) requestSPSA(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) {
		return
	}
	s.schedulerCall(c, s.memoryOrDB(w.sched, w.run), spsaReply, func(ctx context.Context) (scheduler.Reply, error) {
		return w.sched.RequestSPSA(ctx, w.run, w.taskID())
	})
}

func (s *Server) failedTask(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) {
		return
	}
	s.schedulerCall(c, s.tokenGate(), failedReply, func(ctx context.Context) (scheduler.Reply, error) {
		return w.sched.FailedTask(ctx, w.run, w.taskID(), w.message())
	})
}

func (s *Server) stopRun(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) {
		return
	}
	msg, info := w.message(), w.info(c)
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		hours := -1.0
		st, err := s.deps.UserStats.Get(ctx, w.user.Username)
		switch {
		case err == nil:
			hours = st.CPUHours
		case !errors.Is(err, rundb.ErrNotFound):
			return err
		}
		return w.sched.StopRunByWorker(ctx, *info, w.run, w.taskID(), msg, hours)
	})
	var msgErr string
	switch {
	case errors.Is(err, scheduler.ErrTooFewCPUHours):
		msgErr = fmt.Sprintf("User %s has too few games to stop a run", w.user.Username)
	case errors.Is(err, scheduler.ErrRunFinished):
		msgErr = fmt.Sprintf("Run %s is already finished", w.run.Hex())
	case errors.Is(err, scheduler.ErrTaskNotFound):
		Error(c, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.workerFailure(c, err)
		return
	}
	if msgErr != "" {
		Error(c, http.StatusUnauthorized, msgErr)
		return
	}
	replyDone(c, protocol.DoneReply{Duration: duration(c)})
}

func (s *Server) uploadPGN(c *gin.Context, w *workerRequest) {
	if !needTask(c, w) || !need(c, w.body.PGN != nil, "pgn content") {
		return
	}
	if !s.uploadSlot(c) {
		return
	}
	defer s.uploads.Release()
	gz, err := decodePGNUpload(*w.body.PGN, DefaultMaxPGNBytes, s.deps.MaxPGNText)
	if err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return
	}
	err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		return s.deps.PGNs.Put(ctx, &rundb.PGN{RunID: fmt.Sprintf("%s-%d", w.run.Hex(), w.taskID()), PGNZip: gz, Size: len(gz)})
	})
	if err != nil {
		s.internalError(c, err)
		return
	}
	replyDone(c, protocol.DoneReply{Duration: duration(c)})
}

func (s *Server) workerLog(c *gin.Context, w *workerRequest) {
	if w.run != (rundb.ObjectID{}) && !w.hasTask() {
		Error(c, http.StatusBadRequest, "Missing task_id for worker_log run context")
		return
	}
	a := &rundb.Action{Action: "worker_log", Username: w.user.Username, Worker: w.body.WorkerInfo.LongName(),
		Time: float64(time.Now().UnixMicro()) / 1e6, Message: w.message()}
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		if w.run != (rundb.ObjectID{}) {
			label, err := w.sched.RunLabel(ctx, w.run) // worker_log is primary-only
			if err != nil {
				return err
			}
			id := w.taskID()
			a.RunID, a.Run, a.TaskID = w.run.Hex(), label, &id
		}
		return s.deps.Actions.Insert(ctx, a)
	})
	if err != nil {
		s.internalError(c, err)
		return
	}
	replyDone(c, protocol.DoneReply{Duration: duration(c)})
}
