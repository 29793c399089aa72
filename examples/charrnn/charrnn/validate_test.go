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
)

// Every bad flag of every command is a usage error that names the flag and
// its value, found before any work: nothing printed, no checkpoint written.
// The command lines are otherwise small and valid, so a flag that slipped
// through would train (or sample, evaluate, measure) and succeed.
func TestBadFlags(t *testing.T) {
	dev := testdevice.Spec(t)
	ckpt := fixtures.TorchCheckpoint("lstm")
	bench := []string{"bench", "-device", dev, "-hidden", "8", "-layers", "1", "-batch", "2", "-seq", "4", "-steps", "1", "-n", "1"}
	for _, tc := range []struct {
		name string
		args []string // after the command's valid base
		say  string
	}{
		{"train batch 0", []string{"train", "-batch", "0"}, "-batch 0"},
		{"train batch negative", []string{"train", "-batch", "-3"}, "-batch -3"},
		{"train seq 0", []string{"train", "-seq", "0"}, "-seq 0"},
		{"train accum 0", []string{"train", "-accum", "0"}, "-accum 0"},
		{"train max-skips -1", []string{"train", "-skip-nonfinite", "-max-skips", "-1"}, "-max-skips -1"},
		{"train pipeline -1", []string{"train", "-pipeline", "-1"}, "-pipeline -1"},
		{"train pipeline word", []string{"train", "-pipeline", "many"}, "-pipeline"},
		{"train sample negative", []string{"train", "-sample", "-1"}, "-sample -1"},
		{"train val-tokens negative", []string{"train", "-val-tokens", "-1"}, "-val-tokens -1"},
		{"train temperature negative", []string{"train", "-temperature", "-0.5"}, "-temperature -0.5"},
		{"train temperature NaN", []string{"train", "-temperature", "NaN"}, "-temperature NaN"},
		{"train temperature Inf", []string{"train", "-temperature", "+Inf"}, "-temperature +Inf"},
		{"train plot not png", []string{"train", "-plot", filepath.Join(t.TempDir(), "loss.jpg")}, "-plot"},
		{"train embed 0", []string{"train", "-embed", "0"}, "-embed 0"},
		{"train hidden negative", []string{"train", "-hidden", "-1"}, "-hidden -1"},
		{"train layers 0", []string{"train", "-layers", "0"}, "-layers 0"},
		{"train dropout 1", []string{"train", "-dropout", "1"}, "-dropout 1"},
		{"train cell", []string{"train", "-cell", "rnn"}, `-cell "rnn"`},
		{"train lr 0", []string{"train", "-lr", "0"}, "-lr 0"},
		{"train lr NaN", []string{"train", "-lr", "NaN"}, "-lr NaN"},
		{"train clip negative", []string{"train", "-clip", "-1"}, "-clip -1"},
		{"train warmup negative", []string{"train", "-warmup", "-1"}, "-warmup -1"},
		{"train eval-every negative", []string{"train", "-eval-every", "-1"}, "-eval-every -1"},
		{"train log-every negative", []string{"train", "-log-every", "-1"}, "-log-every -1"},
		{"train checkpoint-every negative", []string{"train", "-checkpoint-every", "-1"}, "-checkpoint-every -1"},
		{"train cuda ordinal", []string{"train", "-device", "cuda:-1"}, `-device "cuda:-1"`},
		// '#' is not among the fixture corpus's 40 characters: found once
		// the text has given the vocabulary, before the first step.
		{"train prime outside vocabulary", []string{"train", "-prime", "#"}, "-prime"},
		{"sample n negative", []string{"sample", "-checkpoint", ckpt, "-n", "-1"}, "-n -1"},
		{"sample temperature negative", []string{"sample", "-checkpoint", ckpt, "-temperature", "-1"}, "-temperature -1"},
		{"sample temperature Inf", []string{"sample", "-checkpoint", ckpt, "-temperature", "Inf"}, "-temperature +Inf"},
		{"sample top-k negative", []string{"sample", "-checkpoint", ckpt, "-top-k", "-2"}, "-top-k -2"},
		{"eval batch 0", []string{"eval", "-checkpoint", ckpt, "-data", corpusPath, "-batch", "0"}, "-batch 0"},
		{"eval seq negative", []string{"eval", "-checkpoint", ckpt, "-data", corpusPath, "-seq", "-4"}, "-seq -4"},
		{"bench cell", append(bench[:len(bench):len(bench)], "-cell", "rnn"), `-cell "rnn"`},
		{"bench hidden 0", append(bench[:len(bench):len(bench)], "-hidden", "0"), "-hidden 0"},
		{"bench layers 0", append(bench[:len(bench):len(bench)], "-layers", "0"), "-layers 0"},
		{"bench batch 0", append(bench[:len(bench):len(bench)], "-batch", "0"), "-batch 0"},
		{"bench seq 0", append(bench[:len(bench):len(bench)], "-seq", "0"), "-seq 0"},
		{"bench n 0", append(bench[:len(bench):len(bench)], "-n", "0"), "-n 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run.safetensors")
			args := tc.args
			switch args[0] {
			case "train":
				args = smallTrain(t, out, append([]string{"-steps", "1", "-sample", "10"}, args[1:]...)...)
			case "sample", "eval":
				args = append([]string{args[0], "-device", dev}, args[1:]...)
			}
			stdout, _, err := run(t, context.Background(), args...)
			if !errors.Is(err, charrnn.ErrUsage) {
				t.Fatalf("%q: error %v, want one wrapping ErrUsage", args, err)
			}
			if !strings.Contains(err.Error(), tc.say) {
				t.Errorf("error %q, want one saying %q", err, tc.say)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing: the flag is checked before any work", stdout)
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the run wrote %s (stat: %v)", out, err)
			}
		})
	}
}

// A fresh train does not replace a checkpoint it did not start from,
// unless -force says so; resuming from it may.
func TestTrainRefusesOverwrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.safetensors")
	if _, _, err := run(t, ctx, smallTrain(t, ckpt, "-steps", "2")...); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.safetensors")
	if err := os.WriteFile(other, first, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{{"-steps", "1"}, {"-steps", "1", "-init", ckpt}, {"-steps", "3", "-resume", other}} {
		stdout, _, err := run(t, ctx, smallTrain(t, ckpt, extra...)...)
		if !errors.Is(err, charrnn.ErrUsage) || !errors.Is(err, charrnn.ErrOutput) {
			t.Fatalf("%v: error %v, want one wrapping ErrUsage and ErrOutput", extra, err)
		}
		for _, s := range []string{ckpt, "-force", "-resume"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v: error %q, want one saying %q", extra, err, s)
			}
		}
		if stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", extra, stdout)
		}
		if now, _ := os.ReadFile(ckpt); !bytes.Equal(now, first) {
			t.Errorf("%v: the refused run changed %s", extra, ckpt)
		}
	}
	for _, extra := range [][]string{{"-steps", "3", "-resume", ckpt}, {"-steps", "1", "-force"}} {
		if _, _, err := run(t, ctx, smallTrain(t, ckpt, extra...)...); err != nil {
			t.Errorf("%v: %v", extra, err)
		}
	}
	if now, _ := os.ReadFile(ckpt); bytes.Equal(now, first) {
		t.Errorf("-force left %s as it was", ckpt)
	}
	probes, _ := filepath.Glob(filepath.Join(dir, ".*probe-*"))
	if len(probes) > 0 {
		t.Errorf("probe files left behind: %v", probes)
	}
}

// An output train cannot write is found before the first step.
func TestTrainUnwritableOutputs(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "file"), []byte("x"))
	readOnly := filepath.Join(dir, "read-only")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		rootSkip   bool // permission bits do not stop root
	}{
		{"directory", dir, false},
		{"missing directory", filepath.Join(dir, "missing", "out"), false},
		{"under a file", filepath.Join(file, "out"), false},
		{"under /proc", "/proc/charrnn-out", false},
		{"read-only directory", filepath.Join(readOnly, "out"), true},
	} {
		for _, flagName := range []string{"checkpoint", "plot"} {
			t.Run(tc.name+" "+flagName, func(t *testing.T) {
				if tc.rootSkip && os.Geteuid() == 0 {
					t.Skip("running as root, which writes into a read-only directory; the other cases cover a directory that refuses files")
				}
				path, ckpt := tc.path, filepath.Join(t.TempDir(), "run.safetensors")
				args := smallTrain(t, ckpt, "-steps", "1")
				if flagName == "checkpoint" {
					path += ".safetensors"
					if tc.name == "directory" {
						path = tc.path
					}
					args = append(args, "-checkpoint", path)
				} else {
					path += ".png"
					if tc.name == "directory" {
						path = filepath.Join(dir, "dir.png")
						if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
							t.Fatal(err)
						}
					}
					args = append(args, "-plot", path)
				}
				stdout, _, err := run(t, context.Background(), args...)
				if !errors.Is(err, charrnn.ErrUsage) || !errors.Is(err, charrnn.ErrOutput) {
					t.Fatalf("error %v, want one wrapping ErrUsage and ErrOutput", err)
				}
				if !strings.Contains(err.Error(), "-"+flagName+" "+path) {
					t.Errorf("error %q, want one naming -%s %s", err, flagName, path)
				}
				if stdout != "" {
					t.Errorf("stdout %q, want nothing: the output is checked before the first step", stdout)
				}
			})
		}
	}
}
