// Package config reads the settings of Shoal's commands. Each command's settings are a struct,
// and a table of options describes each of its keys once: the table drives every layer a value
// can come from (defaults, then a TOML file, then SHOAL_<KEY> environment variables, then flags,
// which win), the checks, the error messages (which name the layer a bad value came from), the
// redaction of secrets and the flags' help, which names each value's kind.
//
// The package holds the settings of `shoal serve` (Config) and of `shoal worker` (Worker); the
// other commands build their tables with the same functions, a command without a file or
// environment variables (flags only) included. It imports none of Shoal's packages, so that
// every part of Shoal may use it.
package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Option describes one key of a settings struct T: its name in the TOML file, its flag, its
// environment variable, its help, and how its value is parsed, printed and checked. Options are
// built by String, Int, Uint64, Float, Duration and Bool, and adjusted by their With methods and
// FlagOnly; an Option is a value, safe to share.
type Option[T any] struct {
	key   string // name in the TOML file and in messages, e.g. "dead_task_timeout"
	env   string // environment variable, e.g. "SHOAL_DEAD_TASK_TIMEOUT"; empty: none
	flag  string // flag name without dashes, e.g. "dead-task-timeout"
	usage string // one-line help text for the flag

	// kind names the value in the flags' help: int, float, duration, string, bool or list. It
	// also says what the TOML file may give: a number for int, float and duration, true or
	// false for bool, an array of strings for list, and a string for every kind.
	kind string
	// flagOnly keeps the key out of the file: only its flag (and its environment variable, if
	// it has one) sets it.
	flagOnly bool
	// set parses raw, checks it and stores it in s; it returns only the reason when raw is
	// bad, the caller adds key, value and source.
	set func(s *T, raw string) error
	// get formats the current value so that set would accept it again.
	get func(s *T) string
	// check tests the current value, returning only the reason.
	check func(s *T) error
	// redact, if set, hides secrets in a value before it is printed.
	redact func(string) string
}

// newOption starts an option: its flag is the key with dashes, its environment variable SHOAL_
// and the key in capitals.
func newOption[T any](key, usage, kind string) Option[T] {
	return Option[T]{key: key, usage: usage, kind: kind,
		env: "SHOAL_" + strings.ToUpper(key), flag: strings.ReplaceAll(key, "_", "-")}
}

// WithFlag overrides the flag name derived from the key, for the few flags that are shorter
// than their key.
func (o Option[T]) WithFlag(name string) Option[T] {
	o.flag = name
	return o
}

// WithRedact installs a function that hides secrets in printed values. The flag's help then
// shows no default.
func (o Option[T]) WithRedact(redact func(string) string) Option[T] {
	o.redact = redact
	return o
}

// FlagOnly makes the key a flag alone: no environment variable and no key in the file, for
// commands (or keys) that a file or the environment would only confuse.
func (o Option[T]) FlagOnly() Option[T] {
	o.env = ""
	o.flagOnly = true
	return o
}

// Redacted is a redaction for a secret: it prints none of it.
func Redacted(string) string { return "(redacted)" }

// String describes a string-valued key whose values must pass check (nil: any string).
func String[T any](key, usage string, field func(*T) *string, check func(string) error) Option[T] {
	if check == nil {
		check = func(string) error { return nil }
	}
	o := newOption[T](key, usage, "string")
	o.set = func(s *T, raw string) error {
		if err := check(raw); err != nil {
			return err
		}
		*field(s) = raw
		return nil
	}
	o.get = func(s *T) string { return *field(s) }
	o.check = func(s *T) error { return check(*field(s)) }
	return o
}

// Int describes an integer of at least least; reason is the message for any other value,
// whether it is no integer or too small, since both have the same fix.
func Int[T any](key, usage string, field func(*T) *int, least int, reason string) Option[T] {
	check := func(n int) error {
		if n < least {
			return errors.New(reason)
		}
		return nil
	}
	o := newOption[T](key, usage, "int")
	o.set = func(s *T, raw string) error {
		n, err := strconv.Atoi(raw)
		if err != nil {
			return errors.New(reason)
		}
		if err := check(n); err != nil {
			return err
		}
		*field(s) = n
		return nil
	}
	o.get = func(s *T) string { return strconv.Itoa(*field(s)) }
	o.check = func(s *T) error { return check(*field(s)) }
	return o
}

// Uint64 describes a number from 0 to 2^64-1, a seed say.
func Uint64[T any](key, usage string, field func(*T) *uint64) Option[T] {
	o := newOption[T](key, usage, "int")
	o.set = func(s *T, raw string) error {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return errors.New("must be zero or a positive integer")
		}
		*field(s) = n
		return nil
	}
	o.get = func(s *T) string { return strconv.FormatUint(*field(s), 10) }
	o.check = func(*T) error { return nil }
	return o
}

// Float describes a finite number whose values must pass check (nil: any).
func Float[T any](key, usage string, field func(*T) *float64, check func(float64) error) Option[T] {
	if check == nil {
		check = func(float64) error { return nil }
	}
	o := newOption[T](key, usage, "float")
	o.set = func(s *T, raw string) error {
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("must be a number")
		}
		if err := check(f); err != nil {
			return err
		}
		*field(s) = f
		return nil
	}
	o.get = func(s *T) string { return strconv.FormatFloat(*field(s), 'g', -1, 64) }
	o.check = func(s *T) error { return check(*field(s)) }
	return o
}

// Duration describes a duration, given as a Go duration ("30s") or a number of seconds, whose
// values must pass check (nil: any).
func Duration[T any](key, usage string, field func(*T) *time.Duration, check func(time.Duration) error) Option[T] {
	if check == nil {
		check = func(time.Duration) error { return nil }
	}
	o := newOption[T](key, usage, "duration")
	o.set = func(s *T, raw string) error {
		d, err := parseDuration(raw)
		if err != nil {
			return err
		}
		if err := check(d); err != nil {
			return err
		}
		*field(s) = d
		return nil
	}
	o.get = func(s *T) string { return field(s).String() }
	o.check = func(s *T) error { return check(*field(s)) }
	return o
}

// List describes a list of strings whose values must pass check (nil: any): in the file a TOML
// array of strings or one string, in the environment and on the command line one string, the
// items separated by commas. Items are trimmed of spaces and empty ones dropped.
func List[T any](key, usage string, field func(*T) *[]string, check func([]string) error) Option[T] {
	if check == nil {
		check = func([]string) error { return nil }
	}
	o := newOption[T](key, usage, "list")
	o.set = func(s *T, raw string) error {
		items := splitList(raw)
		if err := check(items); err != nil {
			return err
		}
		*field(s) = items
		return nil
	}
	o.get = func(s *T) string { return strings.Join(*field(s), ",") }
	o.check = func(s *T) error { return check(*field(s)) }
	return o
}

// splitList reads a comma-separated list.
func splitList(raw string) []string {
	var items []string
	for item := range strings.SplitSeq(raw, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// Bool describes a switch: a flag without a value, true or false in the file and the
// environment.
func Bool[T any](key, usage string, field func(*T) *bool) Option[T] {
	o := newOption[T](key, usage, "bool")
	o.set = func(s *T, raw string) error {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return errors.New("must be true or false")
		}
		*field(s) = b
		return nil
	}
	o.get = func(s *T) string { return strconv.FormatBool(*field(s)) }
	o.check = func(*T) error { return nil }
	return o
}

// Sources records, per key, the layer its value came from ("config file x.toml", "SHOAL_ADDR",
// "--addr"), so that a check can tell the user which layer to fix. A key missing from the map
// holds its default.
type Sources map[string]string

// Of names the layer the value of key came from, for error messages: "default" if none set it.
func (s Sources) Of(key string) string {
	if src, ok := s[key]; ok {
		return src
	}
	return "default"
}

// Table is the options of one command's settings T, in the order they are checked and shown in
// the help, and where the command's file comes from. The table is the only place a key is
// listed: the file, the environment, the flags, the checks and the help are all driven by it.
type Table[T any] struct {
	Options []Option[T]
	// ConfigEnv is the environment variable naming the TOML file when no --config flag is
	// given; empty: the command reads no file and has no --config flag.
	ConfigEnv string
	// ConfigUsage is the help of --config; empty: "TOML configuration file (env CONFIGENV)".
	ConfigUsage string
	// Flags are the keys the command takes as flags, nil meaning all. The file and the
	// environment accept every key regardless.
	Flags []string
	// Help is what --help prints before the flags; empty: "Usage of NAME:".
	Help string
}

// Load registers the table's flags on fs (and --config when the table has a file), parses args
// and returns defaults changed by each layer in turn: the TOML file named by --config (or, with
// no such flag, by the ConfigEnv variable), the environment variables, the flags. It also
// returns where each value that was set came from. The positional arguments left over are in
// fs.Args().
//
// Flags are parsed first because the file name itself may come from a flag, but their values
// are applied last so that they win over every other layer. An empty environment variable
// counts as unset, since getenv cannot tell the two apart; a nil getenv reads the process
// environment. A malformed value is an error even when a later layer overrides it, so a broken
// file never goes unnoticed. Values left at their defaults are not checked: Check does that.
// Load sets fs.Usage to print t.Help, then the flags with each one's kind.
func (t Table[T]) Load(fs *flag.FlagSet, args []string, getenv func(string) string, defaults T) (T, Sources, error) {
	var zero T
	if getenv == nil {
		getenv = os.Getenv
	}
	flagOpts, err := t.flagOptions()
	if err != nil {
		return zero, nil, err
	}

	if t.ConfigEnv != "" {
		usage := t.ConfigUsage
		if usage == "" {
			usage = "TOML configuration file (env " + t.ConfigEnv + ")"
		}
		defineText(fs, "config", "", "path", usage)
	}
	for _, opt := range flagOpts {
		usage := opt.usage
		if opt.env != "" {
			usage += " (env " + opt.env + ")"
		}
		def := opt.get(&defaults)
		if opt.redact != nil {
			def = ""
		}
		if opt.kind == "bool" {
			fs.Bool(opt.flag, def == "true", usage)
			continue
		}
		defineText(fs, opt.flag, def, opt.kind, usage)
	}
	useTypedHelp(fs, t.Help)
	if err := fs.Parse(args); err != nil {
		return zero, nil, fmt.Errorf("parse flags: %w", err)
	}
	setFlags := make(map[string]string)
	fs.Visit(func(f *flag.Flag) { setFlags[f.Name] = f.Value.String() })

	s, sources := defaults, make(Sources)
	if t.ConfigEnv != "" {
		path := getenv(t.ConfigEnv)
		if p, ok := setFlags["config"]; ok {
			path = p
		}
		if path != "" {
			if err := t.applyFile(&s, sources, path); err != nil {
				return zero, nil, err
			}
		}
	}
	for _, opt := range t.Options {
		if opt.env == "" {
			continue
		}
		if raw := getenv(opt.env); raw != "" {
			if err := opt.apply(&s, sources, raw, opt.env); err != nil {
				return zero, nil, err
			}
		}
	}
	for _, opt := range flagOpts {
		if raw, ok := setFlags[opt.flag]; ok {
			if err := opt.apply(&s, sources, raw, "--"+opt.flag); err != nil {
				return zero, nil, err
			}
		}
	}
	return s, sources, nil
}

// Check tests every value of s in table order, returning the first problem found. The message
// names the key, the value and the layer it came from, as Load's do.
func (t Table[T]) Check(s *T, sources Sources) error {
	for _, opt := range t.Options {
		if err := opt.check(s); err != nil {
			return opt.invalid(opt.get(s), sources.Of(opt.key), err)
		}
	}
	return nil
}

// Set parses raw as the value of key with the key's own parsing and checks, stores it in s and
// records source in sources, for a value a command takes in a way of its own (another flag's
// name, say).
func (t Table[T]) Set(s *T, sources Sources, key, raw, source string) error {
	for _, opt := range t.Options {
		if opt.key == key {
			return opt.apply(s, sources, raw, source)
		}
	}
	return fmt.Errorf("set %q: no such key", key)
}

// Changed lists, in table order, the keys whose values differ between a and b.
func (t Table[T]) Changed(a, b *T) []string {
	var keys []string
	for _, opt := range t.Options {
		if opt.get(a) != opt.get(b) {
			keys = append(keys, opt.key)
		}
	}
	return keys
}

// flagOptions returns the options named by t.Flags, in table order, or all of them when Flags
// is nil. An unknown key is a programming error in the caller, reported rather than silently
// ignored.
func (t Table[T]) flagOptions() ([]Option[T], error) {
	if t.Flags == nil {
		return t.Options, nil
	}
	want := make(map[string]bool, len(t.Flags))
	for _, k := range t.Flags {
		want[k] = true
	}
	var selected []Option[T]
	for _, opt := range t.Options {
		if want[opt.key] {
			selected = append(selected, opt)
			delete(want, opt.key)
		}
	}
	for _, k := range t.Flags {
		if want[k] {
			return nil, fmt.Errorf("select config flags: unknown key %q", k)
		}
	}
	return selected, nil
}

// apply parses raw into the option and records where it came from. The raw text, not the
// parsed value, goes into the error so that the user sees exactly what they wrote.
func (o Option[T]) apply(s *T, sources Sources, raw, source string) error {
	if err := o.set(s, raw); err != nil {
		return o.invalid(raw, source, err)
	}
	sources[o.key] = source
	return nil
}

// invalid formats a bad value the same way for every layer and for Check, wrapping reason so
// callers can still inspect it.
func (o Option[T]) invalid(value, source string, reason error) error {
	if o.redact != nil {
		value = o.redact(value)
	}
	return fmt.Errorf("invalid %s %q (from %s): %w", o.key, value, source, reason)
}

// applyFile reads the TOML file at path and applies each of its keys. Keys are applied in file
// order so that the first problem reported is the first one in the file.
func (t Table[T]) applyFile(s *T, sources Sources, path string) error {
	keys, values, err := tomlFile(path)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	byKey := make(map[string]Option[T], len(t.Options))
	for _, opt := range t.Options {
		if !opt.flagOnly {
			byKey[opt.key] = opt
		}
	}
	source := "config file " + path
	for _, key := range keys {
		opt, ok := byKey[key]
		if !ok {
			return fmt.Errorf("config file %s: unknown key %q", path, key)
		}
		raw, err := tomlValueText(values[key], opt.kind)
		if err != nil {
			return opt.invalid(raw, source, err)
		}
		if err := opt.apply(s, sources, raw, source); err != nil {
			return err
		}
	}
	return nil
}

// tomlFile reads a TOML file: its top-level keys in file order, and their values. Keys nested
// inside tables are left out: they are reported through their table, itself an unknown key.
func tomlFile(path string) ([]string, map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var values map[string]any
	md, err := toml.Decode(string(data), &values)
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	for _, k := range md.Keys() {
		if len(k) == 1 {
			keys = append(keys, k[0])
		}
	}
	return keys, values, nil
}

// tomlValueText turns a decoded TOML value into the text an option's setter of that kind
// parses, so that the file goes through the same parsing as env and flags.
// Numbers are only accepted by a numeric key, true/false by a boolean one and arrays by a list:
// a number for addr or database is more likely a mistake than an intent.
func tomlValueText(v any, kind string) (string, error) {
	numeric, boolean, list := kind != "string" && kind != "bool" && kind != "list", kind == "bool", kind == "list"
	switch v := v.(type) {
	case []any:
		if !list {
			break
		}
		items := make([]string, len(v))
		for i, item := range v {
			s, ok := item.(string)
			if !ok || strings.Contains(s, ",") {
				return fmt.Sprint(v), errors.New("must be an array of strings without commas")
			}
			items[i] = s
		}
		return strings.Join(items, ","), nil
	case string:
		return v, nil
	case int64:
		if numeric {
			return strconv.FormatInt(v, 10), nil
		}
	case float64:
		if numeric {
			return strconv.FormatFloat(v, 'g', -1, 64), nil
		}
	case bool:
		if boolean {
			return strconv.FormatBool(v), nil
		}
	}
	switch {
	case list:
		return fmt.Sprint(v), errors.New("must be an array of strings or a string")
	case boolean:
		return fmt.Sprint(v), errors.New("must be true or false")
	case numeric:
		return fmt.Sprint(v), errors.New("must be a number or a string")
	}
	return fmt.Sprint(v), errors.New("must be a string")
}

// parseDuration accepts a Go duration ("2m", "500ms") or a bare number of
// seconds ("120", "0.5"), since operators coming from the Python server
// write plain seconds.
func parseDuration(s string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, errors.New("not a duration")
		}
		ns := math.Round(secs * float64(time.Second))
		if ns >= math.MaxInt64 || ns <= math.MinInt64 {
			return 0, errors.New("duration out of range")
		}
		return time.Duration(ns), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration")
	}
	return d, nil
}
