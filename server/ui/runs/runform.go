package runs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/stats"
)

// The new-test form (/tests/run) and the actions on a run (stop, approve, purge, delete,
// modify). As fishtest's, the form takes branch names: the server reads the commits, their bench
// signatures and the description from its mirror of the repository (scheduler.PrepareRun). Commit
// SHAs and signatures may still be given, to pin them.

// Progression tests play master against a fixed release. The release is a constant, not
// configuration: Stockfish 18 (tag SF_18), its commit and its bench, as fishtest uses them.
const (
	ptVersion   = "SF_18"
	ptBaseSHA   = "43a2be018606176d91f612e48a753bd6c8ed6cf7"
	ptBaseBench = "2050811"
	// ptGames is a progression test's fixed number of games.
	ptGames = 60000
)

// defaultFormGames is the game count the form proposes for fixed-games and SPSA runs.
const defaultFormGames = 60000

// runPreset is one of the form's test types: it sets the time control, threads, hash, throughput
// and stop rule together.
type runPreset struct {
	Key, Name, Title string
	TC               string
	Threads          int
	Hash             int
	Throughput       int
	StopRule         string // "sprt" or "numgames"
	Bounds           string // a boundsPreset key, for SPRT presets
	Games            int    // for fixed-games presets
	// Progression tests also name the engines: master against the fixed release.
	TestBranch, BaseBranch, ResolvedBase, BaseSignature, Info string
}

// runPresets are fishtest's test types, in its order.
var runPresets = []runPreset{
	{Key: "stc", Name: "STC", Title: "Short time control, one thread", TC: "10+0.1", Threads: 1, Hash: 16, Throughput: 100, StopRule: "sprt", Bounds: "stc"},
	{Key: "ltc", Name: "LTC", Title: "Long time control, one thread", TC: "60+0.6", Threads: 1, Hash: 64, Throughput: 100, StopRule: "sprt", Bounds: "ltc"},
	{Key: "stc-smp", Name: "STC SMP", Title: "Short time control, 8 threads", TC: "5+0.05", Threads: 8, Hash: 64, Throughput: 100, StopRule: "sprt", Bounds: "stc"},
	{Key: "ltc-smp", Name: "LTC SMP", Title: "Long time control, 8 threads", TC: "20+0.2", Threads: 8, Hash: 256, Throughput: 100, StopRule: "sprt", Bounds: "ltc"},
	{Key: "vltc", Name: "VLTC", Title: "Very long time control, one thread, half throughput", TC: "180+1.8", Threads: 1, Hash: 192, Throughput: 50, StopRule: "sprt", Bounds: "stc"},
	{Key: "vltc-smp", Name: "VLTC SMP", Title: "Very long time control, 8 threads, half throughput", TC: "60+0.6", Threads: 8, Hash: 512, Throughput: 50, StopRule: "sprt", Bounds: "ltc"},
	{Key: "pt", Name: "PT", Title: "Progression test: master against " + ptVersion + ", one thread", TC: "60+0.6", Threads: 1, Hash: 64, Throughput: 100,
		StopRule: "numgames", Games: ptGames, TestBranch: "master", BaseBranch: ptBaseSHA, ResolvedBase: ptBaseSHA, BaseSignature: ptBaseBench,
		Info: "Progression test of master against " + ptVersion + " (" + strconv.Itoa(ptGames) + " games)"},
	{Key: "pt-smp", Name: "PT SMP", Title: "Progression test: master against " + ptVersion + ", 8 threads", TC: "60+0.6", Threads: 8, Hash: 512, Throughput: 100,
		StopRule: "numgames", Games: ptGames, TestBranch: "master", BaseBranch: ptBaseSHA, ResolvedBase: ptBaseSHA, BaseSignature: ptBaseBench,
		Info: "Progression test of master against " + ptVersion + " at 8 threads (" + strconv.Itoa(ptGames) + " games)"},
}

func findPreset(key string) (runPreset, bool) {
	for _, p := range runPresets {
		if p.Key == key {
			return p, true
		}
	}
	return runPreset{}, false
}

// boundsPreset is a named pair of SPRT bounds, in normalized Elo.
type boundsPreset struct {
	Key, Label string
	Elo0, Elo1 float64
}

// customBounds is the bounds choice that takes the typed Elo0 and Elo1.
const customBounds = "custom"

// sprtBounds are fishtest's bounds choices: gainers use the standard bounds, simplifications
// and other changes that must not lose Elo the non-regression ones.
var sprtBounds = []boundsPreset{
	{Key: "stc", Label: "Standard STC", Elo0: 0, Elo1: 2},
	{Key: "ltc", Label: "Standard LTC", Elo0: 0.5, Elo1: 2.5},
	{Key: "nonreg-stc", Label: "Non-regression / simplification STC", Elo0: -1.75, Elo1: 0.25},
	{Key: "nonreg-ltc", Label: "Non-regression / simplification LTC", Elo0: -1.75, Elo1: 0.25},
	{Key: customBounds, Label: "Custom bounds"},
}

// boundsOf is the bounds choice that gives an existing run's bounds: the preset with its
// Elo0 and Elo1 (the LTC one of two equal presets for a long time control), else custom.
func boundsOf(sp *rundb.SPRT, ltc bool) string {
	if sp.EloModel != stats.ModelNormalized {
		return customBounds // the presets are normalized Elo
	}
	found := customBounds
	for _, b := range sprtBounds {
		if b.Key == customBounds || b.Elo0 != sp.Elo0 || b.Elo1 != sp.Elo1 {
			continue
		}
		if found == customBounds || strings.HasSuffix(b.Key, "ltc") == ltc {
			found = b.Key
		}
	}
	return found
}

func findBounds(key string) (boundsPreset, bool) {
	for _, b := range sprtBounds {
		if b.Key == key {
			return b, true
		}
	}
	return boundsPreset{}, false
}

// formCompilers are the compilers a run may pin (the scheduler checks the choice).
var formCompilers = []string{"clang++", "g++"}

// formThroughputs are the throughputs the form suggests.
var formThroughputs = []int{10, 25, 50, 100, 200}

// Stop rules, the values of the stop_rule field.
const (
	stopSPRT     = "sprt"
	stopSPSA     = "spsa"
	stopNumGames = "numgames"
)

// runForm is the new-test form exactly as typed, so that a refused submission shows it again
// unchanged. Field comments give the form field names, fishtest's.
type runForm struct {
	TestsRepo     string // tests-repo
	BaseBranch    string // base-branch
	TestBranch    string // test-branch
	ResolvedBase  string // resolved_base
	ResolvedNew   string // resolved_new
	MsgBase       string // msg_base (hidden)
	MsgNew        string // msg_new (hidden)
	BaseSignature string // base-signature
	TestSignature string // test-signature
	BaseOptions   string // base-options
	NewOptions    string // new-options
	BaseNets      string // base-nets: network names separated by spaces or commas
	NewNets       string // new-nets
	Info          string // run-info

	StopRule string // stop_rule: sprt, spsa or numgames
	Bounds   string // bounds: a sprtBounds key
	Elo0     string // sprt_elo0
	Elo1     string // sprt_elo1
	EloModel string // elo_model
	NumGames string // num-games

	SPSAA         string // spsa_A: the A ratio
	SPSAAlpha     string // spsa_alpha
	SPSAGamma     string // spsa_gamma
	SPSARawParams string // spsa_raw_params

	TC         string // tc
	Odds       bool   // odds: the test engine plays new_tc
	NewTC      string // new_tc
	Threads    string // threads
	Priority   string // priority
	Throughput string // throughput
	Book       string // book
	BookDepth  string // book-depth

	AutoPurge      bool   // auto-purge
	NoAdjudication bool   // adjudication: checked disables adjudication
	ArchFilterOn   bool   // checkbox-arch-filter
	ArchFilter     string // arch-filter
	CompilerOn     bool   // checkbox-compiler
	Compiler       string // compiler

	RescheduledFrom string // rescheduled_from (hidden)
}

// defaultRunForm is the form of a new test: the STC preset with SPRT standard bounds.
func defaultRunForm(u *rundb.User) runForm {
	f := runForm{
		TestsRepo: u.TestsRepo, BaseBranch: "master",
		BaseOptions: "Hash=16", NewOptions: "Hash=16",
		StopRule: stopSPRT, EloModel: stats.ModelNormalized,
		NumGames: strconv.Itoa(defaultFormGames),
		SPSAA:    runFormFloat(stats.DefaultSPSAARatio), SPSAAlpha: runFormFloat(stats.DefaultSPSAAlpha),
		SPSAGamma: runFormFloat(stats.DefaultSPSAGamma),
		Priority:  "0", Book: scheduler.DefaultBook, BookDepth: scheduler.DefaultBookDepth,
	}
	stc, _ := findPreset("stc")
	f.applyPreset(stc, false)
	return f
}

// runFormFrom prefills the form from an existing run, to submit it again.
func runFormFrom(r *rundb.Run) runForm {
	a := r.Args
	f := runForm{
		TestsRepo: a.TestsRepo, BaseBranch: a.BaseTag, TestBranch: a.NewTag,
		ResolvedBase: a.ResolvedBase, ResolvedNew: a.ResolvedNew, MsgBase: a.MsgBase, MsgNew: a.MsgNew,
		BaseSignature: a.BaseSignature, TestSignature: a.NewSignature,
		BaseOptions: a.BaseOptions, NewOptions: a.NewOptions,
		BaseNets: strings.Join(a.BaseNets, " "), NewNets: strings.Join(a.NewNets, " "),
		Info:     strings.TrimPrefix(a.Info, "LTC: "), // the scheduler adds it again
		StopRule: stopNumGames, Bounds: customBounds, Elo0: "0", Elo1: "2",
		EloModel: stats.ModelNormalized, NumGames: strconv.Itoa(a.NumGames),
		SPSAA: runFormFloat(stats.DefaultSPSAARatio), SPSAAlpha: runFormFloat(stats.DefaultSPSAAlpha),
		SPSAGamma: runFormFloat(stats.DefaultSPSAGamma),
		TC:        a.TC, NewTC: a.NewTC, Odds: a.NewTC != "" && a.NewTC != a.TC,
		Threads: strconv.Itoa(a.Threads), Priority: runFormFloat(a.Priority), Throughput: runFormFloat(a.Throughput),
		Book: a.Book, BookDepth: a.BookDepth,
		AutoPurge: a.AutoPurge, NoAdjudication: !a.Adjudication,
		ArchFilterOn: a.ArchFilter != "", ArchFilter: a.ArchFilter,
		CompilerOn: a.Compiler != "", Compiler: a.Compiler,
		RescheduledFrom: r.ID.Hex(),
	}
	if f.NewTC == "" {
		f.NewTC = f.TC
	}
	switch {
	case a.SPRT != nil:
		f.StopRule = stopSPRT
		f.Elo0, f.Elo1 = runFormFloat(a.SPRT.Elo0), runFormFloat(a.SPRT.Elo1)
		f.Bounds = boundsOf(a.SPRT, r.TCBase >= rundb.LTCMinTCBase)
		f.NumGames = strconv.Itoa(defaultFormGames)
	case a.SPSA != nil:
		f.StopRule = stopSPSA
		// The stored A is in iterations; the form asks for a fraction of them (num_games/2).
		if a.NumGames > 0 {
			f.SPSAA = runFormFloat(float64(int64(1000*2*a.SPSA.A/float64(a.NumGames)+0.5)) / 1000)
		}
		f.SPSAAlpha, f.SPSAGamma = runFormFloat(a.SPSA.Alpha), runFormFloat(a.SPSA.Gamma)
		f.SPSARawParams = a.SPSA.RawParams
	}
	return f
}

var presetHashOption = regexp.MustCompile(`(^|\s)Hash=[0-9]+(\s|$)`)

// applyPreset sets what preset p decides. A progression test also names the engines, unless
// the form resubmits an existing run, whose engines stay.
func (f *runForm) applyPreset(p runPreset, rerun bool) {
	f.TC, f.NewTC = p.TC, p.TC
	f.Threads = strconv.Itoa(p.Threads)
	f.Throughput = strconv.Itoa(p.Throughput)
	f.BaseOptions = withHash(f.BaseOptions, p.Hash)
	f.NewOptions = withHash(f.NewOptions, p.Hash)
	f.StopRule = p.StopRule
	if b, ok := findBounds(p.Bounds); ok {
		f.Bounds, f.Elo0, f.Elo1 = b.Key, runFormFloat(b.Elo0), runFormFloat(b.Elo1)
	}
	if p.Games > 0 {
		f.NumGames = strconv.Itoa(p.Games)
	}
	if rerun || p.TestBranch == "" {
		return
	}
	f.TestBranch, f.BaseBranch = p.TestBranch, p.BaseBranch
	f.ResolvedBase, f.BaseSignature = p.ResolvedBase, p.BaseSignature
	if f.Info == "" {
		f.Info = p.Info
	}
}

// withHash sets the Hash option of an option string, keeping the others.
func withHash(options string, hash int) string {
	rest := strings.Fields(presetHashOption.ReplaceAllString(options, " "))
	return strings.Join(append([]string{"Hash=" + strconv.Itoa(hash)}, rest...), " ")
}

// runFormFloat writes x the shortest way: 2, 0.5, -1.75.
func runFormFloat(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// readRunForm reads a submitted form.
func readRunForm(c *gin.Context) runForm {
	v := func(name string) string { return strings.TrimSpace(c.PostForm(name)) }
	on := func(name string) bool { return c.PostForm(name) != "" }
	return runForm{
		TestsRepo: v("tests-repo"), BaseBranch: v("base-branch"), TestBranch: v("test-branch"),
		ResolvedBase: v("resolved_base"), ResolvedNew: v("resolved_new"),
		MsgBase: c.PostForm("msg_base"), MsgNew: c.PostForm("msg_new"),
		BaseSignature: v("base-signature"), TestSignature: v("test-signature"),
		BaseOptions: c.PostForm("base-options"), NewOptions: c.PostForm("new-options"),
		BaseNets: v("base-nets"), NewNets: v("new-nets"),
		Info:     c.PostForm("run-info"),
		StopRule: v("stop_rule"), Bounds: v("bounds"), Elo0: v("sprt_elo0"), Elo1: v("sprt_elo1"),
		EloModel: v("elo_model"), NumGames: v("num-games"),
		SPSAA: v("spsa_A"), SPSAAlpha: v("spsa_alpha"), SPSAGamma: v("spsa_gamma"),
		SPSARawParams: c.PostForm("spsa_raw_params"),
		TC:            v("tc"), Odds: on("odds"), NewTC: v("new_tc"),
		Threads: v("threads"), Priority: v("priority"), Throughput: v("throughput"),
		Book: v("book"), BookDepth: v("book-depth"),
		AutoPurge: on("auto-purge"), NoAdjudication: on("adjudication"),
		ArchFilterOn: on("checkbox-arch-filter"), ArchFilter: v("arch-filter"),
		CompilerOn: on("checkbox-compiler"), Compiler: v("compiler"),
		RescheduledFrom: v("rescheduled_from"),
	}
}

// formErrors are the messages of a refused form, keyed by form field name.
type formErrors map[string]string

// add keeps the first message of a field.
func (e formErrors) add(field, msg string) {
	if _, ok := e[field]; !ok {
		e[field] = msg
	}
}

// request turns the form into the scheduler's request. Values that are not even numbers are
// reported here, by form field name; the scheduler judges the rest. A preset bounds choice
// overrides the typed Elo0 and Elo1 (and writes them back into f), so the bounds menu works
// without JavaScript.
func (f *runForm) request() (protocol.RunRequest, formErrors) {
	errs := formErrors{}
	intField := func(name, value string, required bool) (int, bool) {
		if value == "" {
			if required {
				errs.add(name, "missing: give a whole number")
			}
			return 0, false
		}
		n, err := strconv.Atoi(value)
		if err != nil {
			errs.add(name, fmt.Sprintf("%q is not a whole number", value))
			return 0, false
		}
		return n, true
	}
	floatField := func(name, value string) *float64 {
		if value == "" {
			return nil
		}
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			errs.add(name, fmt.Sprintf("%q is not a number", value))
			return nil
		}
		return &x
	}

	req := protocol.RunRequest{
		BaseTag: f.BaseBranch, NewTag: f.TestBranch,
		ResolvedBase: f.ResolvedBase, ResolvedNew: f.ResolvedNew,
		MsgBase: f.MsgBase, MsgNew: f.MsgNew,
		TC: f.TC, Book: f.Book, BookDepth: f.BookDepth,
		BaseOptions: f.BaseOptions, NewOptions: f.NewOptions,
		BaseSignature: f.BaseSignature, NewSignature: f.TestSignature,
		BaseNets: splitNets(f.BaseNets), NewNets: splitNets(f.NewNets),
		TestsRepo: f.TestsRepo, Info: strings.TrimSpace(f.Info),
		AutoPurge: f.AutoPurge,
	}
	adjudication := !f.NoAdjudication
	req.Adjudication = &adjudication
	if f.Odds {
		req.NewTC = f.NewTC
		if req.NewTC == "" {
			errs.add("new_tc", "missing: give the test engine's time control, or untick time odds")
		}
	}
	if f.ArchFilterOn {
		req.ArchFilter = f.ArchFilter
		if req.ArchFilter == "" {
			errs.add("arch-filter", "missing: give a regular expression, or untick the arch filter")
		}
	}
	if f.CompilerOn {
		req.Compiler = f.Compiler
	}
	if n, ok := intField("threads", f.Threads, true); ok {
		req.Threads = &n
	}
	if n, ok := intField("priority", f.Priority, false); ok {
		req.Priority = n
	}
	if n, ok := intField("throughput", f.Throughput, false); ok {
		req.Throughput = &n
	}
	if f.RescheduledFrom != "" {
		if _, err := rundb.ParseObjectID(f.RescheduledFrom); err != nil {
			errs.add("rescheduled_from", "not a run id: open the form again from the run's page")
		}
	}

	switch f.StopRule {
	case stopSPRT:
		b, ok := findBounds(f.Bounds)
		switch {
		case !ok:
			errs.add("bounds", "choose SPRT bounds")
		case b.Key != customBounds:
			f.Elo0, f.Elo1 = runFormFloat(b.Elo0), runFormFloat(b.Elo1)
		}
		req.SPRT = &protocol.SPRTRequest{
			Elo0: floatField("sprt_elo0", f.Elo0), Elo1: floatField("sprt_elo1", f.Elo1),
			EloModel: f.EloModel,
		}
	case stopSPSA:
		spsa := &protocol.SPSARequest{
			ARatio: floatField("spsa_A", f.SPSAA), Alpha: floatField("spsa_alpha", f.SPSAAlpha),
			Gamma: floatField("spsa_gamma", f.SPSAGamma), RawParams: f.SPSARawParams,
		}
		spsa.NumGames, _ = intField("num-games", f.NumGames, true)
		req.SPSA = spsa
	case stopNumGames:
		req.NumGames, _ = intField("num-games", f.NumGames, true)
	default:
		errs.add("stop_rule", "choose a stop rule: SPRT, SPSA or a fixed number of games")
	}
	return req, errs
}

// splitNets reads a list of network names separated by spaces or commas.
func splitNets(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
}

// requestFields maps the scheduler's field names (RunRequest's JSON paths) to the form's.
var requestFields = map[string]string{
	"base_tag": "base-branch", "new_tag": "test-branch",
	"resolved_base": "resolved_base", "resolved_new": "resolved_new",
	"tc": "tc", "new_tc": "new_tc", "book": "book", "book_depth": "book-depth", "threads": "threads",
	"base_options": "base-options", "new_options": "new-options",
	"base_signature": "base-signature", "new_signature": "test-signature",
	"base_nets": "base-nets", "new_nets": "new-nets",
	"tests_repo": "tests-repo", "info": "run-info",
	"throughput": "throughput", "priority": "priority",
	"arch_filter": "arch-filter", "compiler": "compiler",
	"num_games": "num-games", "spsa.num_games": "num-games",
	"sprt.elo0": "sprt_elo0", "sprt.elo1": "sprt_elo1", "sprt.elo_model": "elo_model",
	"spsa": "stop_rule", "spsa.A": "spsa_A", "spsa.A_ratio": "spsa_A",
	"spsa.alpha": "spsa_alpha", "spsa.gamma": "spsa_gamma", "spsa.raw_params": "spsa_raw_params",
}

// formGeneralError is the key of a message that belongs to no field of the form.
const formGeneralError = "form"

func formField(requestField string) string {
	if f, ok := requestFields[requestField]; ok {
		return f
	}
	return formGeneralError
}

// maxFieldChecks bounds the rounds of checkRunRequest; the request has fewer fields.
const maxFieldChecks = 40

// checkRunRequest finds every invalid field of req, not just the first: the scheduler's
// validation stops at the first bad field, so each round replaces that field by a valid
// stand-in and asks again. The stand-ins are never stored; the form is submitted only once
// every field is right.
func checkRunRequest(req protocol.RunRequest, username string, now time.Time) formErrors {
	errs := formErrors{}
	for range maxFieldChecks {
		_, err := scheduler.BuildRun(req, username, now)
		var fe *scheduler.FieldError
		if !errors.As(err, &fe) {
			break
		}
		errs.add(formField(fe.Field), fe.Message)
		if !standIn(&req, fe.Field) {
			break
		}
	}
	return errs
}

// withRepositoryStandIns is req with valid stand-ins for what PrepareRun would have read from
// the repository (commits, signatures, description), so that checkRunRequest reports the other
// fields of a form whose repository or branches were refused. Never stored.
func withRepositoryStandIns(req protocol.RunRequest) protocol.RunRequest {
	for _, f := range []struct {
		field   string
		missing bool
	}{
		{"resolved_new", req.ResolvedNew == ""}, {"resolved_base", req.ResolvedBase == ""},
		{"new_signature", req.NewSignature == ""}, {"base_signature", req.BaseSignature == ""},
		{"info", strings.TrimSpace(req.Info) == ""},
	} {
		if f.missing {
			standIn(&req, f.field)
		}
	}
	return req
}

// standIn replaces the named field of req by a valid value and reports whether it could. Nested
// requests are copied first: req shares them with the caller.
func standIn(req *protocol.RunRequest, field string) bool {
	sha := strings.Repeat("0", 40)
	switch field {
	case "base_tag":
		req.BaseTag = "base"
	case "new_tag":
		req.NewTag = "test"
	case "resolved_base":
		req.ResolvedBase = sha
	case "resolved_new":
		req.ResolvedNew = sha
	case "tc":
		req.TC = "10+0.1"
	case "new_tc":
		req.NewTC = ""
	case "book":
		req.Book = ""
	case "book_depth":
		req.BookDepth = ""
	case "threads":
		req.Threads = nil
	case "base_options":
		req.BaseOptions = "Hash=16"
	case "new_options":
		req.NewOptions = "Hash=16"
	case "base_signature":
		req.BaseSignature = "1"
	case "new_signature":
		req.NewSignature = "1"
	case "base_nets":
		req.BaseNets = nil
	case "new_nets":
		req.NewNets = nil
	case "tests_repo":
		req.TestsRepo = "https://github.com/official-stockfish/Stockfish"
	case "info":
		req.Info = "test"
	case "throughput":
		req.Throughput = nil
	case "arch_filter":
		req.ArchFilter = ""
	case "compiler":
		req.Compiler = ""
	case "num_games":
		req.NumGames = scheduler.MinGames
		if req.SPRT != nil || req.SPSA != nil {
			req.NumGames = 0
		}
	case "sprt.elo0", "sprt.elo1", "sprt.elo_model":
		if req.SPRT == nil {
			return false
		}
		s := *req.SPRT
		zero, one := 0.0, 1.0
		switch field {
		case "sprt.elo_model":
			s.EloModel = ""
		default:
			s.Elo0, s.Elo1 = &zero, &one
		}
		req.SPRT = &s
	case "spsa.num_games", "spsa.A", "spsa.A_ratio", "spsa.alpha", "spsa.gamma", "spsa.raw_params":
		if req.SPSA == nil {
			return false
		}
		s := *req.SPSA
		switch field {
		case "spsa.num_games":
			s.NumGames = scheduler.MinGames
		case "spsa.A", "spsa.A_ratio":
			s.A, s.ARatio = nil, nil
		case "spsa.alpha":
			s.Alpha = nil
		case "spsa.gamma":
			s.Gamma = nil
		case "spsa.raw_params":
			s.RawParams = "param,1,0,2,1,0.002"
		}
		req.SPSA = &s
	default:
		return false
	}
	return true
}

// runFormData is the new-test page.
type runFormData struct {
	ui.Page
	Form runForm
	// Errors holds the message of each wrong field, by form field name; ErrorList repeats
	// them in the form's order, for the summary at the top.
	Errors    formErrors
	ErrorList []formFieldMessage
	Presets   []presetLink
	Bounds    []boundsPreset
	Compilers []string
	// Throughputs are the suggested throughputs.
	Throughputs []int
	// Rerun is the run being submitted again, or nil.
	Rerun *rundb.Run
	// Action is where the form posts, with the rerun's id kept.
	Action    string
	PTVersion string
	PTBaseSHA string
	MinGames  int
	GamesStep int
	MaxGames  int
	SPRTGames int
	// Books are the books this server holds, which a test may use (none: any name is taken).
	Books []books.Book
}

// presetLink is a preset as the page shows it: a link that prefills the form on the server, or
// at once in the page with JavaScript.
type presetLink struct {
	runPreset
	URL     string
	Current bool
	Elo0    string
	Elo1    string
}

// formFieldMessage is one line of the error summary.
type formFieldMessage struct {
	Field, Label, Message string
}

// formFieldLabels name the form's fields for people, in the form's order.
var formFieldLabels = []struct{ field, label string }{
	{"tests-repo", "Test repository"}, {"test-branch", "Test branch"}, {"resolved_new", "Test commit"},
	{"base-branch", "Base branch"}, {"resolved_base", "Base commit"},
	{"test-signature", "Test signature"}, {"base-signature", "Base signature"},
	{"new-options", "Test options"}, {"base-options", "Base options"},
	{"new-nets", "Test networks"}, {"base-nets", "Base networks"}, {"run-info", "Info"},
	{"stop_rule", "Stop rule"}, {"bounds", "SPRT bounds"}, {"sprt_elo0", "Elo0"}, {"sprt_elo1", "Elo1"},
	{"elo_model", "Elo model"}, {"num-games", "Number of games"},
	{"spsa_A", "SPSA A ratio"}, {"spsa_alpha", "SPSA alpha"}, {"spsa_gamma", "SPSA gamma"},
	{"spsa_raw_params", "SPSA parameters"},
	{"tc", "Time control"}, {"new_tc", "Test time control"}, {"threads", "Threads"},
	{"priority", "Priority"}, {"throughput", "Throughput"}, {"book", "Book"}, {"book-depth", "Book depth"},
	{"arch-filter", "Arch filter"}, {"compiler", "Compiler"}, {"rescheduled_from", "Rescheduled from"},
	{formGeneralError, "Submission"},
}

func (s *Server) runFormPage(c *gin.Context, f runForm, errs formErrors, rerun *rundb.Run, preset string) runFormData {
	d := runFormData{
		Page: s.ui.Page(c, "New test"), Form: f, Errors: errs, Bounds: sprtBounds,
		Compilers: formCompilers, Throughputs: formThroughputs, Rerun: rerun, Action: "/tests/run",
		PTVersion: ptVersion, PTBaseSHA: ptBaseSHA,
		MinGames: scheduler.MinGames, GamesStep: scheduler.GamesStep, MaxGames: scheduler.MaxGames,
		SPRTGames: scheduler.SPRTMaxGames,
	}
	if s.deps.Books != nil {
		d.Books = s.deps.Books.List()
	}
	if errs == nil {
		d.Errors = formErrors{}
	}
	for _, l := range formFieldLabels {
		if msg, ok := d.Errors[l.field]; ok {
			d.ErrorList = append(d.ErrorList, formFieldMessage{Field: l.field, Label: l.label, Message: msg})
		}
	}
	if rerun != nil {
		d.Title = "Reschedule test"
		d.Action = "/tests/run?id=" + rerun.ID.Hex()
	}
	for _, p := range runPresets {
		q := url.Values{"preset": {p.Key}}
		if rerun != nil {
			q.Set("id", rerun.ID.Hex())
		}
		l := presetLink{runPreset: p, URL: "/tests/run?" + q.Encode(), Current: p.Key == preset}
		if b, ok := findBounds(p.Bounds); ok {
			l.Elo0, l.Elo1 = runFormFloat(b.Elo0), runFormFloat(b.Elo1)
		}
		d.Presets = append(d.Presets, l)
	}
	return d
}

// NewRunPage shows the new-test form, prefilled from ?id=<run> (to submit a run again) and
// ?preset=<key> (a test type), for logged-in users.
func (s *Server) NewRunPage(c *gin.Context) {
	u, ok := s.ui.RequireUser(c)
	if !ok {
		return
	}
	f := defaultRunForm(u)
	if s.deps.Books != nil {
		f.Book = s.deps.Books.Default()
	}
	var rerun *rundb.Run
	if raw := c.Query("id"); raw != "" {
		if rerun, ok = s.formRun(c, raw); !ok {
			return
		}
		f = runFormFrom(rerun)
	}
	preset := ""
	if key := c.Query("preset"); key != "" {
		p, ok := findPreset(key)
		if !ok {
			s.ui.PageError(c, http.StatusBadRequest, "There is no test type "+strconv.Quote(key)+".")
			return
		}
		f.applyPreset(p, rerun != nil)
		preset = p.Key
	} else if rerun == nil {
		preset = "stc"
	}
	s.ui.Render(c, http.StatusOK, "run_form", s.runFormPage(c, f, nil, rerun, preset))
}

// NewRunSubmit creates the run the form describes, unapproved. A refused form comes back with
// status 400, as typed, each wrong field marked; nothing is stored.
func (s *Server) NewRunSubmit(c *gin.Context) {
	u, ok := s.ui.RequireUser(c)
	if !ok {
		return
	}
	if !s.ui.RequirePrimary(c) {
		return
	}
	f := readRunForm(c)
	refuse := func(errs formErrors) {
		s.ui.Render(c, http.StatusBadRequest, "run_form", s.runFormPage(c, f, errs, s.rescheduledRun(c, f.RescheduledFrom), ""))
	}
	req, errs := f.request()
	req.RescheduledFrom = f.RescheduledFrom
	// The branches are read from the repository first (this may fetch it, so outside the
	// database's tokens); if that fails, the rest of the form is still checked, with stand-ins
	// for what the repository would have given.
	prepared, err := s.ui.Scheduler().PrepareRun(c.Request.Context(), req)
	var fe *scheduler.FieldError
	switch {
	case errors.As(err, &fe):
		errs.add(formField(fe.Field), fe.Message)
		prepared = withRepositoryStandIns(req)
	case err != nil:
		s.ui.Error(c, err)
		return
	}
	for field, msg := range checkRunRequest(prepared, u.Username, time.Now()) {
		errs.add(field, msg)
	}
	if len(errs) > 0 {
		refuse(errs)
		return
	}
	var run *rundb.Run
	err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		run, err = s.ui.Scheduler().CreateRun(ctx, prepared, u.Username)
		return err
	})
	switch {
	case errors.As(err, &fe):
		refuse(formErrors{formField(fe.Field): fe.Message})
		return
	case err != nil:
		s.ui.Error(c, err)
		return
	}
	s.ui.Flash(c, "success", "Test submitted; an approver must approve it.")
	s.ui.Redirect(c, "/tests/view/"+run.ID.Hex()+"?follow=1")
}

// rescheduledRun reads the run a refused form was rescheduled from (its id in from), only to
// show the page as a reschedule again: nil when the form names none, or one that cannot be read
// (a run gone since is no reason to refuse).
func (s *Server) rescheduledRun(c *gin.Context, from string) *rundb.Run {
	if from == "" {
		return nil
	}
	id, err := rundb.ParseObjectID(from)
	if err != nil {
		return nil
	}
	var rerun *rundb.Run
	_ = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		r, err := s.ui.Runs().Snapshot(ctx, id)
		if err == nil {
			rerun = r
		}
		return nil
	})
	return rerun
}
