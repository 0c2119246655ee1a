package protocol

// RunRequest is what a user submits to create a run: fishtest's run arguments, as the new-test
// form and POST /api/create_run carry them. The zero value of an optional field means "the
// default": new_tc is tc, book UHO_Lichess_4852_v1.epd at depth 8, threads 1, throughput 100,
// priority 0, adjudication on, auto-purge off, no arch filter or compiler requirement.
//
// Exactly one stop rule is given: NumGames (a fixed number of games), SPRT, or SPSA (whose game
// count is SPSA.NumGames).
type RunRequest struct {
	BaseTag      string `json:"base_tag"`
	NewTag       string `json:"new_tag"`
	ResolvedBase string `json:"resolved_base"`
	ResolvedNew  string `json:"resolved_new"`
	MsgBase      string `json:"msg_base,omitempty"`
	MsgNew       string `json:"msg_new,omitempty"`
	// RescheduledFrom is the run this one repeats (the web form's reschedule), if any.
	RescheduledFrom string       `json:"rescheduled_from,omitempty"`
	TC              string       `json:"tc"`
	NewTC           string       `json:"new_tc,omitempty"`
	Book            string       `json:"book,omitempty"`
	BookDepth       string       `json:"book_depth,omitempty"`
	Threads         *int         `json:"threads,omitempty"`
	BaseOptions     string       `json:"base_options"`
	NewOptions      string       `json:"new_options"`
	BaseSignature   string       `json:"base_signature"`
	NewSignature    string       `json:"new_signature"`
	BaseNets        []string     `json:"base_nets,omitempty"`
	NewNets         []string     `json:"new_nets,omitempty"`
	TestsRepo       string       `json:"tests_repo"`
	Info            string       `json:"info"`
	Priority        int          `json:"priority,omitempty"`
	Throughput      *int         `json:"throughput,omitempty"`
	AutoPurge       bool         `json:"auto_purge,omitempty"`
	Adjudication    *bool        `json:"adjudication,omitempty"`
	ArchFilter      string       `json:"arch_filter,omitempty"`
	Compiler        string       `json:"compiler,omitempty"`
	NumGames        int          `json:"num_games,omitempty"`
	SPRT            *SPRTRequest `json:"sprt,omitempty"`
	SPSA            *SPSARequest `json:"spsa,omitempty"`
}

// SPRTRequest asks for a sequential test between two normalized-Elo bounds.
type SPRTRequest struct {
	Elo0 *float64 `json:"elo0"`
	Elo1 *float64 `json:"elo1"`
	// EloModel must be "normalized" (the default), the only model of new runs.
	EloModel string `json:"elo_model,omitempty"`
}

// SPSARequest asks for a classic SPSA tuning run of NumGames games. The stability constant is
// given either as ARatio, a fraction of the iterations (the form's field, default 0.1), or as A,
// a whole number of iterations (the stored run's args.spsa.A).
type SPSARequest struct {
	ARatio    *float64 `json:"A_ratio,omitempty"`
	A         *float64 `json:"A,omitempty"`
	Alpha     *float64 `json:"alpha,omitempty"`
	Gamma     *float64 `json:"gamma,omitempty"`
	RawParams string   `json:"raw_params"`
	NumGames  int      `json:"num_games"`
}
