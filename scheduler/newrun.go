package scheduler

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/notify"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/stats"
)

// Limits and defaults of a new run, fishtest's values (views_run.validate_form, rundb.new_run
// and the new-test form).
const (
	// SPRTMaxGames is the game budget of every SPRT run.
	SPRTMaxGames = 800000
	// MaxGames caps the game budget of any new run.
	MaxGames = 3200000
	// MinGames and GamesStep constrain a fixed-games or SPSA run's budget.
	MinGames  = 1000
	GamesStep = 1000

	DefaultBook       = "UHO_Lichess_4852_v1.epd"
	DefaultBookDepth  = "8"
	DefaultThreads    = 1
	DefaultThroughput = 100
	// NewRunITP is the internal throughput a run starts with, until the periodic itp
	// refresh recomputes it.
	NewRunITP = 100

	// sprtAlpha and sprtBeta are the error rates of every new SPRT run.
	sprtAlpha = 0.05
	sprtBeta  = 0.05
	// ltcRatio is the TC ratio above which an SPRT run counts as LTC and its info gets the
	// "LTC: " prefix (SMP STC is exactly 4).
	ltcRatio = 4
	// ltcTCBase is the tc_base from which the new_run action tags a run "(LTC)" (fishtest's
	// ltc_lower_bound, also the LTC index's filter).
	ltcTCBase = 40
	// classicSPSA is the only SPSA algorithm fishtest runs.
	classicSPSA = "classic"
)

// archFilterTargets are the worker architectures an arch_filter is matched against (fishtest's
// supported_arches): a filter that matches none of them would leave the run without workers.
var archFilterTargets = []string{
	"apple-silicon", "armv7", "armv7-neon", "armv8", "armv8-dotprod", "e2k", "general-32",
	"general-64", "loongarch64", "loongarch64-lasx", "loongarch64-lsx", "ppc-32", "ppc-64",
	"ppc-64-altivec", "ppc-64-vsx", "riscv64", "x86-32", "x86-32-sse2", "x86-32-sse41-popcnt",
	"x86-64", "x86-64-avx2", "x86-64-avx512", "x86-64-avxvnni", "x86-64-bmi2",
	"x86-64-sse3-popcnt", "x86-64-sse41-popcnt", "x86-64-ssse3", "x86-64-vnni512",
	"x86-64-avx512icl",
}

// runCompilers are the compilers a run may require of its workers.
var runCompilers = []string{"clang++", "g++"}

// The shapes of fishtest's run schema (schemas.py), anchored because vtjson matches whole values.
var (
	tcPattern         = regexp.MustCompile(`^([1-9][0-9]*/)?[0-9]+(\.[0-9]+)?(\+[0-9]+(\.[0-9]+)?)?$`)
	tcBasePattern     = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?`)
	shaPattern        = regexp.MustCompile(`^[a-f0-9]{40}$`)
	strIntPattern     = regexp.MustCompile(`^[1-9][0-9]*$`)
	netPattern        = regexp.MustCompile(`^nn-[a-f0-9]{12}\.nnue$`)
	optionPattern     = regexp.MustCompile(`^[^\s=]+=[^\s=]+$`)
	hashOptionPattern = regexp.MustCompile(`Hash=([0-9]+)`)
)

// FieldError says which field of a protocol.RunRequest is invalid and why. Field is the JSON name, with
// a dot for nested fields ("sprt.elo0").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// BuildRun validates req as fishtest's new-test form does and returns the new run of username,
// unapproved, created at now. The run is not stored. An invalid request gives a *FieldError
// naming the first bad field. BuildRun does no I/O; it is safe for concurrent use, and calling it
// twice with the same arguments gives equal runs except for their IDs.
//
// The SHAs, signatures, info and nets are taken as given: PrepareRun fills them from the
// repository first.
func BuildRun(req protocol.RunRequest, username string, now time.Time) (*rundb.Run, error) {
	if username == "" {
		return nil, fieldErr("username", "missing")
	}
	if err := checkSizes(req); err != nil {
		return nil, err
	}
	args := rundb.RunArgs{
		BaseTag: req.BaseTag, NewTag: req.NewTag,
		ResolvedBase: req.ResolvedBase, ResolvedNew: req.ResolvedNew,
		MsgBase: req.MsgBase, MsgNew: req.MsgNew,
		Username: username, ITP: NewRunITP,
		AutoPurge: req.AutoPurge, Adjudication: true,
		Priority: float64(req.Priority), Throughput: DefaultThroughput,
		Threads: DefaultThreads, Book: DefaultBook, BookDepth: DefaultBookDepth,
		ArchFilter: req.ArchFilter, Compiler: req.Compiler,
	}
	for _, build := range []func(protocol.RunRequest, *rundb.RunArgs) error{
		buildRevisions, buildGames, buildEngines, buildScope, buildStopRule,
	} {
		if err := build(req, &args); err != nil { // the first bad field, in the form's order
			return nil, err
		}
	}
	if args.SPRT != nil {
		ratio, err := stats.TCRatio(args.TC, args.Threads)
		if err != nil { // checkTC has parsed it already
			return nil, fieldErr("tc", "%v", err)
		}
		if ratio > ltcRatio {
			args.Info = "LTC: " + args.Info
		}
	}

	start := now.UTC().Truncate(time.Millisecond) // what the database keeps
	return &rundb.Run{
		ID:              rundb.NewObjectID(),
		RescheduledFrom: req.RescheduledFrom,
		Version:         rundb.RunVersion,
		StartTime:       start,
		LastUpdated:     start,
		TCBase:          tcBase(args.TC),
		Results:         rundb.NewResults(),
		Args:            args,
		Tasks:           []rundb.Task{},
		BadTasks:        []rundb.Task{},
	}, nil
}

// The bounds of a run's arguments, whoever submits it: every run is stored whole and read by
// every listing, so none may be large, and none may hold values its statistics cannot take.
// The SPRT bounds are the Elo calculator's.
const (
	MaxSPRTElo    = 10.0
	MinSPRTWidth  = 0.5
	MaxSPSAParams = 500
	MaxThreads    = 512
	MaxThroughput = 1000
	MaxPriority   = 100 // and -MaxPriority at least
	maxInfoBytes  = 8 << 10
	maxRawParams  = 64 << 10
	maxNets       = 8
)

// buildRevisions checks what the run repeats and the two revisions it plays.
func buildRevisions(req protocol.RunRequest, args *rundb.RunArgs) error {
	if req.RescheduledFrom != "" {
		if _, err := rundb.ParseObjectID(req.RescheduledFrom); err != nil {
			return fieldErr("rescheduled_from", "%q is not a run id", req.RescheduledFrom)
		}
	}

	for _, f := range []struct{ name, value string }{{"base_tag", req.BaseTag}, {"new_tag", req.NewTag}} {
		if strings.TrimSpace(f.value) == "" {
			return fieldErr(f.name, "missing: give the branch name")
		}
	}
	for _, f := range []struct{ name, value string }{{"resolved_base", req.ResolvedBase}, {"resolved_new", req.ResolvedNew}} {
		if !shaPattern.MatchString(f.value) {
			return fieldErr(f.name, "%q is not a commit SHA (40 lower-case hex digits)", f.value)
		}
	}
	return nil
}

// buildGames checks and sets the games' conditions: time controls, opening book, threads.
func buildGames(req protocol.RunRequest, args *rundb.RunArgs) error {
	// Time controls.
	if req.TC == "" {
		return fieldErr("tc", "missing: give a time control such as 10+0.1")
	}
	if err := checkTC(req.TC); err != nil {
		return fieldErr("tc", "%v", err)
	}
	args.TC = req.TC
	args.NewTC = req.TC
	if req.NewTC != "" {
		if err := checkTC(req.NewTC); err != nil {
			return fieldErr("new_tc", "%v", err)
		}
		args.NewTC = req.NewTC
	}

	// Opening book.
	if req.Book != "" {
		if err := checkBook(req.Book); err != nil {
			return fieldErr("book", "%v", err)
		}
		args.Book = req.Book
	}
	if req.BookDepth != "" {
		if !strIntPattern.MatchString(req.BookDepth) {
			return fieldErr("book_depth", "%q is not a positive whole number", req.BookDepth)
		}
		args.BookDepth = req.BookDepth
	}

	if req.Threads != nil {
		if *req.Threads < 1 {
			return fieldErr("threads", "%d: must be >= 1", *req.Threads)
		}
		args.Threads = *req.Threads
	}
	return nil
}

// buildEngines checks and sets the engines' options, bench signatures and networks.
func buildEngines(req protocol.RunRequest, args *rundb.RunArgs) error {
	isSPSA := req.SPSA != nil

	// Engine options, normalised to single spaces as fishtest does.
	var err error
	if args.BaseOptions, err = sanitizeOptions(req.BaseOptions); err != nil {
		return fieldErr("base_options", "%v", err)
	}
	if args.NewOptions, err = sanitizeOptions(req.NewOptions); err != nil {
		return fieldErr("new_options", "%v", err)
	}

	// Bench signatures. An SPSA run plays one binary against itself, so, as in fishtest, its
	// base signature is the new one.
	if !isSPSA {
		if err := checkSignature(req.BaseSignature); err != nil {
			return fieldErr("base_signature", "%v", err)
		}
	}
	if err := checkSignature(req.NewSignature); err != nil {
		return fieldErr("new_signature", "%v", err)
	}
	args.BaseSignature, args.NewSignature = req.BaseSignature, req.NewSignature
	if isSPSA {
		args.BaseSignature = req.NewSignature
	}

	if args.BaseNets, err = checkNets(req.BaseNets); err != nil {
		return fieldErr("base_nets", "%v", err)
	}
	if args.NewNets, err = checkNets(req.NewNets); err != nil {
		return fieldErr("new_nets", "%v", err)
	}
	return nil
}

// buildScope checks and sets the repository, the description and how the run is scheduled.
func buildScope(req protocol.RunRequest, args *rundb.RunArgs) error {
	if err := checkRepoShape(req.TestsRepo); err != nil {
		return fieldErr("tests_repo", "%v", err)
	}
	args.TestsRepo = strings.TrimSuffix(req.TestsRepo, "/")

	if strings.TrimSpace(req.Info) == "" {
		return fieldErr("info", "missing: say what the test is about")
	}
	args.Info = req.Info

	if req.Throughput != nil {
		if *req.Throughput < 0 {
			return fieldErr("throughput", "%d: must be >= 0 (a percentage; 100 is normal)", *req.Throughput)
		}
		args.Throughput = float64(*req.Throughput)
	}
	if req.Adjudication != nil {
		args.Adjudication = *req.Adjudication
	}

	if req.ArchFilter != "" {
		if err := checkArchFilter(req.ArchFilter); err != nil {
			return fieldErr("arch_filter", "%v", err)
		}
	}
	if req.Compiler != "" && !slices.Contains(runCompilers, req.Compiler) {
		return fieldErr("compiler", "%q is not one of %s", req.Compiler, strings.Join(runCompilers, ", "))
	}
	return nil
}

// checkSizes bounds every field's size and every count's range before anything is parsed.
func checkSizes(req protocol.RunRequest) error {
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"base_tag", req.BaseTag, 200}, {"new_tag", req.NewTag, 200},
		{"msg_base", req.MsgBase, 2000}, {"msg_new", req.MsgNew, 2000},
		{"rescheduled_from", req.RescheduledFrom, 24},
		{"tc", req.TC, 40}, {"new_tc", req.NewTC, 40},
		{"book", req.Book, 200}, {"book_depth", req.BookDepth, 10},
		{"base_options", req.BaseOptions, 1000}, {"new_options", req.NewOptions, 1000},
		{"base_signature", req.BaseSignature, 20}, {"new_signature", req.NewSignature, 20},
		{"tests_repo", req.TestsRepo, 200}, {"info", req.Info, maxInfoBytes},
		{"arch_filter", req.ArchFilter, 200}, {"compiler", req.Compiler, 20},
	} {
		if len(f.value) > f.max {
			return fieldErr(f.name, "is %d bytes long, more than the %d allowed", len(f.value), f.max)
		}
	}
	for _, f := range []struct {
		name string
		nets []string
	}{{"base_nets", req.BaseNets}, {"new_nets", req.NewNets}} {
		if len(f.nets) > maxNets {
			return fieldErr(f.name, "names %d networks, more than the %d allowed", len(f.nets), maxNets)
		}
		for _, n := range f.nets {
			if len(n) > 100 {
				return fieldErr(f.name, "a network name is %d bytes long, more than the 100 allowed", len(n))
			}
		}
	}
	if req.SPSA != nil && len(req.SPSA.RawParams) > maxRawParams {
		return fieldErr("spsa.raw_params", "is %d bytes long, more than the %d allowed", len(req.SPSA.RawParams), maxRawParams)
	}
	if req.Threads != nil && *req.Threads > MaxThreads {
		return fieldErr("threads", "%d: must be <= %d", *req.Threads, MaxThreads)
	}
	if req.Throughput != nil && *req.Throughput > MaxThroughput {
		return fieldErr("throughput", "%d: must be <= %d (a percentage; 100 is normal)", *req.Throughput, MaxThroughput)
	}
	if req.Priority > MaxPriority || req.Priority < -MaxPriority {
		return fieldErr("priority", "%d: must be from -%d to %d", req.Priority, MaxPriority, MaxPriority)
	}
	return nil
}

// buildStopRule checks that req has exactly one stop rule and fills args.NumGames and args.SPRT
// or args.SPSA.
func buildStopRule(req protocol.RunRequest, args *rundb.RunArgs) error {
	switch {
	case req.SPRT != nil && req.SPSA != nil:
		return fieldErr("spsa", "a run has one stop rule: give sprt or spsa, not both")
	case req.NumGames < 0:
		return fieldErr("num_games", "%d: must not be negative", req.NumGames)
	case req.NumGames != 0 && req.SPRT != nil:
		return fieldErr("num_games", "give num_games only for a fixed-games run: an SPRT run plays at most %d games", SPRTMaxGames)
	case req.NumGames != 0 && req.SPSA != nil:
		return fieldErr("num_games", "give an SPSA run's game count as spsa.num_games")
	case req.SPRT != nil:
		s, err := buildSPRT(*req.SPRT, args.TC, args.Threads)
		if err != nil {
			return err
		}
		args.SPRT = s
		args.NumGames = SPRTMaxGames
	case req.SPSA != nil:
		if err := checkNumGames("spsa.num_games", req.SPSA.NumGames); err != nil {
			return err
		}
		s, err := buildSPSA(*req.SPSA)
		if err != nil {
			return err
		}
		args.SPSA = s
		args.NumGames = req.SPSA.NumGames
	case req.NumGames == 0:
		return fieldErr("num_games", "missing: give num_games (a fixed number of games), sprt or spsa")
	default:
		if err := checkNumGames("num_games", req.NumGames); err != nil {
			return err
		}
		args.NumGames = req.NumGames
	}
	return nil
}

// checkNumGames applies the new-test form's rule to a fixed-games or SPSA budget.
func checkNumGames(field string, n int) error {
	switch {
	case n < MinGames:
		return fieldErr(field, "%d: must be >= %d", n, MinGames)
	case n%GamesStep != 0:
		return fieldErr(field, "%d: must be a multiple of %d", n, GamesStep)
	case n > MaxGames:
		return fieldErr(field, "%d: must be <= %d", n, MaxGames)
	}
	return nil
}

// buildSPRT returns the initial state of an SPRT run; its batch size (game pairs between two
// updates) shrinks as games get longer: 16 pairs at 10+0.1, 3 at 60+0.6.
func buildSPRT(req protocol.SPRTRequest, tc string, threads int) (*rundb.SPRT, error) {
	switch {
	case req.Elo0 == nil:
		return nil, fieldErr("sprt.elo0", "missing: give the lower bound in normalized Elo")
	case req.Elo1 == nil:
		return nil, fieldErr("sprt.elo1", "missing: give the upper bound in normalized Elo")
	case !finite(*req.Elo0):
		return nil, fieldErr("sprt.elo0", "%v is not a finite number", *req.Elo0)
	case !finite(*req.Elo1):
		return nil, fieldErr("sprt.elo1", "%v is not a finite number", *req.Elo1)
	case math.Abs(*req.Elo0) > MaxSPRTElo:
		return nil, fieldErr("sprt.elo0", "%v is outside [-%v, %v]", *req.Elo0, MaxSPRTElo, MaxSPRTElo)
	case math.Abs(*req.Elo1) > MaxSPRTElo:
		return nil, fieldErr("sprt.elo1", "%v is outside [-%v, %v]", *req.Elo1, MaxSPRTElo, MaxSPRTElo)
	case *req.Elo1 < *req.Elo0+MinSPRTWidth:
		return nil, fieldErr("sprt.elo1", "%v must be greater than elo0 %v by at least %v", *req.Elo1, *req.Elo0, MinSPRTWidth)
	}
	model := req.EloModel
	switch model {
	case "":
		model = stats.ModelNormalized
	case stats.ModelNormalized:
	case stats.ModelLogistic, stats.ModelBayesElo:
		return nil, fieldErr("sprt.elo_model", "%q is no longer accepted for new runs: use %q", model, stats.ModelNormalized)
	default:
		return nil, fieldErr("sprt.elo_model", "unknown Elo model %q: use %q", model, stats.ModelNormalized)
	}
	ratio, err := stats.TCRatio(tc, threads)
	if err != nil {
		return nil, fieldErr("tc", "%v", err)
	}
	s := stats.NewSPRT(sprtAlpha, sprtBeta, *req.Elo0, *req.Elo1, model, stats.SPRTBatchSize(ratio))
	out := &rundb.SPRT{
		Alpha: s.Alpha, Beta: s.Beta, Elo0: s.Elo0, Elo1: s.Elo1, EloModel: s.EloModel,
		State: s.State, LLR: s.LLR, BatchSize: s.BatchSize,
		LowerBound: s.LowerBound, UpperBound: s.UpperBound,
	}
	if o := s.Overshoot; o != nil {
		out.Overshoot = &rundb.Overshoot{
			LastUpdate: o.LastUpdate, SkippedUpdates: o.SkippedUpdates,
			Ref0: o.Ref0, M0: o.M0, Sq0: o.Sq0, Ref1: o.Ref1, M1: o.M1, Sq1: o.Sq1,
		}
	}
	return out, nil
}

// buildSPSA returns the initial state of a classic SPSA run of req.NumGames games (already
// checked): A = int(A_ratio*num_games/2) unless A is given, and each parameter's gains from
// raw_params.
func buildSPSA(req protocol.SPSARequest) (*rundb.SPSA, error) {
	if req.ARatio != nil && req.A != nil {
		return nil, fieldErr("spsa.A", "give A (iterations) or A_ratio (a fraction of the iterations), not both")
	}
	numbers := []struct {
		field string
		value *float64
		def   float64
	}{
		{"spsa.A_ratio", req.ARatio, stats.DefaultSPSAARatio},
		{"spsa.A", req.A, 0},
		{"spsa.alpha", req.Alpha, stats.DefaultSPSAAlpha},
		{"spsa.gamma", req.Gamma, stats.DefaultSPSAGamma},
	}
	vals := make([]float64, len(numbers))
	for i, n := range numbers {
		vals[i] = n.def
		if n.value == nil {
			continue
		}
		if !finite(*n.value) || *n.value < 0 {
			return nil, fieldErr(n.field, "%v: must be a finite number >= 0", *n.value)
		}
		vals[i] = *n.value
	}
	aRatio, alpha, gamma := vals[0], vals[2], vals[3]
	numIter := req.NumGames / 2
	a := math.Trunc(aRatio * float64(req.NumGames) / 2)
	if req.A != nil {
		if *req.A != math.Trunc(*req.A) {
			return nil, fieldErr("spsa.A", "%v is not a whole number of iterations; for a fraction of the iterations use A_ratio", *req.A)
		}
		a = *req.A
	}
	if strings.TrimSpace(req.RawParams) == "" {
		return nil, fieldErr("spsa.raw_params", "missing: give one name,start,min,max,c_end,r_end line per parameter")
	}
	params, err := stats.ParseSPSAParams(req.RawParams, a, alpha, gamma, numIter)
	if err != nil {
		return nil, fieldErr("spsa.raw_params", "%v", err)
	}
	if len(params) == 0 {
		return nil, fieldErr("spsa.raw_params", "defines no parameter")
	}
	if len(params) > MaxSPSAParams {
		return nil, fieldErr("spsa.raw_params", "defines %d parameters, more than the %d a run may tune", len(params), MaxSPSAParams)
	}
	out := &rundb.SPSA{
		Algorithm: classicSPSA, A: a, Alpha: alpha, Gamma: gamma,
		RawParams: req.RawParams, NumIter: numIter,
		Params: make([]rundb.SPSAParam, len(params)),
	}
	for i, p := range params {
		if p.Name == "" {
			return nil, fieldErr("spsa.raw_params", "parameter %d has no name", i+1)
		}
		out.Params[i] = rundb.SPSAParam{
			Name: p.Name, Start: p.Start, Min: p.Min, Max: p.Max, CEnd: p.CEnd, REnd: p.REnd,
			C: p.C, AEnd: p.AEnd, A: p.A, Theta: p.Theta,
		}
	}
	return out, nil
}

// checkTC accepts fishtest's time-control shape, [moves/]time[+increment], whose games take
// some time.
func checkTC(tc string) error {
	if !tcPattern.MatchString(tc) {
		return fmt.Errorf("%q is not a time control of the form [moves/]seconds[+increment], such as 10+0.1 or 40/60", tc)
	}
	if _, err := stats.EstimateGameDuration(tc); err != nil {
		return err
	}
	return nil
}

// tcBase is the leading number of tc, which fishtest stores for its LTC index (the moves of a
// repeating control, for "40/60", as in fishtest).
func tcBase(tc string) float64 {
	v, _ := strconv.ParseFloat(tcBasePattern.FindString(tc), 64)
	return v
}

// checkRepoShape accepts what may be a repository's address: an https:// URL with a host and
// a path and nothing more, or an absolute path on the server. Which repositories may be used is
// the operator's choice, checked by the mirrors (PrepareRun).
func checkRepoShape(repo string) error {
	if strings.HasPrefix(repo, "/") {
		if p := strings.TrimSuffix(repo, "/"); path.Clean(p) != p || strings.ContainsAny(repo, " \t\n\r") {
			return fmt.Errorf("%q is not a clean absolute path", repo)
		}
		return nil
	}
	u, err := url.Parse(repo)
	if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("%q is not a repository URL (https://HOST/OWNER/REPO, such as https://github.com/USER/Stockfish)", repo)
	}
	return nil
}

// checkBook accepts a book file name ending in .epd or .pgn. Workers fetch books by name, so a
// path is refused.
func checkBook(book string) error {
	stem, ok := strings.CutSuffix(book, ".epd")
	if !ok {
		stem, ok = strings.CutSuffix(book, ".pgn")
	}
	if !ok || stem == "" || strings.ContainsAny(book, "/\\") || strings.TrimSpace(book) != book {
		return fmt.Errorf("%q is not a book file name ending in .epd or .pgn", book)
	}
	return nil
}

// sanitizeOptions checks UCI options written as space-separated name=value pairs and joins
// them with single spaces.
func sanitizeOptions(options string) (string, error) {
	for _, r := range options {
		if r > 127 {
			return "", errors.New("options must contain only ASCII characters")
		}
	}
	tokens := strings.Fields(options)
	if len(tokens) == 0 {
		return "", errors.New("missing: give the engine options, such as Hash=16")
	}
	for _, t := range tokens {
		if !optionPattern.MatchString(t) {
			return "", fmt.Errorf("%q: each option must be a name=value pair with exactly one '='", t)
		}
	}
	return strings.Join(tokens, " "), nil
}

// checkSignature accepts a bench signature: a whole number without leading zeros.
func checkSignature(sig string) error {
	if sig == "" {
		return errors.New("missing: give the bench node count of the commit")
	}
	if !strIntPattern.MatchString(sig) {
		return fmt.Errorf("%q is not a bench node count (digits, no leading zero)", sig)
	}
	return nil
}

// checkNets checks a list of network names and returns it, empty rather than nil.
func checkNets(nets []string) ([]string, error) {
	out := make([]string, 0, len(nets))
	for _, n := range nets {
		if !netPattern.MatchString(n) {
			return nil, fmt.Errorf("%q is not a network name (nn-<12 hex digits>.nnue)", n)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%q is listed twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// checkArchFilter requires a regular expression that some worker architecture matches.
func checkArchFilter(filter string) error {
	re, err := regexp.Compile(filter)
	if err != nil {
		return fmt.Errorf("invalid regular expression: %v", err)
	}
	for _, arch := range archFilterTargets {
		if re.MatchString(arch) {
			return nil
		}
	}
	return fmt.Errorf("%q matches no worker architecture (%s)", filter, strings.Join(archFilterTargets, ", "))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// RunLabel is fishtest's short name of a run in the event log: the first 23 characters of the
// new tag, a dash and the first 7 hex digits of the MD5 of the run ID. Characters, not bytes,
// as Python slices strings, so a tag is never cut inside a UTF-8 sequence.
func RunLabel(r *rundb.Run) string {
	tag := r.Args.NewTag
	n := 0
	for i := range tag {
		if n == 23 {
			tag = tag[:i]
			break
		}
		n++
	}
	sum := md5.Sum([]byte(r.ID.Hex()))
	return tag + "-" + hex.EncodeToString(sum[:])[:7]
}

// newRunMessage is the summary fishtest writes with a new_run action, for example
// "SPRT<0.00,2.00> TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16".
func newRunMessage(r *rundb.Run) string {
	a := r.Args
	var b strings.Builder
	switch {
	case a.SPRT != nil:
		fmt.Fprintf(&b, "SPRT%s", stats.FormatBounds(a.SPRT.EloModel, a.SPRT.Elo0, a.SPRT.Elo1))
	case a.SPSA != nil:
		fmt.Fprintf(&b, "SPSA[%d]", a.NumGames)
	default:
		fmt.Fprintf(&b, "NumGames[%d]", a.NumGames)
	}
	fmt.Fprintf(&b, " TC:%s", a.TC)
	if a.NewTC != a.TC {
		fmt.Fprintf(&b, "[%s]", a.NewTC)
	}
	if r.TCBase >= ltcTCBase {
		b.WriteString("(LTC)")
	}
	fmt.Fprintf(&b, " Book:%s Threads:%d", a.Book, a.Threads)
	if a.Threads > 1 {
		b.WriteString("(SMP)")
	}
	fmt.Fprintf(&b, " Hash:%s/%s", hashOption(a.BaseOptions), hashOption(a.NewOptions))
	return b.String()
}

// HashMiB is the Hash option of an options string in MiB, 0 when there is none (as the
// new-run message reads it).
func HashMiB(options string) int {
	n, _ := strconv.Atoi(hashOption(options))
	return n
}

// hashOption is the Hash value of an option string, "0" without one.
func hashOption(options string) string {
	m := hashOptionPattern.FindStringSubmatch(options)
	if m == nil {
		return "0"
	}
	if v := strings.TrimLeft(m[1], "0"); v != "" {
		return v
	}
	return "0"
}

// Errors of ApproveRun besides ErrRunNotFound.
var (
	// ErrSelfApproval means an approver tried to approve their own run.
	ErrSelfApproval = errors.New("self approval is disabled")
	// ErrAlreadyApproved means the run has been approved before.
	ErrAlreadyApproved = errors.New("run already approved")
)

// CreateRun builds the run username asks for (BuildRun), with this server's default book if it
// names none, checks that its book and networks are on this server, stores it, makes the
// repository's mirror keep its commits (a few milliseconds of git) and logs a new_run action. A
// run named by branch must have been through PrepareRun first. It returns the caller's own copy
// of the stored run. Errors: a *FieldError for an invalid request, or a database error.
func (s *Scheduler) CreateRun(ctx context.Context, req protocol.RunRequest, username string) (*rundb.Run, error) {
	if err := s.calls.enter(); err != nil {
		return nil, err
	}
	defer s.calls.leave()
	now := s.now()
	if err := s.checkBookHeld(&req); err != nil {
		return nil, err
	}
	r, err := BuildRun(req, username, now)
	if err != nil {
		return nil, err
	}
	if err := s.checkNetsUploaded(ctx, r.Args); err != nil {
		return nil, err
	}
	// The cache owns r once AddRun returns; BuildRun is pure, so a second call makes the
	// caller's copy.
	out, _ := BuildRun(req, username, now)
	out.ID = r.ID
	if err := s.AddRun(ctx, r); err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	s.keepCommits(ctx, out.Args)
	// The run exists now: failing the request would invite a duplicate submission, so a lost
	// action is logged, not returned.
	err = s.db.actions.Insert(ctx, &rundb.Action{
		Time: unixSeconds(now), Action: "new_run", Username: username,
		RunID: out.ID.Hex(), Run: RunLabel(out), Message: newRunMessage(out),
	})
	if err != nil {
		s.logger.Error("log new run", "run", out.ID, "err", err)
	}
	return out, nil
}

// checkBookHeld gives a request without a book this server's default one, and refuses a book the
// server does not hold: workers get books from the server, and could not play the run.
func (s *Scheduler) checkBookHeld(req *protocol.RunRequest) error {
	held := s.cfg.Books
	if held == nil {
		return nil
	}
	if req.Book == "" {
		req.Book = held.Default()
		return nil
	}
	if _, ok := held.Get(req.Book); !ok {
		return fieldErr("book", "%q is not on this server, which holds %s; an approver can add it on the books page",
			req.Book, strings.Join(held.Names(), ", "))
	}
	return nil
}

// checkNetsUploaded refuses a run whose networks workers could not download from this server.
func (s *Scheduler) checkNetsUploaded(ctx context.Context, args rundb.RunArgs) error {
	for _, list := range []struct {
		field string
		nets  []string
	}{{"base_nets", args.BaseNets}, {"new_nets", args.NewNets}} {
		var missing []string
		for _, name := range list.nets {
			_, err := s.db.nns.Get(ctx, name)
			if errors.Is(err, rundb.ErrNotFound) {
				missing = append(missing, name)
				continue
			}
			if err != nil {
				return fmt.Errorf("create run: %w", err)
			}
		}
		if len(missing) > 0 {
			return fieldErr(list.field, "not on this server: %s; upload the networks first", strings.Join(missing, ", "))
		}
	}
	return nil
}

// ApproveRun lets approver's approval start run id, as fishtest's approve_run: the approval is
// written before ApproveRun returns and logged as an approve_run action. Errors:
// ErrRunNotFound, ErrSelfApproval (the run is approver's own), ErrAlreadyApproved, or a
// database error. Whether approver may approve at all is the caller's check.
func (s *Scheduler) ApproveRun(ctx context.Context, id rundb.ObjectID, approver string) error {
	if err := s.calls.enter(); err != nil {
		return err
	}
	defer s.calls.leave()
	var label string
	var note events
	err := s.runs.Change(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
		switch {
		case r.Args.Username == approver:
			return 0, fmt.Errorf("run %s: %w", id, ErrSelfApproval)
		case r.Approved:
			return 0, fmt.Errorf("run %s: %w", id, ErrAlreadyApproved)
		}
		r.Approved = true
		r.Approver = approver
		label = RunLabel(r)
		note = events{} // what a repeated call of this function noted is replaced, not added to
		note.note(notify.KindApproved, r, "approved by "+approver, s.now())
		return runcache.PrioSaveNow, nil
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		return fmt.Errorf("%w: %s", ErrRunNotFound, id)
	case errors.Is(err, ErrSelfApproval), errors.Is(err, ErrAlreadyApproved):
		return err
	case err != nil:
		return fmt.Errorf("approve run %s: %w", id, err)
	}
	err = s.db.actions.Insert(ctx, &rundb.Action{
		Time: unixSeconds(s.now()), Action: "approve_run", Username: approver,
		RunID: id.Hex(), Run: label, Message: "approved",
	})
	if err != nil {
		// The approval is stored; only its log entry is lost.
		s.logger.Error("log run approval", "run", id, "err", err)
	}
	s.writeEvents(ctx, &note)
	return nil
}

// unixSeconds is an action's timestamp: Unix seconds with microseconds, as fishtest stores it.
func unixSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
