package charrnn_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/testdevice"
)

// memoryFlags are the flags plan and train share in these tests: the
// small model of smallTrain, no validation.
func memoryFlags(t *testing.T) []string {
	return []string{"-data", corpusPath, "-device", testdevice.Spec(t), "-cell", "lstm", "-embed", "16", "-hidden", "32",
		"-layers", "2", "-seq", "16", "-val-frac", "0"}
}

// TestPlanMatchesTrain plans a run and trains it: the plan's peak and
// each category's peak are what -memstats then reports, to the byte. The
// last run has dropout and replays its second step as device graphs
// (-graphs on), which keep what was live while they were recorded.
func TestPlanMatchesTrain(t *testing.T) {
	ctx := context.Background()
	for _, flags := range [][]string{{"-batch", "4"}, {"-batch", "24"}, {"-batch", "4", "-dropout", "0.2", "-graphs", "on"}} {
		batch := strings.Join(flags, " ")
		out, _, err := run(t, ctx, append(append(append([]string{"plan"}, memoryFlags(t)...), flags...), "-json")...)
		if err != nil {
			t.Fatal(err)
		}
		plans := ofEvent(events(t, out), "plan")
		if len(plans) != 1 {
			t.Fatalf("%d plan events in %s", len(plans), out)
		}
		plan := plans[0]
		if plan["fits"] != true {
			t.Errorf("batch %s does not fit: %v", batch, plan)
		}
		ckpt := filepath.Join(t.TempDir(), "run.safetensors")
		out, _, err = run(t, ctx, smallTrain(t, ckpt, append(flags, "-steps", "2", "-memstats", "-json")...)...)
		if err != nil {
			t.Fatal(err)
		}
		ms := ofEvent(events(t, out), "memstats")
		if len(ms) != 1 {
			t.Fatalf("%d memstats events", len(ms))
		}
		for _, field := range []string{"peak_allocated_bytes", "peak_reserved_bytes"} {
			if plan[field] != ms[0][field] || plan[field].(float64) <= 0 {
				t.Errorf("batch %s: planned %s %v, trained %v", batch, field, plan[field], ms[0][field])
			}
		}
		planned, measured := plan["categories"].(map[string]any), ms[0]["categories"].(map[string]any)
		for _, cat := range []string{"parameters", "gradients", "optimizer_state", "activations", "workspace", "batches", "state"} {
			p, _ := planned[cat].(map[string]any)
			m, _ := measured[cat].(map[string]any)
			if p == nil || m == nil || p["peak"] != m["peak"] || p["at_peak"] != m["at_peak"] {
				t.Errorf("batch %s, %s: planned %v, trained %v", batch, cat, p, m)
			}
		}
		if _, ok := measured["other"]; ok {
			t.Errorf("untagged memory: %v", measured["other"])
		}
	}
}

// bigCorpus is the fixture corpus written 40 times into a file of the
// test's, 238 KB: room for batches of hundreds of windows of 64.
func bigCorpus(t *testing.T) string {
	text, err := os.ReadFile(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.txt")
	if err := os.WriteFile(path, bytes.Repeat(text, 40), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// memoryLimit is a -memory-limit of room bytes on top of what the test
// device reserves for itself when it opens under that limit (the CUDA
// device's cuBLAS workspace, a sixteenth of the limit up to 32 MiB;
// nothing on the CPU) and, with branch, for the branch the model's stack
// opens (as much again for the branch's handle), and that limit in bytes.
// (A search of the batch that fits wants the branch's room: without it
// every trial step failed to open the branch, an out-of-memory error each,
// and the search ran twice as long over the emulator. What the device
// reserves is measured under the limit it then makes: measured without
// one, the 32 MiB workspaces made the CUDA device's room some 60 MiB more
// than asked for, and its trial steps over the emulator some three times
// as long.)
func memoryLimit(t *testing.T, room int64, branch bool) (string, float64) {
	t.Helper()
	var limit int64
	for range 8 {
		cfg := testdevice.CUDAConfig(t)
		cfg.Memory.MemoryLimit = limit
		d, err := devices.Open(testdevice.Spec(t), devices.Config{CUDA: cfg})
		if err != nil {
			t.Fatal(err)
		}
		var b device.Branch
		if branch {
			if b, err = device.NewBranch(d); err != nil {
				t.Fatal(err)
			}
		}
		base := d.MemStats().ReservedBytes[alloc.AllPools].Current
		if b != nil {
			err = b.Close()
		}
		if err := errors.Join(err, d.Close()); err != nil {
			t.Fatal(err)
		}
		if base+room == limit {
			return strconv.FormatInt(limit, 10), float64(limit)
		}
		limit = base + room
	}
	t.Fatalf("what the device reserves under a limit of room %d on top of it does not settle (last limit %d)", room, limit)
	return "", 0
}

// TestBatchAuto trains with the largest batch that fits a memory limit,
// found by trial steps; the run then stays within the limit.
func TestBatchAuto(t *testing.T) {
	flag, limit := memoryLimit(t, 24<<20, true)
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	data := bigCorpus(t)
	out, _, err := run(t, context.Background(), smallTrain(t, ckpt, "-data", data, "-batch", "auto", "-memory-limit", flag, "-seq", "64",
		"-hidden", "64", "-steps", "1", "-memstats", "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	b := ofEvent(evs, "batch")
	if len(b) != 1 {
		t.Fatalf("%d batch events in %s", len(b), out)
	}
	batch, peak := b[0]["batch"].(float64), b[0]["peak_reserved_bytes"].(float64)
	if batch < 2 || peak > 0.95*limit || b[0]["limit_bytes"].(float64) != limit {
		t.Errorf("batch event %v: want a batch > 1 whose peak is within 95%% of the limit, %v", b[0], limit)
	}
	ms := ofEvent(evs, "memstats")
	if len(ms) != 1 || ms[0]["peak_reserved_bytes"].(float64) > limit || ms[0]["ooms"].(float64) != 0 {
		t.Errorf("memstats after the run %v: want a peak within the limit and no out-of-memory error (the search's are not the run's)", ms)
	}
	// With -effective-batch the accumulation keeps the streams of a step.
	out, _, err = run(t, context.Background(), smallTrain(t, ckpt, "-data", data, "-batch", "auto", "-effective-batch", "128", "-memory-limit", flag,
		"-seq", "64", "-hidden", "64", "-steps", "1", "-force", "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	if b := ofEvent(events(t, out), "batch"); len(b) != 1 || b[0]["batch"].(float64)*b[0]["accum"].(float64) != 128 || b[0]["accum"].(float64) < 2 {
		t.Errorf("-effective-batch 128: %v, want batch x accum = 128", b)
	}
	for _, bad := range [][]string{
		{"-effective-batch", "64"},                                  // without -batch auto
		{"-batch", "auto", "-effective-batch", "64", "-accum", "2"}, // both set the accumulation
		{"-batch", "auto", "-resume", ckpt},                         // the resumed run's batch is recorded
		{"-batch", "none"},
		{"-memory-limit", "lots"},
	} {
		_, _, err := run(t, context.Background(), smallTrain(t, ckpt, bad...)...)
		if !errors.Is(err, charrnn.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
}

// TestOutOfMemoryAdvice runs out of memory and checks the error carries
// the planner's advice.
func TestOutOfMemoryAdvice(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	flag, _ := memoryLimit(t, 24<<20, false)
	_, _, err := run(t, context.Background(), smallTrain(t, ckpt, "-data", bigCorpus(t), "-batch", "200", "-seq", "64", "-hidden", "64",
		"-memory-limit", flag, "-steps", "1")...)
	if err == nil {
		t.Fatal("batch 200 trained within 24 MiB more than the device holds for itself")
	}
	for _, s := range []string{"out of memory", "Planner: the run needs", "activations", "largest batch that fits is", "accumulated"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q:\n%v", s, err)
		}
	}
}

// TestRecomputeFlag plans and trains with -recompute auto: the plan is
// what the run then reports, and it keeps fewer activations than without.
// (Batch 64 of 64 steps: the stack's chunks are 4 steps, so the segments
// of ⌈√64⌉ = 8 steps are not rounded up to the window.)
func TestRecomputeFlag(t *testing.T) {
	ctx := context.Background()
	data := bigCorpus(t)
	flags := append(memoryFlags(t), "-data", data, "-batch", "64", "-seq", "64", "-json")
	activations := func(ev map[string]any) float64 {
		return ev["categories"].(map[string]any)["activations"].(map[string]any)["peak"].(float64)
	}
	plans := map[string]map[string]any{}
	for _, k := range []string{"0", "auto"} {
		out, _, err := run(t, ctx, append(append([]string{"plan"}, flags...), "-recompute", k)...)
		if err != nil {
			t.Fatal(err)
		}
		if p := ofEvent(events(t, out), "plan"); len(p) == 1 {
			plans[k] = p[0]
		} else {
			t.Fatalf("%d plan events", len(p))
		}
	}
	if a, b := activations(plans["auto"]), activations(plans["0"]); a >= b/2 {
		t.Errorf("planned activations %v with -recompute auto, %v without: want less than half", a, b)
	}
	ckpt := filepath.Join(t.TempDir(), "run.safetensors")
	out, _, err := run(t, ctx, smallTrain(t, ckpt, "-data", data, "-batch", "64", "-seq", "64", "-recompute", "auto", "-steps", "2", "-memstats", "-json")...)
	if err != nil {
		t.Fatal(err)
	}
	ms := ofEvent(events(t, out), "memstats")
	if len(ms) != 1 || ms[0]["peak_allocated_bytes"] != plans["auto"]["peak_allocated_bytes"] || activations(ms[0]) != activations(plans["auto"]) {
		t.Errorf("trained with -recompute auto: %v; planned %v", ms, plans["auto"])
	}
	if _, _, err := run(t, ctx, smallTrain(t, ckpt, "-recompute", "-2", "-force")...); !errors.Is(err, charrnn.ErrUsage) {
		t.Errorf("-recompute -2: %v, want a usage error", err)
	}
}
