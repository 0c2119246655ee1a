package build

import (
	"slices"
	"strconv"
	"testing"
)

// sf11Help has the shape of Stockfish 11's `make help`.
const sf11Help = `
To compile stockfish, type: 

make target ARCH=arch [COMP=compiler] [COMPCXX=cxx]

Supported targets:

build                   > Standard build
profile-build           > PGO build
strip                   > Strip executable

Supported archs:

x86-64-bmi2             > x86 64-bit with pext support (also enables SSE4)
x86-64-modern           > x86 64-bit with popcnt support (also enables SSE3)
x86-64                  > x86 64-bit generic
x86-32                  > x86 32-bit (also enables SSE)
x86-32-old              > x86 32-bit fall back for old hardware
ppc-64                  > PPC 64-bit
ppc-32                  > PPC 32-bit
armv7                   > ARMv7 32-bit
general-64              > unspecified 64-bit
general-32              > unspecified 32-bit

Supported compilers:

gcc                     > Gnu compiler (default)
clang                   > LLVM Clang compiler
`

// recentHelp has the shape of a recent Stockfish's `make help`.
const recentHelp = `
To compile stockfish, type: 

make -j target [ARCH=arch] [COMP=compiler] [COMPCXX=cxx]

Supported targets:

help                    > Display architecture details
profile-build           > standard build with profile-guided optimization
build                   > skip profile-guided optimization

Supported archs:

native                  > select the best architecture for the host processor (default)
x86-64-avx512icl        > x86 64-bit with minimum avx512 support of Intel Ice Lake or AMD Zen 4
x86-64-vnni512          > x86 64-bit with vnni 512bit support
x86-64-avx512           > x86 64-bit with avx512 support
x86-64-avxvnni          > x86 64-bit with vnni 256bit support
x86-64-bmi2             > x86 64-bit with bmi2 support
x86-64-avx2             > x86 64-bit with avx2 support
x86-64-sse41-popcnt     > x86 64-bit with sse41 and popcnt support
x86-64-modern           > deprecated, currently x86-64-sse41-popcnt
x86-64-ssse3            > x86 64-bit with ssse3 support
x86-64-sse3-popcnt      > x86 64-bit with sse3 compile and popcnt support
x86-64                  > x86 64-bit generic (with sse2 support)
x86-32-sse41-popcnt     > x86 32-bit with sse41 and popcnt support
x86-32                  > x86 32-bit generic (with mmx compile support)
armv8                   > ARMv8 64-bit with popcnt and neon
armv8-dotprod           > ARMv8 64-bit with popcnt, neon and dot product support
apple-silicon           > Apple silicon ARM64
general-64              > unspecified 64-bit
general-32              > unspecified 32-bit

Supported compilers:

gcc                     > GNU compiler (default)
`

func TestParseMakeHelp(t *testing.T) {
	got := ParseMakeHelp(sf11Help)
	want := []string{"x86-64-bmi2", "x86-64-modern", "x86-64", "x86-32", "x86-32-old", "ppc-64", "ppc-32", "armv7", "general-64", "general-32"}
	if !slices.Equal(got, want) {
		t.Errorf("Stockfish 11: %q, want %q", got, want)
	}
	got = ParseMakeHelp(recentHelp)
	if len(got) != 19 || got[0] != "native" || got[1] != "x86-64-avx512icl" || got[18] != "general-32" || slices.Contains(got, "gcc") {
		t.Errorf("recent Stockfish: %q", got)
	}
	if got := ParseMakeHelp("make: *** No rule to make target 'help'.  Stop.\n"); got != nil {
		t.Errorf("no help: %q, want none", got)
	}
}

// cpuinfo flags of a few machines (the x86 ones trimmed to what matters and some noise).
const (
	zen4Flags    = "fpu sse sse2 pni ssse3 fma cx16 sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq"
	zen2Flags    = "fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2 sha_ni"
	skylakeFlags = "fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2"
	skylakeX     = skylakeFlags + " avx512f avx512dq avx512cd avx512bw avx512vl"
	cascadeLake  = skylakeX + " avx512_vnni"
	alderLake    = skylakeFlags + " avx_vnni"
	phenomFlags  = "fpu sse sse2 pni popcnt abm sse4a"
	core2Flags   = "fpu sse sse2 pni ssse3"
	nehalemFlags = "fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt"
)

func x86(vendor string, family int, flags string) CPU {
	c := ParseCPUInfo("vendor_id\t: " + vendor + "\ncpu family\t: " + strconv.Itoa(family) + "\nflags\t\t: " + flags + "\n")
	c.GOOS, c.GOARCH = "linux", "amd64"
	return c
}

func TestChooseArch(t *testing.T) {
	sf11, recent := ParseMakeHelp(sf11Help), ParseMakeHelp(recentHelp)
	arm := func(features string, goos string) CPU {
		c := ParseCPUInfo("processor\t: 0\nFeatures\t: " + features + "\nCPU implementer\t: 0x41\n")
		c.GOOS, c.GOARCH = goos, "arm64"
		return c
	}
	tests := []struct {
		name    string
		targets []string
		cpu     CPU
		want    string
	}{
		{"Stockfish 11 on this EPYC (Zen 4)", sf11, x86("AuthenticAMD", 25, zen4Flags), "x86-64-bmi2"},
		{"today's Stockfish on Zen 4", recent, x86("AuthenticAMD", 25, zen4Flags), "x86-64-avx512icl"},
		{"Stockfish 11 on Zen 2: pext is slow", sf11, x86("AuthenticAMD", 23, zen2Flags), "x86-64-modern"},
		{"today's Stockfish on Zen 2", recent, x86("AuthenticAMD", 23, zen2Flags), "x86-64-avx2"},
		{"today's Stockfish on Skylake", recent, x86("GenuineIntel", 6, skylakeFlags), "x86-64-bmi2"},
		{"today's Stockfish on Skylake-X", recent, x86("GenuineIntel", 6, skylakeX), "x86-64-avx512"},
		{"today's Stockfish on Cascade Lake", recent, x86("GenuineIntel", 6, cascadeLake), "x86-64-vnni512"},
		{"today's Stockfish on Alder Lake", recent, x86("GenuineIntel", 6, alderLake), "x86-64-avxvnni"},
		{"today's Stockfish on Nehalem", recent, x86("GenuineIntel", 6, nehalemFlags), "x86-64-sse41-popcnt"},
		{"today's Stockfish on a Phenom: popcnt without sse4.1", recent, x86("AuthenticAMD", 16, phenomFlags), "x86-64-sse3-popcnt"},
		{"Stockfish 11 on a Phenom", sf11, x86("AuthenticAMD", 16, phenomFlags), "x86-64-modern"},
		{"today's Stockfish on a Core 2", recent, x86("GenuineIntel", 6, core2Flags), "x86-64-ssse3"},
		{"Stockfish 11 on a Core 2", sf11, x86("GenuineIntel", 6, core2Flags), "x86-64"},
		{"an ARM server with dot product", recent, arm("fp asimd evtstrm aes crc32 asimddp", "linux"), "armv8-dotprod"},
		{"an older ARM server", recent, arm("fp asimd evtstrm crc32", "linux"), "armv8"},
		{"Stockfish 11 on ARM", sf11, arm("fp asimd asimddp", "linux"), "general-64"},
		{"Apple silicon", recent, arm("", "darwin"), "apple-silicon"},
		{"a 64-bit machine of another kind", recent, CPU{GOOS: "linux", GOARCH: "riscv64"}, "general-64"},
		{"nothing fits", []string{"x86-32", "ppc-32"}, x86("GenuineIntel", 6, skylakeFlags), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChooseArch(tt.targets, tt.cpu); got != tt.want {
				t.Errorf("ChooseArch = %q, want %q", got, tt.want)
			}
		})
	}
}

// worker_arch is the ARCH today's Stockfish would be built with, or the operator's, when
// fishtest knows it.
func TestWorkerArch(t *testing.T) {
	zen4 := x86("AuthenticAMD", 25, zen4Flags)
	for _, tt := range []struct {
		override, want string
	}{{"", "x86-64-avx512icl"}, {"x86-64-bmi2", "x86-64-bmi2"}, {"x86-64-modern", "unknown"}, {"mine", "unknown"}} {
		if got := WorkerArch(zen4, tt.override); got != tt.want {
			t.Errorf("WorkerArch(zen4, %q) = %q, want %q", tt.override, got, tt.want)
		}
	}
	if got := WorkerArch(CPU{GOOS: "plan9", GOARCH: "386"}, ""); got != "general-64" && got != "unknown" {
		t.Errorf("WorkerArch of an unknown machine = %q", got)
	}
}

func TestParseCPUInfo(t *testing.T) {
	text := "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 bmi2\n\n" +
		"processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fpu sse\n"
	c := ParseCPUInfo(text)
	if c.Vendor != "AuthenticAMD" || c.Family != 25 || !c.has("fpu", "avx2", "bmi2") || c.has("sse") {
		t.Errorf("ParseCPUInfo = %+v: want the first processor's", c)
	}
	if c := ParseCPUInfo(""); len(c.Flags) != 0 || c.Vendor != "" {
		t.Errorf("no cpuinfo: %+v", c)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		text string
		want [3]int
		ok   bool
	}{
		{"12.2.0\n", [3]int{12, 2, 0}, true},
		{"14\n", [3]int{}, false},
		{"9.3\n", [3]int{9, 3, 0}, true},
		{"Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n", [3]int{14, 0, 6}, true},
		{"Apple clang version 15.0.0 (clang-1500.3.9.4)\n", [3]int{15, 0, 0}, true},
		{"Ubuntu clang version 18.1.3 (1ubuntu1)\n", [3]int{18, 1, 3}, true},
		{"no version here", [3]int{}, false},
	} {
		got, ok := ParseVersion(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}
