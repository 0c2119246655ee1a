package build

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-chess/shoal/protocol"
)

// CPU is what the choice of a build's ARCH needs to know of this machine: its vendor, its
// family (x86) and the features /proc/cpuinfo lists ("flags" on x86, "Features" on ARM), for
// the Go GOOS and GOARCH it runs.
type CPU struct {
	Vendor string // vendor_id, e.g. "AuthenticAMD"
	Family int    // cpu family
	Flags  map[string]bool
	GOOS   string
	GOARCH string
}

// ParseCPUInfo reads the text of /proc/cpuinfo: the first processor's vendor, family and
// features. GOOS and GOARCH are left to the caller.
func ParseCPUInfo(text string) CPU {
	c := CPU{Flags: map[string]bool{}}
	seenFlags, seenVendor, seenFamily := false, false, false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "vendor_id":
			if !seenVendor {
				c.Vendor, seenVendor = value, true
			}
		case "cpu family":
			if !seenFamily {
				c.Family, _ = strconv.Atoi(value)
				seenFamily = true
			}
		case "flags", "Features":
			if !seenFlags {
				for _, f := range strings.Fields(value) {
					c.Flags[f] = true
				}
				seenFlags = true
			}
		}
	}
	return c
}

// ReadCPU describes this machine: /proc/cpuinfo where there is one (Linux), else only its GOOS
// and GOARCH, which leaves the generic ARCH of its family.
func ReadCPU() CPU {
	data, _ := os.ReadFile("/proc/cpuinfo")
	c := ParseCPUInfo(string(data))
	c.GOOS, c.GOARCH = runtime.GOOS, runtime.GOARCH
	return c
}

func (c CPU) has(flags ...string) bool {
	for _, f := range flags {
		if !c.Flags[f] {
			return false
		}
	}
	return true
}

// slowPEXT: AMD before Zen 3 (family 25) runs pext and pdep in microcode, which makes a bmi2
// build slower than an avx2 one.
func (c CPU) slowPEXT() bool { return c.Vendor == "AuthenticAMD" && c.Family < 25 }

// archPreference lists the ARCHes the worker chooses from, best first: those of Stockfish's
// Makefile from 11 to today that a worker may want. "native" and the "universal" builds are
// left out: the first hides the choice, the others defer it to run time.
var archPreference = []string{
	"x86-64-avx512icl", "x86-64-vnni512", "x86-64-avx512", "x86-64-avxvnni", "x86-64-bmi2",
	"x86-64-avx2", "x86-64-sse41-popcnt", "x86-64-modern", "x86-64-ssse3", "x86-64-sse3-popcnt",
	"x86-64", "apple-silicon", "armv8-dotprod", "armv8", "general-64",
}

// avx512icl is what Stockfish's x86-64-avx512icl needs (Ice Lake, Zen 4), in /proc/cpuinfo's
// names.
var avx512icl = []string{"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512ifma",
	"avx512vbmi", "avx512_vbmi2", "avx512_vpopcntdq", "avx512_bitalg", "avx512_vnni", "vpclmulqdq",
	"gfni", "vaes"}

// Runs reports whether an engine built with arch runs (and runs well) on c. Unknown ARCHes do
// not.
func (c CPU) Runs(arch string) bool {
	x86 := c.GOARCH == "amd64"
	switch arch {
	case "x86-64-avx512icl":
		return x86 && c.has(avx512icl...)
	case "x86-64-vnni512":
		return x86 && c.has("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")
	case "x86-64-avx512":
		return x86 && c.has("avx512f", "avx512bw")
	case "x86-64-avxvnni":
		return x86 && c.has("avx_vnni", "avx2")
	case "x86-64-bmi2":
		return x86 && c.has("bmi2", "avx2", "popcnt") && !c.slowPEXT()
	case "x86-64-avx2":
		return x86 && c.has("avx2", "popcnt")
	case "x86-64-sse41-popcnt":
		return x86 && c.has("sse4_1", "popcnt")
	case "x86-64-modern": // Stockfish 11's popcnt build (later a name of sse41-popcnt)
		return x86 && c.has("pni", "popcnt")
	case "x86-64-ssse3":
		return x86 && c.has("ssse3")
	case "x86-64-sse3-popcnt":
		return x86 && c.has("pni", "popcnt")
	case "x86-64":
		return x86
	case "apple-silicon":
		return c.GOOS == "darwin" && c.GOARCH == "arm64"
	case "armv8-dotprod":
		return c.GOARCH == "arm64" && c.has("asimddp")
	case "armv8":
		return c.GOARCH == "arm64"
	case "general-64":
		return strconv.IntSize == 64
	}
	return false
}

// ChooseArch is the best of the Makefile's targets (ParseMakeHelp) that c runs, or "" when none
// of them does. x86-64-modern is Stockfish 11's popcnt build, and only taken from a Makefile that
// has no x86-64-sse41-popcnt (where it names that one).
func ChooseArch(targets []string, c CPU) string {
	for _, arch := range archPreference {
		if !slices.Contains(targets, arch) || !c.Runs(arch) {
			continue
		}
		if arch == "x86-64-modern" && slices.Contains(targets, "x86-64-sse41-popcnt") {
			continue
		}
		return arch
	}
	return ""
}

// WorkerArch is the worker_arch a building worker reports: override when set (the operator's
// arch), else the ARCH it would build today's Stockfish with on c; "unknown" when that is not
// one of fishtest's supported arches (protocol.SupportedArches).
func WorkerArch(c CPU, override string) string {
	arch := override
	if arch == "" {
		arch = ChooseArch(archPreference, c)
	}
	if slices.Contains(protocol.SupportedArches(), arch) {
		return arch
	}
	return "unknown"
}

// ParseMakeHelp reads the ARCHes Stockfish's `make help` lists: the lines "name   > what" of its
// "Supported archs:" section, up to the blank line that ends it.
func ParseMakeHelp(text string) []string {
	var targets []string
	in := false
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if !in {
			in = strings.HasPrefix(line, "Supported archs:")
			continue
		}
		if line == "" {
			if len(targets) > 0 {
				break
			}
			continue // the blank line after the heading
		}
		name, _, ok := strings.Cut(line, ">")
		if !ok {
			break
		}
		if name = strings.TrimSpace(name); validArch(name) {
			targets = append(targets, name)
		}
	}
	return targets
}

// validArch reports whether s can be an ARCH: letters, digits, '-', '_' and '.', which keeps it
// safe in a file name and a make argument.
func validArch(s string) bool {
	return s != "" && len(s) <= 64 && !strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "-") &&
		strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}
