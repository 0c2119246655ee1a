package build

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Compiler is the C++ compiler a build uses, as worker_info reports it: "g++" or "clang++" and
// its version.
type Compiler struct {
	Name    string
	Version [3]int
}

// ErrNoCompiler is a machine with neither g++ nor clang++ on its PATH.
var ErrNoCompiler = errors.New("no C++ compiler: a building worker needs g++ (or clang++) and make")

// CommandCompiler is the compiler a build command builds Stockfish with: clang++ when it
// passes COMP=clang, else g++, the Makefile's default (COMP=gcc).
func CommandCompiler(command string) string {
	if comp, ok := commandComp(command); ok && comp == "clang" {
		return "clang++"
	}
	return "g++"
}

// commandComp is the value of the build command's COMP=, and whether it has one.
func commandComp(command string) (string, bool) {
	comp, found := "", false
	for _, w := range strings.Fields(command) {
		if v, ok := strings.CutPrefix(w, "COMP="); ok {
			comp, found = v, true // make takes the last
		}
	}
	return comp, found
}

// DetectCompiler finds the compiler the build command builds with (CommandCompiler) and its
// version: what worker_info reports, and what a run that pins a compiler is matched against.
// A g++ that is clang in disguise (macOS) is still the g++ the Makefile runs; its version is
// clang's. The error is ErrNoCompiler on a machine with neither compiler, and says what to
// change when the command's compiler is missing: a machine with clang++ but no g++ needs
// COMP=clang in its build command, or every build would fail.
func DetectCompiler(ctx context.Context, command string) (Compiler, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	name := CommandCompiler(command)
	if v, ok := compilerVersion(ctx, name); ok {
		return Compiler{Name: name, Version: v}, nil
	}
	_, hasGCC := compilerVersion(ctx, "g++")
	_, hasClang := compilerVersion(ctx, "clang++")
	_, hasComp := commandComp(command)
	switch {
	case !hasGCC && !hasClang:
		return Compiler{}, ErrNoCompiler
	case name == "clang++":
		return Compiler{}, fmt.Errorf("the build command %q builds with clang++ (COMP=clang), which is not installed; "+
			"remove COMP=clang from build_command to build with g++", command)
	case hasClang && !hasComp:
		return Compiler{}, fmt.Errorf("g++ is not installed, and the build command %q builds with it (Stockfish's "+
			"Makefile does unless told otherwise): add COMP=clang to build_command to build with clang++", command)
	case hasClang:
		return Compiler{}, fmt.Errorf("g++ is not installed, and the build command %q builds with it: "+
			"make it COMP=clang in build_command to build with clang++", command)
	default:
		return Compiler{}, fmt.Errorf("the build command %q builds with g++, which is not installed", command)
	}
}

// compilerVersion runs the compiler called name and reads its version; false when it does not
// run or does not say.
func compilerVersion(ctx context.Context, name string) ([3]int, bool) {
	out, err := exec.CommandContext(ctx, name, "--version").Output()
	if err != nil {
		return [3]int{}, false
	}
	if name == "g++" && !strings.Contains(string(out), "clang") {
		// The first line of g++ --version is the distribution's; -dumpfullversion is the
		// version alone.
		full, err := exec.CommandContext(ctx, name, "-dumpfullversion").Output()
		if err != nil { // a g++ older than 7
			full, err = exec.CommandContext(ctx, name, "-dumpversion").Output()
		}
		if err != nil {
			return [3]int{}, false
		}
		out = full
	}
	return ParseVersion(string(out))
}

var versionNumber = regexp.MustCompile(`\b(\d+)\.(\d+)(?:\.(\d+))?\b`)

// ParseVersion reads the first version number in a compiler's answer: "12.2.0" (g++
// -dumpfullversion), "Debian clang version 14.0.6" (clang++ --version). A missing patch level
// is 0.
func ParseVersion(text string) ([3]int, bool) {
	if i := strings.Index(text, "version "); i >= 0 {
		text = text[i:]
	}
	m := versionNumber.FindStringSubmatch(text)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range 3 {
		v[i], _ = strconv.Atoi(m[i+1]) // "" for a missing patch level: 0
	}
	return v, true
}
