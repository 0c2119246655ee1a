package config

import (
	"flag"
	"fmt"
	"strings"
)

// textFlag is a flag whose raw text the option tables parse and check themselves (with the
// same rules as the file and the environment); kind names its value in the help: int,
// duration, float, string or path.
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
// PrintDefaults can only say "value". help comes first; empty, "Usage of NAME:".
func useTypedHelp(fs *flag.FlagSet, help string) {
	fs.Usage = func() {
		if help == "" {
			help = fmt.Sprintf("Usage of %s:\n", fs.Name())
		}
		fmt.Fprint(fs.Output(), help)
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
		case text && t.kind != "string" && (f.DefValue == "0" || f.DefValue == "0s"):
			// A zero goes without saying, as in flag.PrintDefaults.
		case text && t.kind == "string":
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(&b, " (default %v)", f.DefValue)
		}
		fmt.Fprintln(fs.Output(), b.String())
	})
}
