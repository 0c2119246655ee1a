package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// durabilityOrder is the journal setting of each leg of the durability scenario: off, on, on,
// off, so that a drift over the bench run (a warming machine, a neighbour's load) weighs on both
// sides alike.
var durabilityOrder = []bool{false, true, true, false}

// durabilityLegs are the report's sections of the durability scenario's legs.
func durabilityLegs() []string {
	legs := make([]string, len(durabilityOrder))
	for i, on := range durabilityOrder {
		legs[i] = durabilityLeg(i, on)
	}
	return legs
}

func durabilityLeg(i int, on bool) string {
	if on {
		return fmt.Sprintf("durability-%d-journal-on", i+1)
	}
	return fmt.Sprintf("durability-%d-journal-off", i+1)
}

// durabilityFigures are the steady figures whose journal-on to journal-off ratio the durability
// scenario reports.
var durabilityFigures = []string{"steady: update_task p99", "steady: beat p99", "steady: request_task p99",
	"steady: update_task p50", "steady: beat p50", "steady: server CPU per wall second"}

// benchDurability runs the steady scenario once per leg of durabilityOrder, with the journal
// off or on, and reports each figure's ratio: the mean of the legs with the journal over the
// mean of those without. The journal's target is the issue's: update_task p99 at most 1.5 times
// what it is without; beat, which writes no record, should not move beyond the noise.
func benchDurability(ctx context.Context, set benchSettings, sc *scenarioReport, rep *benchReport, stdout, stderr io.Writer) error {
	updateRatio, beatRatio := (*float64)(nil), (*float64)(nil)
	defer func() {
		sc.target("update_task p99, journal on / off", updateRatio, "x", "<= 1.5", func(v float64) bool { return v <= 1.5 })
		sc.target("beat p99, journal on / off", beatRatio, "x", "<= 1.5", func(v float64) bool { return v <= 1.5 })
	}()
	legs := make([]*scenarioReport, len(durabilityOrder))
	for i, on := range durabilityOrder {
		leg := &scenarioReport{}
		legs[i] = leg
		rep.Scenarios[durabilityLeg(i, on)] = leg
		fmt.Fprintf(stdout, "bench: durability leg %d of %d, journal %v...\n", i+1, len(durabilityOrder), on)
		lset := set
		lset.profiles = ""
		lset.serveArgs = append(append([]string(nil), set.serveArgs...), fmt.Sprintf("--journal=%v", on))
		if err := benchSteady(ctx, lset, leg, stderr); err != nil {
			leg.Error = err.Error()
			return fmt.Errorf("leg %d (journal %v): %w", i+1, on, err)
		}
	}
	for _, name := range durabilityFigures {
		var on, off []float64
		for i, leg := range legs {
			if v, ok := leg.value(name); ok {
				if durabilityOrder[i] {
					on = append(on, v)
				} else {
					off = append(off, v)
				}
			}
		}
		if len(on) == 0 || len(off) == 0 || mean(off) <= 0 {
			continue
		}
		short := strings.TrimPrefix(name, "steady: ")
		sc.figure("journal off: "+short+" (mean of legs)", mean(off), unitOf(legs, name))
		sc.figure("journal on: "+short+" (mean of legs)", mean(on), unitOf(legs, name))
		r := mean(on) / mean(off)
		sc.figure("ratio on / off: "+short, r, "x")
		switch name {
		case "steady: update_task p99":
			updateRatio = ref(r)
		case "steady: beat p99":
			beatRatio = ref(r)
		}
	}
	for _, name := range []string{"steady: journal batch mean duration", "steady: journal records per batch (mean)", "steady: journal batch p99 (bucket upper bound)"} {
		var vs []float64
		for i, leg := range legs {
			if v, ok := leg.value(name); ok && durabilityOrder[i] {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			sc.figure(strings.TrimPrefix(name, "steady: ")+" (mean of the journal legs)", mean(vs), unitOf(legs, name))
		}
	}
	return nil
}

func mean(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// unitOf is the unit the legs report figure name in.
func unitOf(legs []*scenarioReport, name string) string {
	for _, leg := range legs {
		for _, f := range leg.Figures {
			if f.Name == name {
				return f.Unit
			}
		}
	}
	return ""
}
