package main

import (
	"flag"
	"fmt"
	"strings"
)

// textFlag is a flag whose raw text the option tables parse and check themselves (with the
// same rules as the file and the environment); kind names its value in the help: int,
// duration, float or string.
type textFlag struct{ value, kind string }

func (f *textFlag) String() string {
	if f == nil {
		return ""
	}
	return f.value
}

func (f *textFlag) Set(s string) error {
	f.value = s
	return nil
}

// defineText registers a textFlag.
func defineText(fs *flag.FlagSet, name, def, kind, usage string) {
	fs.Var(&textFlag{value: def, kind: kind}, name, usage)
}

// useTypedHelp makes fs's help name each textFlag's value by its kind, where flag's own
// PrintDefaults can only say "value".
func useTypedHelp(fs *flag.FlagSet) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		printFlags(fs)
	}
}

// printFlags writes fs's flags as flag.PrintDefaults does, with textFlags' kinds.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		t, text := f.Value.(*textFlag)
		if text {
			name = t.kind
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		if name != "" {
			b.WriteString(" " + name)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch {
		case f.DefValue == "" || (!text && f.DefValue == "false"):
		case text && t.kind == "string":
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(&b, " (default %v)", f.DefValue)
		}
		fmt.Fprintln(fs.Output(), b.String())
	})
}
