// Package uci runs a chess engine that speaks the Universal Chess Interface: the handshake, its
// options, and one search at a time under a deadline. It reads what the engine says and never
// trusts it: an engine that exits mid-game is ErrCrashed, one that does not answer within the
// time it was given is ErrTimeout, and the move it names is left to the caller to check against
// the rules (the game loop does, with the chess library).
//
// The chess library Shoal uses for the rules (github.com/corentings/chess/v2) has an engine
// wrapper of its own, but its calls block until the engine answers, with no deadline and no way
// to tell a crash from a slow reply: a worker must lose a game on time to a hung engine and
// carry on with the next, so this package is Shoal's own.
package uci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	// ErrCrashed is an engine whose process exited or closed its output.
	ErrCrashed = errors.New("uci: the engine exited")
	// ErrTimeout is an engine that did not answer in the time it was given.
	ErrTimeout = errors.New("uci: the engine did not answer in time")
)

// Option is an option the engine declared in its handshake.
type Option struct {
	Name, Type, Default string
	Min, Max            int      // for type spin
	Vars                []string // for type combo
}

// Engine is a running engine process. Its methods are not safe for concurrent use: one game
// drives one engine.
type Engine struct {
	// Name is the engine's "id name".
	Name string
	// Options are the options it declared, by name.
	Options map[string]Option

	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string   // the engine's output, a line at a time; closed at its end
	exit  chan struct{} // closed once the process has exited
	once  sync.Once
	// searching is set when a search was given up on (ErrTimeout, or ctx's end): its bestmove
	// may still come, and must not be taken for the next search's.
	searching bool
}

// settleTimeout bounds the wait for an abandoned search's bestmove.
const settleTimeout = 5 * time.Second

// settle waits for the bestmove of a search given up on, if there is one: after stop an engine
// answers at once; one that does not within settleTimeout is ErrTimeout.
func (e *Engine) settle(ctx context.Context) error {
	if !e.searching {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	for {
		line, err := e.next(ctx)
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "bestmove") {
			e.searching = false
			return nil
		}
	}
}

// Start runs the engine at path and completes the handshake (uci ... uciok) within timeout.
func Start(ctx context.Context, path string, args []string, timeout time.Duration) (*Engine, error) {
	cmd := exec.Command(path, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// The engine's output through a pipe of our own, not StdoutPipe, so that its last lines
	// before it exits are read whole while the process is waited for.
	out, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("uci: start %s: %w", path, err)
	}
	e := &Engine{Options: map[string]Option{}, cmd: cmd, in: in, lines: make(chan string, 64), exit: make(chan struct{})}
	go func() { // ends with the engine's output
		defer close(e.lines)
		defer out.Close()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
	}()
	go func() { // ends when the process exits, which Close makes sure of
		_ = cmd.Wait()
		close(e.exit)
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.send("uci"); err != nil {
		e.Close()
		return nil, err
	}
	for {
		line, err := e.next(ctx)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("uci: handshake with %s: %w", path, err)
		}
		switch {
		case line == "uciok":
			return e, nil
		case strings.HasPrefix(line, "id name "):
			e.Name = strings.TrimSpace(strings.TrimPrefix(line, "id name "))
		case strings.HasPrefix(line, "option "):
			if o, ok := parseOption(line); ok {
				e.Options[o.Name] = o
			}
		}
	}
}

// parseOption reads "option name <name> type <type> [default <v>] [min <n>] [max <n>] [var <v>]...".
// Names and values may hold spaces: each runs to the next keyword.
func parseOption(line string) (Option, bool) {
	fields := strings.Fields(strings.TrimPrefix(line, "option "))
	var o Option
	var key string
	var val []string
	flush := func() {
		v := strings.Join(val, " ")
		switch key {
		case "name":
			o.Name = v
		case "type":
			o.Type = v
		case "default":
			o.Default = v
		case "min":
			o.Min, _ = strconv.Atoi(v)
		case "max":
			o.Max, _ = strconv.Atoi(v)
		case "var":
			o.Vars = append(o.Vars, v)
		}
		val = val[:0]
	}
	for _, f := range fields {
		switch f {
		case "name", "type", "default", "min", "max", "var":
			if key != "" {
				flush()
			}
			key = f
		default:
			val = append(val, f)
		}
	}
	if key != "" {
		flush()
	}
	return o, o.Name != "" && o.Type != ""
}

// SetOption sets an option ("setoption name <name> value <value>"). Engines ignore options they
// do not know, and so does this: the caller checks Options if it must.
func (e *Engine) SetOption(name, value string) error {
	return e.send("setoption name " + name + " value " + value)
}

// NewGame tells the engine a new game starts and waits until it is ready.
func (e *Engine) NewGame(ctx context.Context, timeout time.Duration) error {
	if err := e.send("ucinewgame"); err != nil {
		return err
	}
	return e.Ready(ctx, timeout)
}

// Ready waits, up to timeout, until the engine answers isready.
func (e *Engine) Ready(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.settle(ctx); err != nil {
		return err
	}
	if err := e.send("isready"); err != nil {
		return err
	}
	for {
		line, err := e.next(ctx)
		if err != nil {
			return err
		}
		if line == "readyok" {
			return nil
		}
	}
}

// Limits is what a search may use: both clocks and increments (the side to move is the
// position's), or a fixed time, depth or number of nodes. Zero fields are left out.
type Limits struct {
	WTime, BTime, WInc, BInc time.Duration
	MovesToGo                int // moves until the next time control, for moves/time controls
	MoveTime                 time.Duration
	Depth, Nodes             int
}

// Command is the go command for l.
func (l Limits) Command() string {
	var b strings.Builder
	b.WriteString("go")
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"wtime", l.WTime}, {"btime", l.BTime}, {"winc", l.WInc}, {"binc", l.BInc}, {"movetime", l.MoveTime}} {
		if d.v > 0 {
			fmt.Fprintf(&b, " %s %d", d.key, d.v.Milliseconds())
		}
	}
	if l.MovesToGo > 0 {
		fmt.Fprintf(&b, " movestogo %d", l.MovesToGo)
	}
	if l.Depth > 0 {
		fmt.Fprintf(&b, " depth %d", l.Depth)
	}
	if l.Nodes > 0 {
		fmt.Fprintf(&b, " nodes %d", l.Nodes)
	}
	if b.Len() == len("go") {
		b.WriteString(" infinite")
	}
	return b.String()
}

// Score is the engine's last reported evaluation, from the side to move's point of view: in
// centipawns, or, if Mate is set, mate in Mate moves (negative: being mated).
type Score struct {
	Known      bool
	Centipawns int
	Mate       int
}

// Search is the outcome of one search.
type Search struct {
	BestMove string // in UCI notation, as the engine wrote it
	Score    Score
	Depth    int
	Elapsed  time.Duration // from the go command to the bestmove line
}

// Go sets the position (a FEN, "startpos" if empty, and the moves played from it, in UCI
// notation) and searches within limits, waiting for bestmove up to deadline. An engine that
// misses the deadline is told to stop and the search is ErrTimeout; its late bestmove is waited
// for (settle) before the next search or Ready, never taken for another search's answer.
func (e *Engine) Go(ctx context.Context, fen string, moves []string, limits Limits, deadline time.Duration) (Search, error) {
	if err := e.settle(ctx); err != nil {
		return Search{}, err
	}
	pos := "position startpos"
	if fen != "" {
		pos = "position fen " + fen
	}
	if len(moves) > 0 {
		pos += " moves " + strings.Join(moves, " ")
	}
	if err := e.send(pos); err != nil {
		return Search{}, err
	}
	start := time.Now()
	if err := e.send(limits.Command()); err != nil {
		return Search{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var s Search
	for {
		line, err := e.next(ctx)
		if err != nil {
			if !errors.Is(err, ErrCrashed) {
				_ = e.send("stop")
				e.searching = true
			}
			return s, err
		}
		switch {
		case strings.HasPrefix(line, "bestmove"):
			s.Elapsed = time.Since(start)
			if f := strings.Fields(line); len(f) >= 2 {
				s.BestMove = f[1]
			}
			return s, nil
		case strings.HasPrefix(line, "info "):
			readInfo(line, &s)
		}
	}
}

// readInfo takes the depth and score of an info line into s.
func readInfo(line string, s *Search) {
	f := strings.Fields(line)
	for i := 1; i+1 < len(f); i++ {
		switch f[i] {
		case "depth":
			if d, err := strconv.Atoi(f[i+1]); err == nil {
				s.Depth = d
			}
		case "score":
			if i+2 >= len(f) {
				continue
			}
			v, err := strconv.Atoi(f[i+2])
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "cp":
				s.Score = Score{Known: true, Centipawns: v}
			case "mate":
				s.Score = Score{Known: true, Mate: v}
			}
		}
	}
}

// Close asks the engine to quit and, if it has not within a second, kills it.
func (e *Engine) Close() {
	e.once.Do(func() {
		// Written aside: an engine that stopped reading must not hold up the kill below.
		go func() {
			_ = e.send("quit")
			_ = e.in.Close()
		}()
		select {
		case <-e.exit:
		case <-time.After(time.Second):
			_ = e.cmd.Process.Kill()
			<-e.exit
		}
		// The reader ends when the output does, which a child of the engine may hold open.
		go func() {
			for range e.lines {
			}
		}()
	})
}

// Exited reports whether the engine's process has ended.
func (e *Engine) Exited() bool {
	select {
	case <-e.exit:
		return true
	default:
		return false
	}
}

func (e *Engine) send(cmd string) error {
	if _, err := io.WriteString(e.in, cmd+"\n"); err != nil {
		return fmt.Errorf("%w (writing %q: %v)", ErrCrashed, cmd, err)
	}
	return nil
}

// next is the engine's next line, ErrCrashed at the end of its output, ErrTimeout when ctx's
// deadline passes first (ctx's own error if it was cancelled).
func (e *Engine) next(ctx context.Context) (string, error) {
	select {
	case line, ok := <-e.lines:
		if !ok {
			return "", ErrCrashed
		}
		return strings.TrimSpace(line), nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", ErrTimeout
		}
		return "", ctx.Err()
	}
}
