package seqcli

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/internal/mpitest"
)

// TestTrainRank is one rank of TestTrainDataParallel's job, under mpirun
// only: it runs the tagger's command line GOCURRENT_SEQCLI_ARGS (JSON)
// with the launcher's variables, and rank 0 writes its stdout to
// GOCURRENT_SEQCLI_OUT.
func TestTrainRank(t *testing.T) {
	rank, ok := mpitest.Rank()
	if !ok {
		t.Skip("a rank of TestTrainDataParallel: runs under mpirun only")
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv("GOCURRENT_SEQCLI_ARGS")), &args); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errs, CacheDir: t.TempDir(), Getenv: os.Getenv}
	if err := Run(context.Background(), Tagging, args, env); err != nil {
		t.Fatalf("rank %d: %v\n%s", rank, err, errs.String())
	}
	if rank == 0 {
		if err := os.WriteFile(os.Getenv("GOCURRENT_SEQCLI_OUT"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if out.Len() > 0 {
		t.Errorf("rank %d printed to stdout, which is rank 0's:\n%s", rank, out.String())
	}
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
	js, _ := json.Marshal(args(filepath.Join(dir, "two.safetensors")))
	stdout := filepath.Join(dir, "rank0.out")
	mpitest.Run(t, 2, "TestTrainRank", 2*time.Minute, "GOCURRENT_SEQCLI_ARGS="+string(js), "GOCURRENT_SEQCLI_OUT="+stdout).Check(t, "tagger train on 2 ranks")
	two, err := os.ReadFile(stdout)
	if err != nil {
		t.Fatal(err)
	}
	steps := func(out string) []map[string]any {
		var s []map[string]any
		for _, ev := range jsonLines(t, out) {
			if ev["event"] == "step" {
				s = append(s, ev)
			}
		}
		return s
	}
	a, b := steps(one), steps(string(two))
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("%d and %d step events, want 6 each", len(a), len(b))
	}
	for i := range a {
		la, lb := a[i]["loss"].(float64), b[i]["loss"].(float64)
		if math.Abs(la-lb) > 1e-4*math.Abs(la) {
			t.Errorf("step %d: loss %v on one process, %v on 2 ranks", i+1, la, lb)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "two.safetensors")); err != nil {
		t.Errorf("rank 0 wrote no checkpoint: %v", err)
	}
	if !strings.Contains(string(two), `"ranks":2`) {
		t.Errorf("rank 0's done event does not say 2 ranks:\n%s", two)
	}
}
