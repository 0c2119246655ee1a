package protocol

// The replies of the JSON API beyond the worker's calls: what a person's tools (fishtest's
// scripts, the web UI's fetches, load balancers) read. Errors there are ErrorReply too.

// CreateRunReply is the reply to /api/create_run: the new run's id.
type CreateRunReply struct {
	RunID    string  `json:"run_id"`
	Duration float64 `json:"duration"`
}

// ApproveRunReply is the reply to /api/approve_run.
type ApproveRunReply struct {
	Approved bool    `json:"approved"`
	Duration float64 `json:"duration"`
}

// StopRunReply is the reply to /api/user_stop_run.
type StopRunReply struct {
	Stopped  bool    `json:"stopped"`
	Duration float64 `json:"duration"`
}

// ModifyRunReply is the reply to /api/modify_run: the run's approval afterwards, whether the
// modification withdrew it (a non-approver raised the priority or throughput), and whether it
// restarted a finished run.
type ModifyRunReply struct {
	Approved   bool    `json:"approved"`
	Unapproved bool    `json:"unapproved"`
	Revived    bool    `json:"revived"`
	Duration   float64 `json:"duration"`
}

// EloReply is /api/calc_elo's estimate for fixed-games results: the Elo difference, its 95 %
// confidence interval and the likelihood of superiority, with fishtest's key names.
type EloReply struct {
	Elo float64    `json:"elo"`
	CI  [2]float64 `json:"ci"`
	LOS float64    `json:"LOS"`
}

// EmptyReply is {}: /api/get_elo's answer for a run without SPRT.
type EmptyReply struct{}

// RateLimitReply is /api/rate_limit's: Shoal makes no GitHub API calls, so it has no limit to
// report, and says so.
type RateLimitReply struct {
	Configured bool   `json:"configured"`
	Message    string `json:"message"`
}

// LeaseInfo says which instance holds the primary's lease.
type LeaseInfo struct {
	Holder string  `json:"holder"`
	Epoch  int64   `json:"epoch"`
	AgeS   float64 `json:"age_s"`
}

// HealthReply is /healthz's (liveness): this instance's role and, when the database tells in
// time, the primary's lease.
type HealthReply struct {
	Status   string     `json:"status"`
	Version  string     `json:"version"`
	Role     string     `json:"role"`
	Instance string     `json:"instance,omitempty"`
	Primary  *LeaseInfo `json:"primary,omitempty"`
}

// ReadyReply is /readyz's (readiness) when this instance should get traffic.
type ReadyReply struct {
	Status   string `json:"status"`
	Role     string `json:"role"`
	Instance string `json:"instance"`
	Version  string `json:"version"`
}
