package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Fake compilers: the answers of a Debian g++ 12, a Debian clang++ 14 and macOS's g++, which is
// clang.
const (
	fakeGCC = `case "$1" in
--version) echo "g++ (Debian 12.2.0-14) 12.2.0";;
-dumpfullversion) echo "12.2.0";;
esac`
	fakeClang   = `echo "Debian clang version 14.0.6"; echo "Target: x86_64-pc-linux-gnu"`
	fakeAppleGX = `echo "Apple clang version 15.0.0 (clang-1500.1.0.2.5)"; echo "Target: arm64-apple-darwin23.2.0"`
)

// The compiler a building worker reports is the one its build command builds with: g++ unless
// the command says COMP=clang, whatever else is installed; a machine without it refuses to
// start, and one with clang++ but no g++ is told to add COMP=clang.
func TestDetectCompiler(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake compilers are shell scripts")
	}
	for _, tt := range []struct {
		name      string
		compilers map[string]string // name -> script
		command   string
		want      Compiler
		wantErr   string
	}{
		{"g++ by default", map[string]string{"g++": fakeGCC, "clang++": fakeClang}, DefaultCommand,
			Compiler{"g++", [3]int{12, 2, 0}}, ""},
		{"COMP=gcc is g++", map[string]string{"g++": fakeGCC, "clang++": fakeClang}, "make build ARCH={arch} COMP=gcc",
			Compiler{"g++", [3]int{12, 2, 0}}, ""},
		{"COMP=clang is clang++", map[string]string{"g++": fakeGCC, "clang++": fakeClang}, "make build ARCH={arch} COMP=clang",
			Compiler{"clang++", [3]int{14, 0, 6}}, ""},
		{"only clang++, with COMP=clang", map[string]string{"clang++": fakeClang}, "make -j{jobs} build ARCH={arch} COMP=clang",
			Compiler{"clang++", [3]int{14, 0, 6}}, ""},
		{"only clang++, without COMP=", map[string]string{"clang++": fakeClang}, DefaultCommand,
			Compiler{}, "add COMP=clang to build_command"},
		{"only clang++, with COMP=gcc", map[string]string{"clang++": fakeClang}, "make build ARCH={arch} COMP=gcc",
			Compiler{}, "COMP=clang in build_command"},
		{"only g++, with COMP=clang", map[string]string{"g++": fakeGCC}, "make build ARCH={arch} COMP=clang",
			Compiler{}, "clang++ (COMP=clang), which is not installed"},
		{"macOS's g++ is still the g++ the Makefile runs", map[string]string{"g++": fakeAppleGX}, DefaultCommand,
			Compiler{"g++", [3]int{15, 0, 0}}, ""},
		{"neither", map[string]string{}, DefaultCommand, Compiler{}, ErrNoCompiler.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.compilers {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", dir)
			got, err := DetectCompiler(context.Background(), tt.command)
			switch {
			case tt.wantErr == "" && (err != nil || got != tt.want):
				t.Errorf("%+v, %v; want %+v", got, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("%+v, %v; want an error saying %q", got, err, tt.wantErr)
			}
			if tt.wantErr == ErrNoCompiler.Error() && !errors.Is(err, ErrNoCompiler) {
				t.Errorf("%v, want ErrNoCompiler", err)
			}
		})
	}
}
