package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
)

// maxSubmitBody bounds a run submission's JSON; a long SPSA parameter list is a few kilobytes.
const maxSubmitBody = 1 << 20

// createRunBody is POST /api/create_run: the submitter's credentials and the run's arguments.
type createRunBody struct {
	Username string               `json:"username"`
	Password string               `json:"password"`
	Run      *protocol.RunRequest `json:"run"`
}

// approveRunBody is POST /api/approve_run.
type approveRunBody struct {
	Username string `json:"username"`
	Password string `json:"password"`
	RunID    string `json:"run_id"`
}

// errNotApprover means an authenticated user without the right to approve tried to.
var errNotApprover = errors.New("not an approver")

// CreateRun stores a new, unapproved run for the authenticated user. The run may name its
// engines by branch alone: the scheduler resolves them in the repository (PrepareRun). Every
// invalid field is a 400 naming it by its JSON path ("run.sprt.elo0", "run.new_tag"); bad
// credentials are a 401, and too many of them from the client's address a 429
// (reserveAPILogin).
func (s *Server) CreateRun(c *gin.Context) {
	if !s.requirePrimary(c, submitToPrimary) {
		return
	}
	var body createRunBody
	if !decodeSubmission(c, &body) {
		return
	}
	if body.Run == nil {
		Error(c, http.StatusBadRequest, "run: missing: give the run's arguments")
		return
	}
	u, ok, err := s.submitLogin(c, body.Username, body.Password)
	if !ok {
		return
	}
	var id rundb.ObjectID
	req := *body.Run
	if err == nil {
		// Reading the repository may take a fetch: outside the database's tokens.
		req, err = s.scheduler().PrepareRun(c.Request.Context(), req)
	}
	if err == nil {
		err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			r, err := s.scheduler().CreateRun(ctx, req, u.Username)
			if err == nil {
				id = r.ID
			}
			return err
		})
	}
	var fe *scheduler.FieldError
	switch {
	case isAuthError(err):
		Error(c, http.StatusUnauthorized, err.Error())
	case errors.As(err, &fe):
		Error(c, http.StatusBadRequest, "run."+fe.Error())
	case err != nil:
		s.internalError(c, err)
	default:
		c.JSON(http.StatusOK, protocol.CreateRunReply{RunID: id.Hex(), Duration: duration(c)})
	}
}

// ApproveRun lets an approver approve someone else's run, once.
func (s *Server) ApproveRun(c *gin.Context) {
	if !s.requirePrimary(c, submitToPrimary) {
		return
	}
	var body approveRunBody
	if !decodeSubmission(c, &body) {
		return
	}
	if body.RunID == "" {
		Error(c, http.StatusBadRequest, "run_id: missing")
		return
	}
	id, err := rundb.ParseObjectID(body.RunID)
	if err != nil {
		Error(c, http.StatusBadRequest, "run_id: "+err.Error())
		return
	}
	u, ok, err := s.submitLogin(c, body.Username, body.Password)
	if !ok {
		return
	}
	switch {
	case err != nil:
	case !u.IsApprover():
		err = errNotApprover
	default:
		err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			return s.scheduler().ApproveRun(ctx, id, u.Username)
		})
	}
	switch {
	case isAuthError(err):
		Error(c, http.StatusUnauthorized, err.Error())
	case errors.Is(err, errNotApprover):
		Error(c, http.StatusForbidden, fmt.Sprintf("user %s is not an approver", u.Username))
	case errors.Is(err, scheduler.ErrSelfApproval):
		Error(c, http.StatusForbidden, fmt.Sprintf("run %s: self approval is disabled", id))
	case errors.Is(err, scheduler.ErrRunNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("run %s not found", id))
	case errors.Is(err, scheduler.ErrAlreadyApproved):
		Error(c, http.StatusConflict, fmt.Sprintf("run %s already approved", id))
	case err != nil:
		s.internalError(c, err)
	default:
		c.JSON(http.StatusOK, protocol.ApproveRunReply{Approved: true, Duration: duration(c)})
	}
}

// submitLogin checks the credentials of a submission: an api token in an "Authorization:
// Bearer" header, or the username and password of the body (where an api token is accepted as
// the password too). A worker token is refused, as a wrong password is. The login limits apply
// to either. It returns the user or the check's error, or ok false once it has answered (a 429, or
// a 400 for a call that gives both).
func (s *Server) submitLogin(c *gin.Context, username, password string) (*rundb.User, bool, error) {
	a := rundb.Access{Username: username, Secret: password, Scope: rundb.ScopeAPI, Address: c.ClientIP()}
	if h := c.GetHeader("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || username != "" || password != "" {
			Error(c, http.StatusBadRequest, "Authorization: give an api token as \"Bearer <token>\", and no username or password in the body")
			return nil, false, nil
		}
		a.Username, _ = rundb.TokenUsername(token)
		a.Secret, a.TokenOnly = token, true
	}
	res, ok := s.reserveAPILogin(c, a.Username)
	if !ok {
		return nil, false, nil
	}
	defer res.Release() // if the password was not checked, or on a panic
	u, err := s.apiLogin(c.Request.Context(), a)
	res.Settle(err)
	s.logins.Checked(c, "submit api", a.Username, err)
	return u, true, err
}

// submitToPrimary is the 503 text on a secondary: runs are created and approved on the primary,
// which owns them.
const submitToPrimary = "runs are submitted to the primary instance"

func isAuthError(err error) bool {
	return errors.Is(err, rundb.ErrBadCredentials) || errors.Is(err, rundb.ErrBlocked) || errors.Is(err, rundb.ErrPending)
}

// decodeSubmission reads the request body into v strictly (decodeStrict), answering 413 for a
// body over maxSubmitBody and 400 for anything else wrong; it reports whether v is filled.
func decodeSubmission(c *gin.Context, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxSubmitBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		Error(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxSubmitBody))
		return false
	case err != nil:
		Error(c, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	if err := decodeStrict(data, v); err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// decodeStrict decodes a JSON object into v, a pointer to a struct. Unlike encoding/json it
// refuses keys v does not declare, at every level and case-sensitively, so that a misspelt
// argument is an error rather than a silently applied default. Errors are *scheduler.FieldError
// naming the JSON path ("run.sprt.elo0"), or "request body" for the whole.
func decodeStrict(data []byte, v any) error {
	if !json.Valid(data) {
		return &scheduler.FieldError{Field: "request body", Message: "not valid JSON"}
	}
	t := reflect.TypeOf(v).Elem()
	if err := checkKeys(data, t, ""); err != nil {
		return err
	}
	err := json.Unmarshal(data, v)
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		want := te.Type
		if declared := typeAtPath(t, te.Field); declared != nil && declared.Kind() == reflect.Slice {
			want = declared
		}
		return &scheduler.FieldError{Field: orBody(te.Field), Message: fmt.Sprintf("must be %s, not %s", typeWords(want), te.Value)}
	case err != nil:
		return &scheduler.FieldError{Field: "request body", Message: err.Error()}
	}
	return nil
}

// checkKeys walks data along struct type t and refuses the first key (in sorted order) that t
// does not declare. Only object values for struct-typed fields are walked; type mismatches are
// left to json.Unmarshal, except that a struct must be given an object (or null).
func checkKeys(data []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return &scheduler.FieldError{Field: orBody(path), Message: "must be a JSON object"}
	}
	fields := jsonFields(t)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		name := keyName(k)
		if path != "" {
			name = path + "." + name
		}
		ft, ok := fields[k]
		if !ok {
			return &scheduler.FieldError{Field: name, Message: fmt.Sprintf("unknown field (known: %s)", strings.Join(slices.Sorted(maps.Keys(fields)), ", "))}
		}
		if err := checkKeys(obj[k], ft, name); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields maps the JSON names of struct type t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// typeAtPath returns the declared type of the field at a dotted JSON path below struct type t,
// or nil.
func typeAtPath(t reflect.Type, path string) reflect.Type {
	if path == "" {
		return nil
	}
	for part := range strings.SplitSeq(path, ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		ft, ok := jsonFields(t)[part]
		if !ok {
			return nil
		}
		t = ft
	}
	return t
}

// typeWords describes a Go type as a JSON value, for error messages.
func typeWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeWords(t.Elem()), "a "), "an ") + "s"
	default:
		return "an object"
	}
}

// keyName is how an unknown key is shown: as is if it looks like a field name, else quoted.
func keyName(k string) string {
	if k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == "" {
		return k
	}
	return strconv.Quote(k)
}

func orBody(path string) string {
	if path == "" {
		return "request body"
	}
	return path
}
