package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// reportedScenarios are the report's sections in order: the yardstick, the scenarios, and the
// baseline's run of steady (--baseline) before steady.
var reportedScenarios = []string{yardstickScenario, baselineScenario, "steady", steadyAgain, baselineAgain, "storm", "ceiling", "critical-section", "durability", "capacity", "reconnect"}

// legScenarios are the scenarios made of legs, each leg a section of its own named
// <scenario>-<n>-... (durabilityLeg, capacityStep).
var legScenarios = []string{"durability", "capacity"}

// reportOrder is the order of rep's sections: reportedScenarios, then the legs of each of
// legScenarios in turn, by number.
func reportOrder(rep *benchReport) []string {
	order := slices.Clone(reportedScenarios)
	for _, scenario := range legScenarios {
		var legs []string
		for name := range rep.Scenarios {
			if strings.HasPrefix(name, scenario+"-") {
				legs = append(legs, name)
			}
		}
		slices.SortFunc(legs, func(a, b string) int { return legNumber(a) - legNumber(b) })
		order = append(order, legs...)
	}
	return order
}

// legNumber is the n of a leg's name, <scenario>-<n>-... (durability-3-journal-on,
// capacity-2-equivalent-200000).
func legNumber(name string) int {
	_, rest, _ := strings.Cut(name, "-")
	n, _ := strconv.Atoi(strings.Split(rest, "-")[0])
	return n
}

// benchReport is report.json.
type benchReport struct {
	Started   time.Time                  `json:"started"`
	Elapsed   float64                    `json:"elapsed_s"`
	Machine   machineInfo                `json:"machine"`
	Commit    string                     `json:"commit"`
	Version   string                     `json:"version"`
	Settings  plan                       `json:"settings"`
	Scenarios map[string]*scenarioReport `json:"scenarios"`
}

// machineInfo describes where the bench ran.
type machineInfo struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	MemoryMiB int64  `json:"memory_mib"`
	OS        string `json:"os"`
	Go        string `json:"go"`
}

// scenarioReport is one scenario's settings, figures and targets. Skipped or Error say why
// figures are missing.
type scenarioReport struct {
	Skipped   string                          `json:"skipped,omitempty"`
	Error     string                          `json:"error,omitempty"`
	Figures   []benchFigure                   `json:"figures"`
	Endpoints map[string]fleet.EndpointReport `json:"endpoints,omitempty"`
	Targets   []benchTarget                   `json:"targets"`
	// Notes are what the scenario says of its figures as a whole (the capacity ladder: which
	// steps held, with their costs).
	Notes []string `json:"notes,omitempty"`
	// Limits says, for targets not met, what the figures and profiles show limits them.
	Limits  []string        `json:"limits,omitempty"`
	Profile *profileSummary `json:"profile,omitempty"`
	// FleetProfile is the bench process's own (the fleet's) CPU profile, over the same time.
	FleetProfile *profileSummary `json:"fleet_profile,omitempty"`
}

// readMachine describes this machine from /proc.
func readMachine() machineInfo {
	m := machineInfo{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMiB = kb / 1024
			}
		}
	}
	return m
}

// gitDescribe is `git describe --always --dirty` of Shoal's source tree above the working
// directory (or of the working directory), or "unknown".
func gitDescribe() string {
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = moduleRoot()
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// writeBenchReport writes report.json and report.md to dir: rep with each leg's profiles listing
// their top legProfileTop functions, and in report.json every figure, target and profile line
// on a line of its own, so that the report stays small enough to keep in docs/benchmarks and to
// read.
func writeBenchReport(dir string, rep *benchReport) error {
	rep = rep.withShortLegProfiles()
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(oneLineLeaves(data), '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(benchMarkdown(rep)), 0o644)
}

// legProfileTop is how many functions a leg's profile summaries list: a leg is one of several
// runs of a scenario (durability's, capacity's steps), and its profiles are on disk whole.
const legProfileTop = 10

// withShortLegProfiles is rep with the profile summaries of its legs (the sections of
// legScenarios named <scenario>-<n>-...) cut to legProfileTop functions; rep is unchanged.
func (rep *benchReport) withShortLegProfiles() *benchReport {
	short := *rep
	short.Scenarios = make(map[string]*scenarioReport, len(rep.Scenarios))
	for name, sc := range rep.Scenarios {
		if legNumber(name) > 0 && slices.ContainsFunc(legScenarios, func(s string) bool { return strings.HasPrefix(name, s+"-") }) {
			leg := *sc
			leg.Profile, leg.FleetProfile = sc.Profile.cut(legProfileTop), sc.FleetProfile.cut(legProfileTop)
			sc = &leg
		}
		short.Scenarios[name] = sc
	}
	return &short
}

// leafJSON matches, in indented JSON, an object or array that holds no other: its opening,
// its members across lines, and its closing. Its members hold no bracket (a string with one
// leaves its object as it is).
var leafJSON = regexp.MustCompile(`([{\[])\n\s*([^{}\[\]]*?)\n\s*([}\]])`)

// lineBreaks are the line breaks and indents between a leaf's members.
var lineBreaks = regexp.MustCompile(`\n\s*`)

// oneLineLeaves rewrites indented JSON so that each object or array holding no other sits on
// one line: a figure, a target or a profile's function per line.
func oneLineLeaves(data []byte) []byte {
	return leafJSON.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := leafJSON.FindSubmatch(m)
		inner := lineBreaks.ReplaceAll(sub[2], []byte(" "))
		return append(append(append([]byte{}, sub[1]...), inner...), sub[3]...)
	})
}

// benchMarkdown is the report for people.
func benchMarkdown(rep *benchReport) string {
	var b strings.Builder
	set := rep.Settings
	fmt.Fprintf(&b, "# Shoal benchmark report\n\n")
	fmt.Fprintf(&b, "Generated by `shoal-bench bench` on %s in %.0f s. Commit `%s`, shoal %s.\n\n", rep.Started.Format(time.RFC3339), rep.Elapsed, rep.Commit, rep.Version)
	fmt.Fprintf(&b, "**Machine:** %s, %d cores, %d MiB, %s, %s.\n\n", rep.Machine.CPU, rep.Machine.Cores, rep.Machine.MemoryMiB, rep.Machine.OS, rep.Machine.Go)
	fmt.Fprintf(&b, "**Settings:** database %s; time scale k = %g; steady %d workers (equivalent %d) on %d runs for %s; storms of %v workers, each arriving within a second; ceiling %d clients for %s each",
		set.Database, set.TimeScale, set.Workers, int(float64(set.Workers)*set.TimeScale), set.Runs, set.Duration,
		set.StormSizes, set.CeilingClients, set.CeilingDuration)
	if slices.Contains(set.Scenarios, "durability") {
		fmt.Fprintf(&b, "; durability %d rounds of four %s legs", set.DurabilityRounds, set.DurabilityLeg)
	}
	if slices.Contains(set.Scenarios, "capacity") {
		fmt.Fprintf(&b, "; capacity %d workers on %d runs at time scales %v (equivalent %v), %s a step, each judged over its whole run",
			set.Workers, set.Runs, set.CapacityScales, equivalentFleets(set.Workers, set.CapacityScales), set.CapacityLeg)
	}
	if set.Quick {
		b.WriteString(" (**--quick**: not the full sizes)")
	}
	fleetWhere := "in the bench process"
	if set.FleetProcesses > 1 {
		fleetWhere = fmt.Sprintf("in the bench process, except the steady, durability and capacity fleets, split over %d processes of their own", set.FleetProcesses)
	}
	fmt.Fprintf(&b, ".\n\nThe server runs as a separate `shoal serve` process; the fleet and the load generator run %s, on the same machine (%s; %s).\n", fleetWhere, set.Pinning, set.FileLimit)
	if set.Baseline != "" {
		fmt.Fprintf(&b, "\n**Baseline:** in the same bench run, the steady scenario ran four times, against `%s`, this build, this build again and the baseline again (sections %s, steady, %s and %s), and each storm ran first against the baseline (storm's \"baseline\" figures), then against this build; figures named \"ratio to the baseline\" are this build's over the baseline's, for steady the geometric mean of the two pairs' ratios, so that a leg's place in the run, which weighs on its tails, cancels out.\n", set.Baseline, baselineScenario, steadyAgain, baselineAgain)
	}
	for _, name := range reportOrder(rep) {
		sc, ok := rep.Scenarios[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		if sc.Skipped != "" {
			fmt.Fprintf(&b, "%s\n\n", sc.Skipped)
		}
		if sc.Error != "" {
			fmt.Fprintf(&b, "**Error:** %s\n\n", strings.ReplaceAll(sc.Error, "\n", " "))
		}
		if len(sc.Targets) > 0 {
			b.WriteString("| Target | Figure | Target | Met |\n|---|---:|---|---|\n")
			for _, t := range sc.Targets {
				fig := "not measured"
				if t.Figure != nil {
					fig = fmt.Sprintf("%.4g %s", *t.Figure, t.Unit)
				}
				met := "no"
				if t.Met {
					met = "yes"
				}
				fmt.Fprintf(&b, "| %s | %s | %s %s | %s |\n", t.Name, fig, t.Target, t.Unit, met)
			}
			b.WriteString("\n")
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(&b, "%s\n\n", n)
		}
		for _, l := range sc.Limits {
			fmt.Fprintf(&b, "**What limits it.** %s\n\n", l)
		}
		if len(sc.Figures) > 0 {
			b.WriteString("| Figure | Value | Unit |\n|---|---:|---|\n")
			for _, f := range sc.Figures {
				fmt.Fprintf(&b, "| %s | %.4g | %s |\n", f.Name, f.Value, f.Unit)
			}
		}
		profileMarkdown(&b, "Server", sc.Profile)
		fleetProfiled := "Fleet (bench process)"
		if _, split := sc.value("fleet processes"); split && set.FleetProcesses > 1 {
			fleetProfiled = fmt.Sprintf("Fleet (the first of its %d processes)", set.FleetProcesses)
		}
		profileMarkdown(&b, fleetProfiled, sc.FleetProfile)
	}
	return b.String()
}
