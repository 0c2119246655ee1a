package build

import (
	"context"
	"errors"
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

// DetectCompiler finds the compiler Stockfish's Makefile builds with: g++ (its default), else
// clang++ (which then needs COMP=clang in the build command). A g++ that is clang in disguise
// (macOS) counts as clang++.
func DetectCompiler(ctx context.Context) (Compiler, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "g++", "--version").Output(); err == nil && !strings.Contains(string(out), "clang") {
		full, err := exec.CommandContext(ctx, "g++", "-dumpfullversion").Output()
		if err != nil { // a g++ older than 7
			full, err = exec.CommandContext(ctx, "g++", "-dumpversion").Output()
		}
		if v, ok := ParseVersion(string(full)); err == nil && ok {
			return Compiler{Name: "g++", Version: v}, nil
		}
	}
	if out, err := exec.CommandContext(ctx, "clang++", "--version").Output(); err == nil {
		if v, ok := ParseVersion(string(out)); ok {
			return Compiler{Name: "clang++", Version: v}, nil
		}
	}
	return Compiler{}, ErrNoCompiler
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
