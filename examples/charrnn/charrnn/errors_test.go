package charrnn_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Bad input gives an error a caller can match, and a failed training run
// writes no checkpoint and leaves an existing one as it was.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dev := testdevice.Spec(t)
	torchBytes, err := os.ReadFile(fixtures.TorchCheckpoint("lstm"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		empty = writeFile(t, filepath.Join(dir, "empty.txt"), nil)
		// 10 characters; one window of the default -seq 64 needs 65 per
		// stream, of 32 streams.
		short = writeFile(t, filepath.Join(dir, "short.txt"), []byte("abcdefghij"))
		// '#' (byte 10) is not among the fixture corpus's 40 characters.
		outside   = writeFile(t, filepath.Join(dir, "outside.txt"), []byte("The river #"))
		truncated = writeFile(t, filepath.Join(dir, "truncated.safetensors"), torchBytes[:100])
		missing   = filepath.Join(dir, "missing.safetensors")
		wrongFmt  = filepath.Join(dir, "wrong-format.safetensors")
	)
	saveWeights(t, fixtures.TorchCheckpoint("lstm"), wrongFmt, map[string]string{"format": "someone.else/2"})

	var dataErr *loader.DataError
	for _, tc := range []struct {
		name string
		args []string
		// The error wraps is, or is a *loader.DataError at byte dataAt
		// when is is nil; it says substr.
		is     error
		dataAt int64
		substr string
	}{
		{"no command", nil, charrnn.ErrUsage, 0, "no command"},
		{"unknown command", []string{"frobnicate"}, charrnn.ErrUsage, 0, `"frobnicate"`},
		{"unknown flag", []string{"train", "-frobnicate"}, charrnn.ErrUsage, 0, "frobnicate"},
		{"bad flag value", []string{"train", "-batch", "many"}, charrnn.ErrUsage, 0, "many"},
		{"stray argument", []string{"eval", "extra"}, charrnn.ErrUsage, 0, `"extra"`},
		{"train unknown device", []string{"train", "-data", corpusPath, "-device", "tpu"}, charrnn.ErrUsage, 0, `"tpu"`},
		{"sample unknown device", []string{"sample", "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-device", "tpu"}, charrnn.ErrUsage, 0, `"tpu"`},
		{"bad cuda ordinal", []string{"eval", "-device", "cuda:x"}, charrnn.ErrUsage, 0, "cuda:x"},
		{"init and resume", []string{"train", "-data", corpusPath, "-init", fixtures.TorchCheckpoint("lstm"), "-resume", fixtures.TorchCheckpoint("lstm")}, charrnn.ErrUsage, 0, "-init and -resume"},
		{"negative steps", []string{"train", "-data", corpusPath, "-device", dev, "-steps", "-1"}, charrnn.ErrUsage, 0, "-steps -1"},
		{"negative epochs", []string{"train", "-data", corpusPath, "-device", dev, "-epochs", "-2"}, charrnn.ErrUsage, 0, "-epochs -2"},
		// A 0 given was read as the default, 1,000 steps (issue 47).
		{"steps 0", []string{"train", "-data", corpusPath, "-device", dev, "-steps", "0"}, charrnn.ErrUsage, 0, "-steps 0, want > 0"},
		{"epochs 0", []string{"train", "-data", corpusPath, "-device", dev, "-epochs", "0"}, charrnn.ErrUsage, 0, "-epochs 0, want > 0"},
		{"val-frac 1", []string{"train", "-data", corpusPath, "-device", dev, "-val-frac", "1"}, charrnn.ErrUsage, 0, "-val-frac"},
		{"unknown optimizer", []string{"train", "-data", corpusPath, "-device", dev, "-optimizer", "lion"}, charrnn.ErrUsage, 0, "lion"},
		{"unknown schedule", []string{"train", "-data", corpusPath, "-device", dev, "-schedule", "step"}, charrnn.ErrUsage, 0, "step"},
		{"bench no steps", []string{"bench", "-device", dev, "-steps", "0"}, charrnn.ErrUsage, 0, "-steps 0"},
		{"bench graphs", []string{"bench", "-device", dev, "-graphs", "yes"}, charrnn.ErrUsage, 0, "-graphs"},
		{"train graphs", []string{"train", "-data", corpusPath, "-device", dev, "-graphs", "1"}, charrnn.ErrUsage, 0, "-graphs"},
		{"missing data", []string{"train", "-data", filepath.Join(dir, "nothing.txt"), "-device", dev}, fs.ErrNotExist, 0, "nothing.txt"},
		{"empty corpus", []string{"train", "-data", empty, "-device", dev}, loader.ErrEmpty, 0, "empty"},
		{"corpus too short", []string{"train", "-data", short, "-device", dev}, loader.ErrTooShort, 0, "too short"},
		{"train init missing", []string{"train", "-data", corpusPath, "-device", dev, "-init", missing}, fs.ErrNotExist, 0, "missing.safetensors"},
		{"train init truncated", []string{"train", "-data", corpusPath, "-device", dev, "-init", truncated}, train.ErrCorrupt, 0, "truncated.safetensors"},
		{"train resume truncated", []string{"train", "-data", corpusPath, "-device", dev, "-resume", truncated}, train.ErrCorrupt, 0, "truncated.safetensors"},
		{"train init wrong format", []string{"train", "-data", corpusPath, "-device", dev, "-init", wrongFmt}, train.ErrMismatch, 0, "someone.else/2"},
		// Adam moves every weight by about lr in its first step. An lr
		// of 1e39 is above float32's largest value (3.4e38): it rounds
		// to +Inf, so step 1 leaves every weight ±Inf (NaN where the
		// gradient is 0: Inf·0), and step 2's loss is NaN on any IEEE
		// device. (Finite weights of ±1e30 are not enough everywhere:
		// only their products overflow, and whether +Inf and -Inf then
		// meet in a sum (NaN) depends on the GEMM; a chain of fused
		// multiply-adds, as cuBLAS computes a dot product, keeps the
		// first Inf it reaches, and the loss stays finite, about 1e30.)
		{"non-finite loss", []string{"train", "-data", corpusPath, "-device", dev, "-embed", "8", "-hidden", "16", "-seq", "16", "-batch", "4",
			"-val-frac", "0", "-steps", "3", "-lr", "1e39"}, train.ErrNonFinite, 0, "step 2"},
		{"sample missing", []string{"sample", "-device", dev, "-checkpoint", missing}, fs.ErrNotExist, 0, "missing.safetensors"},
		{"eval missing", []string{"eval", "-device", dev, "-data", corpusPath, "-checkpoint", missing}, fs.ErrNotExist, 0, "missing.safetensors"},
		{"sample truncated", []string{"sample", "-device", dev, "-checkpoint", truncated}, train.ErrCorrupt, 0, "truncated.safetensors"},
		{"eval truncated", []string{"eval", "-device", dev, "-data", corpusPath, "-checkpoint", truncated}, train.ErrCorrupt, 0, "truncated.safetensors"},
		{"sample wrong format", []string{"sample", "-device", dev, "-checkpoint", wrongFmt}, train.ErrMismatch, 0, "someone.else/2"},
		{"eval wrong format", []string{"eval", "-device", dev, "-data", corpusPath, "-checkpoint", wrongFmt}, train.ErrMismatch, 0, "someone.else/2"},
		{"eval outside vocabulary", []string{"eval", "-device", dev, "-data", outside, "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-batch", "1", "-seq", "4"}, nil, 10, "outside.txt"},
		{"prime outside vocabulary", []string{"sample", "-device", dev, "-checkpoint", fixtures.TorchCheckpoint("lstm"), "-prime", "#"}, nil, -1, "-prime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isTrain := len(tc.args) > 0 && tc.args[0] == "train"
			variants := []string{""}
			if isTrain {
				variants = []string{"new checkpoint", "existing checkpoint"}
			}
			for _, variant := range variants {
				ckpt := filepath.Join(t.TempDir(), "run.safetensors")
				args := tc.args
				var before []byte
				if isTrain {
					args = append(append([]string(nil), args...), "-checkpoint", ckpt)
					if variant == "existing checkpoint" {
						// -force: the run may replace the checkpoint,
						// and must not when it fails.
						writeFile(t, ckpt, torchBytes)
						before = torchBytes
						args = append(args, "-force")
					}
				}
				_, _, err := run(t, ctx, args...)
				switch {
				case err == nil:
					t.Fatalf("%s: %v: no error", variant, tc.args)
				case tc.is != nil && !errors.Is(err, tc.is):
					t.Errorf("%s: error %q, want one wrapping %q", variant, err, tc.is)
				case tc.is == nil && tc.dataAt >= 0 && !errors.As(err, &dataErr):
					t.Errorf("%s: error %q (%T), want a *loader.DataError", variant, err, err)
				case tc.is == nil && tc.dataAt >= 0 && dataErr.Offset != tc.dataAt:
					t.Errorf("%s: error %q at byte %d, want byte %d", variant, err, dataErr.Offset, tc.dataAt)
				}
				if err != nil && !strings.Contains(err.Error(), tc.substr) {
					t.Errorf("%s: error %q, want one saying %q", variant, err, tc.substr)
				}
				if !isTrain {
					continue
				}
				after, rerr := os.ReadFile(ckpt)
				if errors.Is(tc.is, train.ErrNonFinite) {
					// The state before the failing step is whole: it is
					// saved, marked as where the run diverged.
					ck, err := train.ReadCheckpoint(ckpt)
					if err != nil || !strings.Contains(ck.Metadata()["trainer"], `"stopped":"non-finite step `) {
						t.Errorf("%s: after a non-finite step, %s: %v, want the state before it, marked stopped", variant, ckpt, err)
					}
					continue
				}
				switch {
				case before == nil && !errors.Is(rerr, fs.ErrNotExist):
					t.Errorf("%s: the failed run wrote %s (%d bytes, read error %v)", variant, ckpt, len(after), rerr)
				case before != nil && !bytes.Equal(after, before):
					t.Errorf("%s: the failed run changed %s: %d bytes, were %d (read error %v)", variant, ckpt, len(after), len(before), rerr)
				}
			}
		})
	}
}

// help and -h print usage and are not errors.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stdout string // what stdout says, or "" for nothing
		stderr string // what stderr says
	}{
		{[]string{"help"}, "usage: charrnn", ""},
		{[]string{"-h"}, "usage: charrnn", ""},
		{[]string{"train", "-h"}, "", "-checkpoint"},
		// The default corpus is described as what it is.
		{[]string{"train", "-h"}, "", "hand-written, ASCII-only Go files of the standard library"},
		{[]string{"help"}, "hand-written ASCII\n          Go files of the standard library", ""},
		{[]string{"train", "-h", "-json"}, "", "-checkpoint"},
		{[]string{"sample", "-h"}, "", "-temperature"},
		{[]string{"eval", "-h"}, "", "-data"},
		{[]string{"bench", "-h"}, "", "-hidden"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, err := run(t, context.Background(), tc.args...)
			if err != nil {
				t.Fatalf("error %v, want none", err)
			}
			if tc.stdout == "" && stdout != "" || !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q, want it to say %q", stderr, tc.stderr)
			}
		})
	}
}

// WantsJSON reads -json as the command does: a flag's value that happens
// to be "-json" is not the flag, and a command line that does not parse
// counts any -json in it.
func TestWantsJSON(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"train", "-json"}, true},
		{[]string{"train", "--json=true"}, true},
		{[]string{"sample", "-json=false"}, false},
		{[]string{"train", "-prime", "-json"}, false}, // -prime's text
		{[]string{"eval", "-no-such-flag", "-json"}, true},
		{[]string{"frobnicate", "-json"}, true},
		{[]string{"bench"}, false},
		{nil, false},
	} {
		if got := charrnn.WantsJSON(tc.args); got != tc.want {
			t.Errorf("WantsJSON(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// With -json every line of output is a JSON object, errors included
// (Report's "error" event) and the warnings a command goes on despite,
// and nothing goes to stderr: before, errors and warnings were text on
// stderr, and a bad flag also printed the flag package's usage there.
func TestJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"train", "-accum", "0", "-json"}, 2, "-accum 0"},
		{[]string{"train", "-no-such-flag", "-json"}, 2, "no-such-flag"},
		{[]string{"frobnicate", "-json"}, 2, `unknown command "frobnicate"`},
		{[]string{"eval", "-json", "-device", "cpu", "-checkpoint", filepath.Join(t.TempDir(), "none.safetensors")}, 1, "none.safetensors"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var o, e bytes.Buffer
			env := testEnv(t, &o, &e)
			err := charrnn.Run(context.Background(), tc.args, env)
			if err == nil {
				t.Fatal("no error")
			}
			charrnn.Report(env, tc.args, err, tc.status)
			evs := events(t, o.String())
			errs := ofEvent(evs, "error")
			if len(errs) != 1 || len(evs) != 1 {
				t.Fatalf("stdout %q, want one error event", o.String())
			}
			if msg, _ := errs[0]["error"].(string); !strings.Contains(msg, tc.says) || strings.HasPrefix(msg, "charrnn:") {
				t.Errorf("error event %v, want it to say %q (without a charrnn: prefix)", errs[0], tc.says)
			}
			if errs[0]["exit_status"] != float64(tc.status) {
				t.Errorf("error event %v, want exit_status %d", errs[0], tc.status)
			}
			if e.Len() != 0 {
				t.Errorf("stderr %q, want nothing with -json", e.String())
			}
		})
	}
	// Without -json: the text on stderr, the unknown command named.
	var o, e bytes.Buffer
	env := testEnv(t, &o, &e)
	args := []string{"frobnicate"}
	err := charrnn.Run(context.Background(), args, env)
	charrnn.Report(env, args, err, 2)
	if o.Len() != 0 || !strings.Contains(e.String(), `charrnn: usage: unknown command "frobnicate"`) {
		t.Errorf("unknown command: stdout %q, stderr %q", o.String(), e.String())
	}
}

// A warning (here: too little held-out text for validation) is a
// "warning" event with -json, a line on stderr without.
func TestJSONWarnings(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	// -val-frac 0.001 holds out 5 characters, too few for 4 x 17.
	args := smallTrain(t, ckpt, "-batch", "4", "-steps", "1", "-val-frac", "0.001")
	stdout, stderr, err := run(t, context.Background(), append(args, "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	w := ofEvent(events(t, stdout), "warning")
	if len(w) != 1 || !strings.Contains(w[0]["warning"].(string), "no validation") || stderr != "" {
		t.Errorf("-json: warnings %v, stderr %q; want one warning event saying no validation, and nothing on stderr", w, stderr)
	}
	_, stderr, err = run(t, context.Background(), append(args, "-force")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "charrnn: no validation") {
		t.Errorf("stderr %q, want the warning", stderr)
	}
}
