package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"syscall"
	"testing"

	"github.com/gocurrent/gocurrent/train"
)

func TestFlagCheck(t *testing.T) {
	var c FlagCheck
	c.OneOf("cell", "lstm", "lstm", "gru")
	c.Positive("batch", 3)
	if c.Err != nil {
		t.Fatalf("valid flags: %v", c.Err)
	}
	c.OneOf("pool", "sum", "last", "mean", "max")
	c.Positive("batch", 0) // not reported: the first bad flag wins
	want := `usage: -pool "sum", want last, mean or max`
	if c.Err == nil || c.Err.Error() != want || !errors.Is(c.Err, ErrUsage) {
		t.Errorf("error %v, want %q wrapping ErrUsage", c.Err, want)
	}
	for _, v := range []string{"tpu", "cuda:-1", "cuda:x"} {
		var c FlagCheck
		if c.Device(v); c.Err == nil {
			t.Errorf("-device %s accepted", v)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		sig  os.Signal
		want int
	}{
		{nil, nil, 0},
		{fmt.Errorf("%w: -batch 0", ErrUsage), nil, 2},
		{errors.New("disk full"), nil, 1},
		{fmt.Errorf("stopped: %w", context.Canceled), syscall.SIGINT, 130},
		{nil, syscall.SIGTERM, 143},
		{errors.New("disk full"), syscall.SIGTERM, 1},
	} {
		if got := ExitStatus(c.err, c.sig); got != c.want {
			t.Errorf("ExitStatus(%v, %v) = %d, want %d", c.err, c.sig, got, c.want)
		}
	}
}

func TestPrinter(t *testing.T) {
	var b bytes.Buffer
	(&Printer{W: &b, JSON: true}).Emit(map[string]any{"event": "x", "n": 1}, "text\n")
	(&Printer{W: &b}).Emit(nil, "text\n")
	if got := b.String(); got != "{\"event\":\"x\",\"n\":1}\ntext\n" {
		t.Errorf("wrote %q", got)
	}
}

// TestNumber: a non-finite Number is null, so the event still prints;
// a float64 NaN makes the printer write an error event instead.
func TestNumber(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{W: &b, JSON: true}
	p.Emit(map[string]any{"event": "x", "a": Number(math.NaN()), "b": Number(math.Inf(-1)), "c": Number(0.25)}, "")
	p.Emit(map[string]any{"event": "x", "a": math.NaN()}, "")
	want := "{\"a\":null,\"b\":null,\"c\":0.25,\"event\":\"x\"}\n{\"error\":\"json: unsupported value: NaN\",\"event\":\"error\"}\n"
	if got := b.String(); got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1000": 1000, "512MiB": 512 << 20, "8GiB": 8 << 30, "1.5GB": 1.5e9, "2 KB": 2000, "64KiB": 64 << 10} {
		var s Size
		if err := s.Set(in); err != nil || int64(s) != want {
			t.Errorf("Size(%q) = %d, %v; want %d", in, s, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "5XB", "1e30"} {
		var s Size
		if err := s.Set(bad); err == nil {
			t.Errorf("Size(%q) = %d, want an error", bad, s)
		}
	}
}

// TestExitStatusUnsaved: a run a signal stopped exits 128 + the signal
// only when it saved its work; a checkpoint that could not be written
// (train.SaveError) makes it 1 (issue 46: a full disk after SIGTERM exited
// 143, which says the checkpoint was saved).
func TestExitStatusUnsaved(t *testing.T) {
	saved := fmt.Errorf("train: stopped after step 430: %w", context.Canceled)
	lost := errors.Join(saved, &train.SaveError{Path: "run.safetensors", Step: 430, Saved: 400, Err: syscall.ENOSPC})
	for _, c := range []struct {
		name string
		err  error
		sig  os.Signal
		want int
	}{
		{"signal, saved", saved, syscall.SIGTERM, 143},
		{"signal, nothing to report", nil, syscall.SIGINT, 130},
		{"signal, save failed", lost, syscall.SIGTERM, 1},
		{"signal, save failed, hang-up", lost, syscall.SIGHUP, 1},
		{"no signal, save failed", lost, nil, 1},
		{"usage", fmt.Errorf("%w: -batch 0", ErrUsage), syscall.SIGTERM, 2},
	} {
		if got := ExitStatus(c.err, c.sig); got != c.want {
			t.Errorf("%s: ExitStatus = %d, want %d", c.name, got, c.want)
		}
	}
}
