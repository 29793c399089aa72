package seqcli

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/internal/mpitest"
)

// TestTrainRank is one rank of TestTrainDataParallel's job, under
// mpirun: the tagger's command line with the launcher's variables.
func TestTrainRank(t *testing.T) {
	mpitest.CommandRank(t, func(args []string, stdout, stderr io.Writer) error {
		return Run(context.Background(), Tagging, args, Env{Stdout: stdout, Stderr: stderr, CacheDir: t.TempDir(), Getenv: os.Getenv})
	})
}

// TestTrainDataParallel checks `tagger train -dist auto` under mpirun: 2
// ranks, each with its half of every batch of 16, take the steps one
// process takes (-dist none): the same steps and tokens (the job's, whole
// batches), and losses within 1e-4 relative. models.TestSeqDataParallel
// holds the same split to 1e-9 in float64; here the model is float32, whose
// rounding (2⁻²⁴ ≈ 6e-8 a rounding, sums a few hundred deep) leaves the two
// orders of the sums ≲ 1e-5 apart over these steps.
func TestTrainDataParallel(t *testing.T) {
	mpitest.Require(t)
	dir := t.TempDir()
	data := taggedFile(t, dir, 120, 3)
	args := func(ck string) []string {
		return []string{"train", "-data", data, "-embed", "8", "-hidden", "8", "-steps", "6", "-batch", "16", "-lr", "1e-2",
			"-device", "cpu", "-checkpoint", ck, "-json", "-log-every", "1"}
	}
	one, err := run(t, Tagging, "", append(args(filepath.Join(dir, "one.safetensors")), "-dist", "none")...)
	if err != nil {
		t.Fatal(err)
	}
	two := mpitest.RunCommand(t, 2, "TestTrainRank", args(filepath.Join(dir, "two.safetensors")))
	steps := func(out string) []map[string]any {
		var s []map[string]any
		for _, ev := range jsonLines(t, out) {
			if ev["event"] == "step" {
				s = append(s, ev)
			}
		}
		return s
	}
	a, b := steps(one), steps(two)
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("%d and %d step events, want 6 each", len(a), len(b))
	}
	for i := range a {
		la, lb := a[i]["loss"].(float64), b[i]["loss"].(float64)
		if !(math.Abs(la-lb) <= 1e-4*math.Abs(la)) {
			t.Errorf("step %d: loss %v on one process, %v on 2 ranks", i+1, la, lb)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "two.safetensors")); err != nil {
		t.Errorf("rank 0 wrote no checkpoint: %v", err)
	}
	if !strings.Contains(two, `"ranks":2`) {
		t.Errorf("rank 0's done event does not say 2 ranks:\n%s", two)
	}
}
