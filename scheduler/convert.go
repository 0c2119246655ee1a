package scheduler

import (
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/stats"
)

// The stored run and the statistics have twin types, so that stats stays free of storage
// concerns; these functions carry values across.

// ToStatsResults gives the statistics a run's (or task's) stored results: the game counts and
// the pentanomial, which it shares with r.
func ToStatsResults(r rundb.Results) stats.Results {
	return stats.Results{Wins: r.Wins, Losses: r.Losses, Draws: r.Draws, Pentanomial: r.Pentanomial}
}

// toStatsSPRT copies a stored SPRT into the statistics' type, overshoot data included. It is a
// value, so that update_task's SPRT update need not allocate it.
func toStatsSPRT(s *rundb.SPRT) stats.SPRT {
	out := stats.SPRT{
		Alpha: s.Alpha, Beta: s.Beta, Elo0: s.Elo0, Elo1: s.Elo1, EloModel: s.EloModel, State: s.State,
		LLR: s.LLR, BatchSize: s.BatchSize, LowerBound: s.LowerBound, UpperBound: s.UpperBound,
		LostSamples: s.LostSamples, IllegalUpdate: s.IllegalUpdate,
	}
	if o := s.Overshoot; o != nil {
		out.Overshoot = &stats.Overshoot{LastUpdate: o.LastUpdate, SkippedUpdates: o.SkippedUpdates,
			Ref0: o.Ref0, M0: o.M0, Sq0: o.Sq0, Ref1: o.Ref1, M1: o.M1, Sq1: o.Sq1}
	}
	return out
}

// applySPRT copies an updated stats.SPRT back into the stored one.
func applySPRT(dst *rundb.SPRT, s *stats.SPRT) {
	dst.State, dst.LLR, dst.LostSamples, dst.IllegalUpdate = s.State, s.LLR, s.LostSamples, s.IllegalUpdate
	if o := s.Overshoot; o != nil {
		dst.Overshoot = &rundb.Overshoot{LastUpdate: o.LastUpdate, SkippedUpdates: o.SkippedUpdates,
			Ref0: o.Ref0, M0: o.M0, Sq0: o.Sq0, Ref1: o.Ref1, M1: o.M1, Sq1: o.Sq1}
	} else {
		dst.Overshoot = nil
	}
}

// updateSPRT recomputes a run's SPRT from its results; the state is left as it was if the LLR
// cannot be computed.
func updateSPRT(r *rundb.Run) error {
	if r.Args.SPRT == nil {
		return nil
	}
	s := toStatsSPRT(r.Args.SPRT)
	if err := s.Update(ToStatsResults(r.Results)); err != nil {
		return err
	}
	applySPRT(r.Args.SPRT, &s)
	return nil
}

// toStatsSPSA copies a stored SPSA into the statistics' state: its parameters and history.
func toStatsSPSA(s *rundb.SPSA) *stats.SPSAState {
	out := &stats.SPSAState{A: s.A, Alpha: s.Alpha, Gamma: s.Gamma, RawParams: s.RawParams,
		Iter: s.Iter, NumIter: s.NumIter, Params: make([]stats.SPSAParam, len(s.Params))}
	for i, p := range s.Params {
		out.Params[i] = stats.SPSAParam{Name: p.Name, Start: p.Start, Min: p.Min, Max: p.Max,
			CEnd: p.CEnd, REnd: p.REnd, C: p.C, AEnd: p.AEnd, A: p.A, Theta: p.Theta}
	}
	out.History = make([][]stats.SPSASample, len(s.ParamHistory))
	for i, row := range s.ParamHistory {
		out.History[i] = make([]stats.SPSASample, len(row))
		for j, h := range row {
			out.History[i][j] = stats.SPSASample{Theta: h.Theta, R: h.R, C: h.C}
		}
	}
	return out
}

// applySPSA copies the parts an SPSA update changes (iteration, thetas, history) back.
func applySPSA(dst *rundb.SPSA, s *stats.SPSAState) {
	dst.Iter = s.Iter
	for i := range dst.Params {
		dst.Params[i].Theta = s.Params[i].Theta
	}
	for len(dst.ParamHistory) < len(s.History) {
		row := s.History[len(dst.ParamHistory)]
		out := make([]rundb.SPSAHistoryPoint, len(row))
		for j, h := range row {
			out[j] = rundb.SPSAHistoryPoint{Theta: h.Theta, R: h.R, C: h.C}
		}
		dst.ParamHistory = append(dst.ParamHistory, out)
	}
}
