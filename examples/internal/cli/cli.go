// Package cli is what the examples' command lines share: the usage error
// their programs exit 2 for, the checks of flag values that name the flag,
// the printer of a line or a JSON event, and the handling of the stop
// signals and exit statuses. It is for examples/charrnn,
// examples/tagger and examples/classify, not for users.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gocurrent/gocurrent/train"
)

// ErrUsage is wrapped by errors in the command line: the program exits
// with status 2.
var ErrUsage = errors.New("usage")

// Printer writes a command's output: a line of text, or with JSON the
// same event as one JSON object per line. It is safe for concurrent use.
type Printer struct {
	mu   sync.Mutex
	W    io.Writer
	JSON bool
}

// Emit writes event (a struct or map with an "event" field) as JSON, or
// text as it is.
func (p *Printer) Emit(event any, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.JSON {
		b, err := json.Marshal(event)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"event": "error", "error": err.Error()})
		}
		p.W.Write(append(b, '\n'))
		return
	}
	io.WriteString(p.W, text)
}

// Number is a float64 that JSON writes as null when it is NaN or infinite:
// JSON has no such numbers, encoding/json refuses them, and an event
// holding one (the loss of a skipped step, of a run that took no step)
// would print as an error instead.
type Number float64

// MarshalJSON writes n, or null when it is not finite.
func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// FlagCheck collects the first bad flag of a command: each check names
// the flag and its value, and Err wraps ErrUsage.
type FlagCheck struct{ Err error }

// Fail records that -name's value is not what want says.
func (c *FlagCheck) Fail(name string, value any, want string) {
	if c.Err == nil {
		c.Err = fmt.Errorf("%w: -%s %v, want %s", ErrUsage, name, value, want)
	}
}

// Sizes records err, a library's check of the sizes some flags give (a
// loader's or a model's Validate: products that overflow, counts past a
// maximum), as a usage error naming the flags.
func (c *FlagCheck) Sizes(flags string, err error) {
	if c.Err == nil && err != nil {
		c.Err = fmt.Errorf("%w: %s: %v", ErrUsage, flags, err)
	}
}

func (c *FlagCheck) Positive(name string, v int64) {
	if v <= 0 {
		c.Fail(name, v, "> 0")
	}
}

func (c *FlagCheck) NonNegative(name string, v int64) {
	if v < 0 {
		c.Fail(name, v, ">= 0")
	}
}

// Finite checks v is finite and at least min.
func (c *FlagCheck) Finite(name string, v, min float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < min {
		c.Fail(name, v, fmt.Sprintf("a finite number >= %g", min))
	}
}

// OneOf checks v is one of allowed ("a, b or c" in the message).
func (c *FlagCheck) OneOf(name, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	want := allowed[len(allowed)-1]
	if n := len(allowed); n > 1 {
		want = strings.Join(allowed[:n-1], ", ") + " or " + want
	}
	c.Fail(name, strconv.Quote(v), want)
}

// Device checks a -device spec has one of devices.Open's forms, without
// opening it.
func (c *FlagCheck) Device(v string) {
	switch {
	case v == "auto" || v == "cpu" || v == "cuda":
		return
	case strings.HasPrefix(v, "cuda:"):
		if n, err := strconv.Atoi(v[len("cuda:"):]); err == nil && n >= 0 {
			return
		}
	}
	c.Fail("device", strconv.Quote(v), "auto, cpu, cuda or cuda:N with N a GPU ordinal")
}

// Recurrent checks the flags of a recurrent stack's shape that every
// example has: -cell lstm|gru, -embed, -hidden and -layers positive,
// -dropout in [0, 1).
func (c *FlagCheck) Recurrent(cell string, embed, hidden, layers int, dropout float64) {
	c.OneOf("cell", cell, "lstm", "gru")
	c.Positive("embed", int64(embed))
	c.Positive("hidden", int64(hidden))
	c.Positive("layers", int64(layers))
	if !(dropout >= 0 && dropout < 1) {
		c.Fail("dropout", dropout, "[0, 1)")
	}
}

// stopSignals end a run the way Ctrl-C does.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// OnSignal returns a context cancelled by the first stop signal (SIGINT,
// SIGTERM, SIGHUP), and a function that tells which signal that was (nil:
// none). The first signal lets the run stop at a step boundary and save; after it
// the signals' default actions are back, so a second one kills the
// process.
func OnSignal(parent context.Context) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	var got atomic.Value
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	go func() {
		select {
		case s := <-sigs:
			got.Store(s)
			signal.Reset(stopSignals...)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() os.Signal {
		s, _ := got.Load().(os.Signal)
		return s
	}
}

// ExitStatus is the process's exit status for a run that returned err
// after sig (nil: no signal) arrived: 2 for an error wrapping ErrUsage,
// 128 plus the signal's number when a signal ended the run and it saved
// its work, 1 for any other error, a checkpoint that could not be saved
// after the signal (a *train.SaveError) included, 0 for none.
func ExitStatus(err error, sig os.Signal) int {
	var unsaved *train.SaveError
	switch {
	case errors.Is(err, ErrUsage):
		return 2
	case errors.As(err, &unsaved):
		return 1
	case sig != nil && (err == nil || errors.Is(err, context.Canceled)):
		if n, ok := sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 1
	case err != nil:
		return 1
	}
	return 0
}
