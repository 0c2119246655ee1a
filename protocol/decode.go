package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrNotJSON is the error for a body that is not JSON at all (not UTF-8, not well-formed, or
// empty). Its text is fishtest's, which the server puts after the API path.
var ErrNotJSON = errors.New("request is not json encoded")

// ValidationError is a request that is JSON but breaks fishtest's schema. Field is the path of the
// offending value ("worker_info.concurrency", "stats.pentanomial[2]", or "request" for the body
// itself) and Message says what is wrong with it, quoting the value.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// DecodeAccess reads the credentials of a worker call with fishtest's api_access_schema, which
// is lax: the body must be a JSON object whose password is a string and whose worker_info is an
// object whose username is a string; every other key is ignored. The server runs it before
// authenticating, on every worker endpoint, and it is all request_version checks.
//
// The error is ErrNotJSON or a *ValidationError. Unlike fishtest, the username is not matched
// against the username pattern here: a malformed name simply fails authentication.
func DecodeAccess(body []byte) (username, password string, err error) {
	p, err := ParseBody(body)
	if err != nil {
		return "", "", err
	}
	return p.Access()
}

// Body is a request body checked to be JSON as fishtest's json.loads reads it, for the calls
// that read one body twice (the credentials, then the whole request) to check it once.
type Body struct {
	b   []byte
	top span
	// ix is where the members the worker calls' decoders read were found while the body was
	// checked.
	ix *index
}

// ParseBody checks that body is JSON (UTF-8, an optional BOM); the error is ErrNotJSON. The
// Body keeps body, which must not change while it is used; what its methods return (and
// their errors) copies what it keeps of body, so body may be reused once they have returned.
func ParseBody(body []byte) (Body, error) { return parseIndexed(body, new(index)) }

// ParseBodyInto is ParseBody that also notes, in the same pass, where the members that Access
// and RequestInto read are, and keeps them in buf: each then reads them without walking the
// body again, and RequestInto takes the credentials Access decoded. The Body is valid until
// buf is used again; its RequestInto must be given buf.
func ParseBodyInto(buf *RequestBuffer, body []byte) (Body, error) { return parseIndexed(body, &buf.ix) }

// parseIndexed is ParseBody noting body's members in ix, which the Body keeps.
func parseIndexed(body []byte, ix *index) (Body, error) {
	*ix = index{}
	b, top, err := parseBody(body, ix)
	return Body{b: b, top: top, ix: ix}, err
}

// index is what a worker call's two reads of its body (Access, then RequestInto) need of it:
// the values of the keys they know, found once. All is zero unless the body is an object (the
// reads' first check then fails).
type index struct {
	top     [len(requestKeys)]span
	unknown span // the first top-level key not in requestKeys, in body order
	// wi are the members of the last worker_info (top[keyWorkerInfo]) if it is an object.
	wi        [len(workerInfoKeys)]span
	wiUnknown span
	// st are the members of the last stats (top[keyStats]) if it is an object.
	st        [len(statsKeys)]span
	stUnknown span
	// accessed is set once Access has decoded username and password, which RequestInto reuses.
	accessed           bool
	username, password string
}

// nested returns where the members of the top-level key k's object are noted: worker_info's
// and stats', the objects read on every call or on the busiest; nil keys for any other key.
func (ix *index) nested(k int) (keys *keySet, into []span, unknown *span) {
	switch k {
	case keyWorkerInfo:
		return workerInfoKeySet, ix.wi[:], &ix.wiUnknown
	case keyStats:
		return statsKeySet, ix.st[:], &ix.stUnknown
	}
	return nil, nil, nil
}

// Access is DecodeAccess of a parsed body.
func (p Body) Access() (username, password string, err error) {
	ix := p.ix
	d := decoder{b: p.b}
	if err := d.object(p.top, fieldRequest); err != nil {
		return "", "", err
	}
	if password, err = d.password(ix.top[keyPassword]); err != nil {
		return "", "", err
	}
	wi := ix.top[keyWorkerInfo]
	if err := d.required(wi, fieldRequest, "worker_info"); err != nil {
		return "", "", err
	}
	if err := d.object(wi, "worker_info"); err != nil {
		return "", "", err
	}
	u := ix.wi[wiUsername]
	if err := d.required(u, "worker_info", "username"); err != nil {
		return "", "", err
	}
	if username, err = d.str(u, "worker_info.username"); err != nil {
		return "", "", err
	}
	ix.accessed, ix.username, ix.password = true, username, password
	return username, password, nil
}

// DecodeRequest reads the body of an authenticated worker call and validates it as strictly as
// fishtest's api_schema: no keys beyond the schema's, all 16 worker_info keys with their
// constraints, run_id whenever task_id is given, and stats and spsa results that add up.
// legacyUsername reports the accounts created before the username pattern existed (fishtest's
// legacy_usernames); nil means there are none.
//
// JSON types are told apart as Python tells them apart: true is not an integer, 1.0 is not an
// integer (it is a float), "1" is not a number. Integers must fit in an int; fishtest would take
// larger ones and then fail to store them.
//
// The error is ErrNotJSON or a *ValidationError naming one offending field. Keys are checked in
// the schema's order, so when several are wrong the one reported may differ from fishtest's
// (vtjson reports missing keys first, then goes through the body in order); what is accepted does
// not. It is safe for concurrent use if legacyUsername is.
func DecodeRequest(body []byte, legacyUsername func(string) bool) (*Request, error) {
	p, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	return p.Request(legacyUsername)
}

// Request is DecodeRequest of a parsed body.
func (p Body) Request(legacyUsername func(string) bool) (*Request, error) {
	// One allocation holds the request and everything its pointers point to.
	return p.RequestInto(new(RequestBuffer), legacyUsername)
}

// RequestBuffer holds a decoded Request and everything its pointers point to, for a caller
// that reuses one from call to call (RequestInto) instead of allocating a Request per call,
// and the index of the body it was parsed with (ParseBodyInto). The zero value is ready for
// use.
type RequestBuffer struct {
	st requestStore
	ix index
}

// RequestInto is Request decoding into buf: the Request returned is buf's, valid until buf is
// used again. Its strings are its own, as Request's.
func (p Body) RequestInto(buf *RequestBuffer, legacyUsername func(string) bool) (*Request, error) {
	ix := p.ix
	var err error
	d := decoder{b: p.b}
	if err := d.object(p.top, fieldRequest); err != nil {
		return nil, err
	}
	if key := ix.unknown; key.present() {
		return nil, d.unknown(fieldRequest, key)
	}
	s := &ix.top

	st := &buf.st
	*st = requestStore{}
	r := &st.req
	if ix.accessed { // Access decoded it from the same span
		r.Password = ix.password
	} else if r.Password, err = d.password(s[keyPassword]); err != nil {
		return nil, err
	}
	if v := s[keyRunID]; v.present() {
		if st.runID, err = d.objectID(v, "run_id"); err != nil {
			return nil, err
		}
		r.RunID = &st.runID
	}
	if v := s[keyTaskID]; v.present() {
		if st.taskID, err = d.integer(v, "task_id", false); err != nil {
			return nil, err
		}
		r.TaskID = &st.taskID
	}
	if v := s[keyPGN]; v.present() {
		if st.pgn, err = d.str(v, "pgn"); err != nil {
			return nil, err
		}
		r.PGN = &st.pgn
	}
	if v := s[keyMessage]; v.present() {
		if st.message, err = d.str(v, "message"); err != nil {
			return nil, err
		}
		r.Message = &st.message
	}
	if err := d.required(s[keyWorkerInfo], fieldRequest, "worker_info"); err != nil {
		return nil, err
	}
	if err := d.object(s[keyWorkerInfo], "worker_info"); err != nil {
		return nil, err
	}
	var username *string
	if ix.accessed {
		username = &ix.username
	}
	if err := d.workerInfoOf(&ix.wi, ix.wiUnknown, &r.WorkerInfo, legacyUsername, username); err != nil {
		return nil, err
	}
	if v := s[keySPSA]; v.present() {
		if err := d.spsa(v, &st.spsa); err != nil {
			return nil, err
		}
		r.SPSA = &st.spsa
	}
	if v := s[keyStats]; v.present() {
		if err := d.stats(v, &st.stats, &ix.st, ix.stUnknown); err != nil {
			return nil, err
		}
		r.Stats = &st.stats
	}
	if r.TaskID != nil && r.RunID == nil {
		return nil, &ValidationError{Field: "run_id", Message: "is required when task_id is present"}
	}
	return r, nil
}

// requestStore is the backing store of a decoded Request's optional fields.
type requestStore struct {
	req          Request
	runID        string
	taskID       int
	pgn, message string
	spsa         SPSAResult
	stats        Stats
}

const fieldRequest = "request"

// The keys of api_schema, in the schema's order.
const (
	keyPassword = iota
	keyRunID
	keyTaskID
	keyPGN
	keyMessage
	keyWorkerInfo
	keySPSA
	keyStats
)

var requestKeys = [...]string{"password", "run_id", "task_id", "pgn", "message", "worker_info", "spsa", "stats"}

// The key sets of the schemas' objects.
var (
	requestKeySet    = newKeySet(requestKeys[:])
	workerInfoKeySet = newKeySet(workerInfoKeys[:])
	statsKeySet      = newKeySet(statsKeys[:])
	spsaKeySet       = newKeySet(spsaKeys[:])
)

// The keys of worker_info_schema_api, in the schema's order.
const (
	wiUname = iota
	wiArchitecture
	wiConcurrency
	wiMaxMemory
	wiMinThreads
	wiUsername
	wiVersion
	wiPythonVersion
	wiGCCVersion
	wiCompiler
	wiUniqueKey
	wiModified
	wiWorkerArch
	wiARCH
	wiNPS
	wiNearGithubAPILimit
)

var workerInfoKeys = [...]string{
	"uname", "architecture", "concurrency", "max_memory", "min_threads", "username", "version",
	"python_version", "gcc_version", "compiler", "unique_key", "modified", "worker_arch", "ARCH",
	"nps", "near_github_api_limit",
}

// workerInfoFields are the error paths of the worker_info keys, built once.
var workerInfoFields = func() (f [len(workerInfoKeys)]string) {
	for i, k := range workerInfoKeys {
		f[i] = "worker_info." + k
	}
	return f
}()

var (
	statsKeys  = [...]string{"wins", "losses", "draws", "crashes", "time_losses", "pentanomial"}
	statsField = [...]string{"stats.wins", "stats.losses", "stats.draws", "stats.crashes", "stats.time_losses", "stats.pentanomial"}
	spsaKeys   = [...]string{"wins", "losses", "draws", "num_games", "sig"} // spsaNumGames is num_games
	spsaField  = [...]string{"spsa.wins", "spsa.losses", "spsa.draws", "spsa.num_games", "spsa.sig"}
)

const spsaNumGames = 3

// supportedCompilers and supportedArches are fishtest's (constants.py): the compilers and the
// Stockfish build architectures a worker may report.
var (
	supportedCompilers = [...]string{"clang++", "g++"}
	supportedArches    = [...]string{
		"apple-silicon", "armv7", "armv7-neon", "armv8", "armv8-dotprod", "e2k", "general-32",
		"general-64", "loongarch64", "loongarch64-lasx", "loongarch64-lsx", "ppc-32", "ppc-64",
		"ppc-64-altivec", "ppc-64-vsx", "riscv64", "x86-32", "x86-32-sse2", "x86-32-sse41-popcnt",
		"x86-64", "x86-64-avx2", "x86-64-avx512", "x86-64-avxvnni", "x86-64-bmi2",
		"x86-64-sse3-popcnt", "x86-64-sse41-popcnt", "x86-64-ssse3", "x86-64-vnni512",
		"x86-64-avx512icl",
	}
)

// SupportedArches returns fishtest's supported worker architectures, in its order. A worker may
// also report "unknown".
func SupportedArches() []string { return append([]string(nil), supportedArches[:]...) }

// decoder reads values out of a body that parseBody accepted.
type decoder struct{ b []byte }

func (d *decoder) raw(v span) []byte { return d.b[v.start:v.end] }

// invalid is the error for the value at v: "<field>: <value> <what>".
func (d *decoder) invalid(field string, v span, what string) error {
	return &ValidationError{Field: field, Message: quoteValue(d.raw(v)) + " " + what}
}

func (d *decoder) unknown(field string, key span) error {
	return &ValidationError{Field: field, Message: "unknown key " + quoteValue(d.raw(key))}
}

func (d *decoder) required(v span, parent, key string) error {
	if v.present() {
		return nil
	}
	return &ValidationError{Field: parent, Message: "missing key " + strconv.Quote(key)}
}

// missingIn is required for a key of a nested object, whose error path is "<parent>.<key>".
func (d *decoder) missingIn(v span, field string) error {
	if v.present() {
		return nil
	}
	parent, key, _ := cutLast(field, '.')
	return d.required(v, parent, key)
}

func cutLast(s string, sep byte) (before, after string, found bool) {
	if i := strings.LastIndexByte(s, sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return "", s, false
}

func (d *decoder) object(v span, field string) error {
	if v.start < len(d.b) && d.b[v.start] == '{' {
		return nil
	}
	return d.invalid(field, v, "is not a JSON object")
}

func (d *decoder) str(v span, field string) (string, error) {
	if s, ok := unquote(d.raw(v)); ok {
		return s, nil
	}
	return "", d.invalid(field, v, "is not a string")
}

// password is a required string whose value is never quoted back in an error.
func (d *decoder) password(v span) (string, error) {
	if err := d.required(v, fieldRequest, "password"); err != nil {
		return "", err
	}
	if s, ok := unquote(d.raw(v)); ok {
		return s, nil
	}
	return "", &ValidationError{Field: "password", Message: "is not a string"}
}

// integer reads fishtest's suint (positive) or uint (non-negative).
func (d *decoder) integer(v span, field string, positive bool) (int, error) {
	n, kind := parseInt(d.raw(v))
	switch {
	case kind == numTooLarge:
		return 0, d.invalid(field, v, "is out of range")
	case positive && (kind != numInt || n <= 0):
		return 0, d.invalid(field, v, "is not a positive integer")
	case kind != numInt || n < 0:
		return 0, d.invalid(field, v, "is not a non-negative integer")
	}
	return n, nil
}

// The largest worker_info.concurrency and max_memory (MiB) a worker may report: far beyond any
// machine that plays games (the largest have a few hundred cores), far below what would let
// one worker take a whole run (tasks are sized by concurrency) or overflow the sums of cores.
const (
	MaxConcurrency = 1024
	MaxMemoryMiB   = 64 << 20 // 64 TiB
)

// bounded reads a positive (lo 1) or non-negative (lo 0) integer of at most hi.
func (d *decoder) bounded(v span, field string, lo, hi int) (int, error) {
	n, err := d.integer(v, field, lo > 0)
	if err == nil && n > hi {
		err = d.invalid(field, v, fmt.Sprintf("is over the limit of %d", hi))
	}
	return n, err
}

func (d *decoder) boolean(v span, field string) (bool, error) {
	switch string(d.raw(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, d.invalid(field, v, "is not a boolean")
}

// uints reads an array of exactly len(dst) (at most 5) non-negative integers.
func (d *decoder) uints(v span, field string, dst []int) error {
	var els [5]span
	if d.b[v.start] != '[' || d.elements(v, els[:len(dst)]) != len(dst) {
		return d.invalid(field, v, fmt.Sprintf("is not an array of %d non-negative integers", len(dst)))
	}
	for i, el := range els[:len(dst)] {
		n, kind := parseInt(d.raw(el))
		if kind != numInt || n < 0 {
			return d.integerErrorAt(field, i, el)
		}
		dst[i] = n
	}
	return nil
}

func (d *decoder) integerErrorAt(field string, i int, el span) error {
	_, err := d.integer(el, field+"["+strconv.Itoa(i)+"]", false)
	return err
}

// elements returns the number of elements of the array at v, noting the first len(dst) in
// dst: one walk over the array both counts and finds them.
func (d *decoder) elements(v span, dst []span) int {
	n := 0
	for e := newElements(d.b, v); ; n++ {
		el, ok := e.next()
		if !ok {
			return n
		}
		if n < len(dst) {
			dst[n] = el
		}
	}
}

func (d *decoder) objectID(v span, field string) (string, error) {
	s, ok := unquote(d.raw(v))
	if !ok || !validObjectID(s) {
		return "", d.invalid(field, v, "is not a valid ObjectId (24 hex digits)")
	}
	return s, nil
}

func (d *decoder) workerInfo(v span, w *WorkerInfo, legacyUsername func(string) bool) error {
	if err := d.object(v, "worker_info"); err != nil {
		return err
	}
	var s [len(workerInfoKeys)]span
	unknown := collect(d.b, v, workerInfoKeySet, s[:])
	return d.workerInfoOf(&s, unknown, w, legacyUsername, nil)
}

// workerInfoOf is workerInfo of the object whose members are s (unknown: its first unknown
// key), username the username already decoded from s's (nil: none).
func (d *decoder) workerInfoOf(s *[len(workerInfoKeys)]span, unknown span, w *WorkerInfo,
	legacyUsername func(string) bool, username *string) error {
	const field = "worker_info"
	if unknown.present() {
		return d.unknown(field, unknown)
	}
	f := &workerInfoFields
	for k := range s {
		if err := d.required(s[k], field, workerInfoKeys[k]); err != nil {
			return err
		}
		var err error
		switch k {
		case wiUname:
			w.Uname, err = d.str(s[k], f[k])
		case wiArchitecture:
			err = d.architecture(s[k], f[k], &w.Architecture)
		case wiConcurrency:
			w.Concurrency, err = d.bounded(s[k], f[k], 1, MaxConcurrency)
		case wiMaxMemory:
			w.MaxMemory, err = d.bounded(s[k], f[k], 0, MaxMemoryMiB)
		case wiMinThreads:
			w.MinThreads, err = d.integer(s[k], f[k], true)
		case wiUsername:
			w.Username, err = d.username(s[k], f[k], legacyUsername, username)
		case wiVersion:
			w.Version, err = d.integer(s[k], f[k], false)
		case wiPythonVersion:
			err = d.uints(s[k], f[k], w.PythonVersion[:])
		case wiGCCVersion:
			err = d.uints(s[k], f[k], w.GCCVersion[:])
		case wiCompiler:
			w.Compiler, err = d.compiler(s[k], f[k])
		case wiUniqueKey:
			w.UniqueKey, err = d.str(s[k], f[k])
			if err == nil && !ValidUniqueKey(w.UniqueKey) {
				err = d.invalid(f[k], s[k], "is not a valid unique key (a uuid4 whose first segment may be 2 to 8 letters or digits)")
			}
		case wiModified:
			w.Modified, err = d.boolean(s[k], f[k])
		case wiWorkerArch:
			w.WorkerArch, err = d.workerArch(s[k], f[k])
		case wiARCH:
			w.ARCH, err = d.str(s[k], f[k])
		case wiNPS:
			var ok bool
			if w.NPS, ok = parseNumber(d.raw(s[k])); !ok || w.NPS < 0 {
				err = d.invalid(f[k], s[k], "is not a non-negative number")
			}
		case wiNearGithubAPILimit:
			w.NearGithubAPILimit, err = d.boolean(s[k], f[k])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) architecture(v span, field string, dst *[2]string) error {
	var els [2]span
	if d.b[v.start] != '[' || d.elements(v, els[:]) != 2 {
		return d.invalid(field, v, "is not an array of 2 strings")
	}
	for i, el := range els {
		s, ok := unquote(d.raw(el))
		if !ok { // the element's path is made only for the error
			return d.invalid(field+"["+strconv.Itoa(i)+"]", el, "is not a string")
		}
		dst[i] = s
	}
	return nil
}

// username reads a username; known, if not nil, is the string at v, decoded already.
func (d *decoder) username(v span, field string, legacy func(string) bool, known *string) (string, error) {
	var s string
	var err error
	if known != nil {
		s = *known
	} else if s, err = d.str(v, field); err != nil {
		return "", err
	}
	if !ValidUsername(s) && (legacy == nil || !legacy(s)) {
		return "", d.invalid(field, v, "is not a valid username (2 or more letters or digits) nor a legacy one")
	}
	return s, nil
}

// member returns the element of set equal to the string token raw. Returning the set's own
// string spares an allocation.
func member(raw []byte, set []string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, m := range set {
		if string(inner) == m {
			return m, true
		}
	}
	if bytes.IndexByte(inner, '\\') >= 0 { // an escaped spelling, e.g. "g\u002b+"
		if s, ok := unquote(raw); ok {
			for _, m := range set {
				if s == m {
					return m, true
				}
			}
		}
	}
	return "", false
}

var unknownArch = [...]string{"unknown"}

func (d *decoder) workerArch(v span, field string) (string, error) {
	if s, ok := member(d.raw(v), supportedArches[:]); ok {
		return s, nil
	}
	if s, ok := member(d.raw(v), unknownArch[:]); ok {
		return s, nil
	}
	return "", d.invalid(field, v, `is not a supported architecture (fishtest's supported_arches) nor "unknown"`)
}

func (d *decoder) compiler(v span, field string) (string, error) {
	if s, ok := member(d.raw(v), supportedCompilers[:]); ok {
		return s, nil
	}
	return "", d.invalid(field, v, `is not one of "clang++", "g++"`)
}

// stats reads the stats object at v, whose members are s (unknown: its first unknown key).
func (d *decoder) stats(v span, st *Stats, s *[len(statsKeys)]span, unknown span) error {
	const field = "stats"
	if err := d.object(v, field); err != nil {
		return err
	}
	if unknown.present() {
		return d.unknown(field, unknown)
	}
	dst := [...]*int{&st.Wins, &st.Losses, &st.Draws, &st.Crashes, &st.TimeLosses}
	for k := range s {
		if err := d.missingIn(s[k], statsField[k]); err != nil {
			return err
		}
		var err error
		if k < len(dst) {
			*dst[k], err = d.integer(s[k], statsField[k], false)
		} else {
			err = d.uints(s[k], statsField[k], st.Pentanomial[:])
		}
		if err != nil {
			return err
		}
	}
	if msg := resultsError(st); msg != "" {
		return &ValidationError{Field: field, Message: msg}
	}
	return nil
}

func (d *decoder) spsa(v span, r *SPSAResult) error {
	const field = "spsa"
	if err := d.object(v, field); err != nil {
		return err
	}
	var s [len(spsaKeys)]span
	if key := collect(d.b, v, spsaKeySet, s[:]); key.present() {
		return d.unknown(field, key)
	}
	dst := [...]*int{&r.Wins, &r.Losses, &r.Draws, &r.NumGames, &r.Sig}
	for k := range s {
		if err := d.missingIn(s[k], spsaField[k]); err != nil {
			return err
		}
		var err error
		if *dst[k], err = d.integer(s[k], spsaField[k], false); err != nil {
			return err
		}
		if k == spsaNumGames && r.NumGames%2 != 0 {
			return d.invalid(spsaField[k], s[k], "is not even")
		}
	}
	if sum := u128Sum(r.Wins, r.Losses, r.Draws); sum != u128Sum(r.NumGames) {
		return &ValidationError{Field: field, Message: fmt.Sprintf("wins+losses+draws (%s) != num_games (%d)", sum, r.NumGames)}
	}
	return nil
}

// resultsError checks fishtest's valid_results and says which condition fails, or returns "".
// The sums are exact: fields may be as large as an int, so they are added in 128 bits.
func resultsError(st *Stats) string {
	w, l, dr, p := st.Wins, st.Losses, st.Draws, st.Pentanomial
	if games, pairs2 := u128Sum(w, l, dr), u128Sum(p[0], p[0], p[1], p[1], p[2], p[2], p[3], p[3], p[4], p[4]); games != pairs2 {
		return fmt.Sprintf("wins+losses+draws (%s) != 2*sum(pentanomial) (%s)", games, pairs2)
	}
	// W-L == 2p4+p3-p1-2p0, with the negative terms moved across so that both sides are sums.
	if u128Sum(w, p[1], p[0], p[0]) != u128Sum(l, p[4], p[4], p[3]) {
		lhs := new(big.Int).Sub(big.NewInt(int64(w)), big.NewInt(int64(l)))
		rhs := new(big.Int).Sub(u128Sum(p[4], p[4], p[3]).big(), u128Sum(p[1], p[0], p[0]).big())
		return fmt.Sprintf("wins-losses (%s) != 2*pentanomial[4]+pentanomial[3]-pentanomial[1]-2*pentanomial[0] (%s)", lhs, rhs)
	}
	if most := u128Sum(p[3], p[2], p[2], p[1]); u128Sum(dr).cmp(most) > 0 {
		return fmt.Sprintf("draws (%d) > pentanomial[3]+2*pentanomial[2]+pentanomial[1] (%s)", dr, most)
	}
	if least := u128Sum(p[3], p[1]); u128Sum(dr).cmp(least) < 0 {
		return fmt.Sprintf("draws (%d) < pentanomial[3]+pentanomial[1] (%s)", dr, least)
	}
	return ""
}

// u128 is an unsigned 128-bit integer, enough for sums of a few non-negative ints.
type u128 struct{ hi, lo uint64 }

// u128Sum adds non-negative ints.
func u128Sum(xs ...int) u128 {
	var s u128
	for _, x := range xs {
		var carry uint64
		s.lo, carry = bits.Add64(s.lo, uint64(x), 0)
		s.hi += carry
	}
	return s
}

func (a u128) cmp(b u128) int {
	switch {
	case a.hi != b.hi:
		if a.hi < b.hi {
			return -1
		}
		return 1
	case a.lo != b.lo:
		if a.lo < b.lo {
			return -1
		}
		return 1
	}
	return 0
}

func (a u128) big() *big.Int {
	x := new(big.Int).SetUint64(a.hi)
	return x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(a.lo))
}

func (a u128) String() string { return a.big().String() }

// quoteValue shows a JSON value in an error: its text, cut at 100 bytes.
func quoteValue(raw []byte) string {
	const limit = 100
	if len(raw) <= limit {
		return string(raw)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return string(raw[:cut]) + "... (truncated)"
}

// ValidUsername reports whether s matches fishtest's username pattern [A-Za-z0-9]{2,}.
func ValidUsername(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

// ValidUniqueKey reports whether s is a worker's unique_key as the server accepts it:
// [0-9a-zA-Z]{2,8}(-[a-f0-9]{4}){3}-[a-f0-9]{12}, a uuid4 whose first segment may be a prefix.
func ValidUniqueKey(s string) bool {
	prefix, rest, ok := strings.Cut(s, "-")
	if !ok || len(prefix) < 2 || len(prefix) > 8 || len(rest) != 4+1+4+1+4+1+12 {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if !isAlnum(prefix[i]) {
			return false
		}
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if i == 4 || i == 9 || i == 14 {
			if c != '-' {
				return false
			}
		} else if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validObjectID is bson's ObjectId.is_valid for a string: 24 hex digits, either case.
func validObjectID(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
