package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/mpi"
	"github.com/gocurrent/gocurrent/dist/nccl"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/mpitest"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// The data-parallel runs of these tests: the job's batch is 6 streams,
// accumulated over 2 micro-batches, in float64, so that what separates N
// ranks from one process is the order of the sums alone.
const (
	dpBatch = 6
	dpSteps = 6
)

// dpTol bounds how far N ranks' weights and losses may be from one
// process's with the undivided batch (TestAccumulation's bound, and for
// the same reason): a gradient element is the same sum of at most
// Seq·6·2 = 192 products, which one process adds inside its GEMMs and N
// ranks add in N parts and then over the ranks (MPI_Allreduce, in its own
// order), so the two differ by ≲ 192·2⁻⁵³ ≈ 2e-14 relative to the sum of
// the terms' magnitudes; Adam passes that into 6 (or 12) updates scaled by lr =
// 0.01. 1e-12 leaves a conditioning of ~300, and is orders of magnitude
// below a wrong weighting (a loss not divided by the ranks doubles the
// update) or a rank reading another's rows.
const dpTol = 1e-12

// dpRun trains the test model on this process's share of the job's batch
// (rank of ranks) from a fresh model, or from the checkpoint resume, to
// step steps, saving at the end to save; it returns the losses reported.
func dpRun(t *testing.T, d device.Device, comm dist.Comm, steps int64, resume, save string) []float64 {
	t.Helper()
	rank, ranks := 0, 1
	if comm != nil {
		rank, ranks = comm.Rank(), comm.Size()
	}
	m := newLM(t, d, lmConfig{vocab: 11, embed: 5, hidden: 9, layers: 2, dtype: device.Float64, seed: uint64(7 + 10*rank)})
	l := newLoader(t, d, text(t, 4000, 11, 5), loader.Config{Batch: dpBatch / ranks, Accum: 2, Seq: 16, Shard: loader.Shard{Rank: rank, Of: ranks}})
	var model train.Model = m
	var nm *notifyingLM
	if ranks == 3 {
		// The 3 ranks' model says when each group's gradient is ready,
		// which the trainer sums while the backward goes on.
		nm = &notifyingLM{lm: m}
		model = nm
	}
	var losses []float64
	tr := newTrainer(t, d, model, l, train.Config{Optimizer: adam(t, 0.01), Steps: steps, ClipNorm: 0.5, Checkpoint: save, Comm: comm,
		OnStep: func(p train.Progress) { losses = append(losses, p.Loss) }})
	if resume != "" {
		ck, err := train.ReadCheckpoint(resume)
		check(t, err)
		check(t, tr.Resume(ck))
	}
	start := tr.Step()
	_, err := tr.Run(context.Background())
	check(t, err)
	if nm != nil && nm.notified != 4*int(tr.Step()-start) {
		t.Errorf("the model's gradients were taken when ready %d times in %d steps, want 4 a step (out, 2 layers, emb)", nm.notified, tr.Step()-start)
	}
	return losses
}

// notifyingLM is lm with train.GradNotifier: its Backward reports the
// output layer's gradient, then each layer of the stack's (top first, as
// soon as its backward is queued), then the embedding's.
type notifyingLM struct {
	*lm
	ready    func(group, off, n int) error
	notified int
}

func (m *notifyingLM) NotifyGrads(ready func(group, off, n int) error) { m.ready = ready }

type layerNotifier interface {
	NotifyLayers(func(int) error)
	LayerGrads(int) (int, int)
	Backward(device.Buffer) (device.Buffer, error)
}

func (m *notifyingLM) Backward(dl device.Buffer) error {
	notify := func(i, off, n int) error {
		if m.ready == nil {
			return nil
		}
		m.notified++
		return m.ready(i, off, n)
	}
	dy, err := m.out.Backward(dl)
	if err == nil {
		err = notify(2, 0, m.out.Params().Len())
	}
	if err != nil {
		return err
	}
	var st layerNotifier = m.lstm
	if m.gru != nil {
		st = m.gru
	}
	st.NotifyLayers(func(l int) error {
		off, n := st.LayerGrads(l)
		return notify(1, off, n)
	})
	defer st.NotifyLayers(nil)
	dx, err := st.Backward(dy)
	if err == nil {
		err = m.emb.Backward(dx)
	}
	if err == nil {
		err = notify(0, 0, m.emb.Params().Len())
	}
	return err
}

// checkpointValues is the weights of a checkpoint, as float64 by name.
func checkpointValues(t *testing.T, path string) map[string][]float64 {
	t.Helper()
	d, err := cpu.Open(cpu.Config{})
	check(t, err)
	defer d.Close()
	m := newLM(t, d, lmConfig{vocab: 11, embed: 5, hidden: 9, layers: 2, dtype: device.Float64, seed: 1})
	ck, err := train.ReadCheckpoint(path)
	check(t, err)
	check(t, ck.LoadWeights(d, m.Groups()))
	return values(t, m.Groups())
}

// TestDataParallelRank is one rank of TestDataParallel's jobs, run under
// mpirun (it does nothing elsewhere). GOCURRENT_DP_CASE says what to run:
// "train" (to dpSteps, and to half of them, saving both), "resume FILE"
// (from FILE to dpSteps), "hang" (rank 1 never joins), "kill" (rank 1 is
// killed after 2 steps).
func TestDataParallelRank(t *testing.T) {
	if _, ok := mpitest.Rank(); !ok {
		t.Skip("a rank of TestDataParallel: runs under mpirun only")
	}
	dir, what := os.Getenv("GOCURRENT_DP_DIR"), os.Getenv("GOCURRENT_DP_CASE")
	timeout, _ := time.ParseDuration(os.Getenv("GOCURRENT_DP_TIMEOUT"))
	w, err := mpi.Join(dist.Config{})
	check(t, err)
	defer w.Close()
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	defer d.Close()
	comm, err := mpi.New(d, w, dist.Config{Timeout: timeout})
	check(t, err)
	defer comm.Close()
	rank, n := comm.Rank(), comm.Size()
	out := func(name string) string { return filepath.Join(dir, fmt.Sprintf("%s-%d.safetensors", name, n)) }
	switch {
	case what == "train":
		losses := dpRun(t, d, comm, dpSteps, "", out("dp"))
		dpRun(t, d, comm, dpSteps/2, "", out("dp-half"))
		if rank == 0 {
			js, _ := json.Marshal(losses)
			check(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("losses-%d.json", n)), js, 0o644))
		}
	case strings.HasPrefix(what, "resume "):
		from := strings.TrimPrefix(what, "resume ")
		dpRun(t, d, comm, dpSteps, from, out("resumed-"+filepath.Base(from)))
	case what == "cancel":
		// Rank 1 is cancelled at its step 3; every rank stops after the
		// same step, and rank 0 saves it.
		m := newLM(t, d, lmConfig{vocab: 11, embed: 5, hidden: 9, layers: 2, dtype: device.Float64, seed: uint64(7 + 10*rank)})
		l := newLoader(t, d, text(t, 4000, 11, 5), loader.Config{Batch: dpBatch / n, Accum: 2, Seq: 16, Shard: loader.Shard{Rank: rank, Of: n}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pipeline, _ := strconv.Atoi(os.Getenv("GOCURRENT_DP_PIPELINE"))
		tr := newTrainer(t, d, m, l, train.Config{Optimizer: adam(t, 0.01), Steps: 2 * dpSteps, ClipNorm: 0.5, Checkpoint: out("cancelled"), Comm: comm, Pipeline: pipeline,
			OnStep: func(p train.Progress) {
				if rank == 1 && p.Step == 3 {
					cancel()
				}
			}})
		_, err := tr.Run(ctx)
		if !errors.Is(err, train.ErrRankStopped) || !errors.Is(err, context.Canceled) {
			t.Fatalf("rank %d: Run: %v, want ErrRankStopped", rank, err)
		}
		check(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("stopped-%d", rank)), []byte(strconv.FormatInt(tr.Step(), 10)), 0o644))
	case what == "hang" && rank == 1:
		time.Sleep(time.Hour) // never joins the first broadcast
	case what == "kill" && rank == 1:
		m := newLM(t, d, lmConfig{vocab: 11, embed: 5, hidden: 9, layers: 2, dtype: device.Float64, seed: 7})
		l := newLoader(t, d, text(t, 4000, 11, 5), loader.Config{Batch: 3, Seq: 16, Shard: loader.Shard{Rank: 1, Of: 2}})
		tr := newTrainer(t, d, m, l, train.Config{Steps: 50, Comm: comm, OnStep: func(p train.Progress) {
			if p.Step == 2 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}})
		tr.Run(context.Background())
	case what == "hang" || what == "kill":
		m := newLM(t, d, lmConfig{vocab: 11, embed: 5, hidden: 9, layers: 2, dtype: device.Float64, seed: 7})
		l := newLoader(t, d, text(t, 4000, 11, 5), loader.Config{Batch: 3, Seq: 16, Shard: loader.Shard{Rank: rank, Of: 2}})
		tr := newTrainer(t, d, m, l, train.Config{Steps: 50, Comm: comm})
		_, err := tr.Run(context.Background())
		// The watchdog ends the job (MPI_Abort) before Run returns.
		t.Fatalf("rank %d: Run returned (%v) instead of the job being stopped", rank, err)
	default:
		t.Fatalf("unknown case %q", what)
	}
}

// TestDataParallel checks data-parallel training over Open MPI against
// one process: 2 and 3 ranks with batch 6/N each take the steps one
// process with batch 6 takes (weights and losses within dpTol), and a
// checkpoint written by 2 ranks at step 3 continues to step 6 on 1 rank
// and on 2 as the uninterrupted run does, as does one process's
// checkpoint on 2 ranks.
func TestDataParallel(t *testing.T) {
	mpitest.Require(t)
	dir := t.TempDir()
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	defer d.Close()
	one := filepath.Join(dir, "dp-1.safetensors")
	single := dpRun(t, d, nil, dpSteps, "", one)
	oneHalf := filepath.Join(dir, "dp-half-1.safetensors")
	dpRun(t, d, nil, dpSteps/2, "", oneHalf)
	want := checkpointValues(t, one)

	env := func(c string) []string { return []string{"GOCURRENT_DP_DIR=" + dir, "GOCURRENT_DP_CASE=" + c} }
	for _, n := range []int{2, 3} {
		mpitest.Run(t, n, "TestDataParallelRank", 2*time.Minute, env("train")...).Check(t, fmt.Sprintf("%d ranks", n))
		got := checkpointValues(t, filepath.Join(dir, fmt.Sprintf("dp-%d.safetensors", n)))
		diff := maxDiff(t, want, got)
		if diff > dpTol {
			t.Errorf("%d ranks: weights after %d steps differ from one process's by %g, want ≤ %g", n, dpSteps, diff, dpTol)
		}
		t.Logf("%d ranks: weights after %d steps within %g of one process's", n, dpSteps, diff)
		js, err := os.ReadFile(filepath.Join(dir, "losses-"+strconv.Itoa(n)+".json"))
		check(t, err)
		var losses []float64
		check(t, json.Unmarshal(js, &losses))
		if len(losses) != len(single) {
			t.Fatalf("%d ranks reported %d losses, one process %d", n, len(losses), len(single))
		}
		for i := range losses {
			if !(math.Abs(losses[i]-single[i]) <= dpTol) {
				t.Errorf("%d ranks: step %d loss %v, one process %v", n, i+1, losses[i], single[i])
			}
		}
	}

	// Resume the 2 ranks' half-way checkpoint on one process and on 2
	// ranks, and one process's on 2 ranks.
	twoHalf := filepath.Join(dir, "dp-half-2.safetensors")
	resumedOne := filepath.Join(dir, "resumed-on-1.safetensors")
	dpRun(t, d, nil, dpSteps, twoHalf, resumedOne)
	mpitest.Run(t, 2, "TestDataParallelRank", 2*time.Minute, env("resume "+twoHalf)...).Check(t, "resuming 2 ranks' checkpoint on 2")
	mpitest.Run(t, 2, "TestDataParallelRank", 2*time.Minute, env("resume "+oneHalf)...).Check(t, "resuming one process's checkpoint on 2")
	for _, c := range []struct{ what, path string }{
		{"2 ranks' checkpoint resumed on one process", resumedOne},
		{"2 ranks' checkpoint resumed on 2", filepath.Join(dir, "resumed-dp-half-2.safetensors-2.safetensors")},
		{"one process's checkpoint resumed on 2 ranks", filepath.Join(dir, "resumed-dp-half-1.safetensors-2.safetensors")},
	} {
		diff := maxDiff(t, want, checkpointValues(t, c.path))
		if diff > dpTol {
			t.Errorf("%s: weights at step %d differ from the uninterrupted run's by %g, want ≤ %g", c.what, dpSteps, diff, dpTol)
		}
		t.Logf("%s: weights at step %d within %g of the uninterrupted run's", c.what, dpSteps, diff)
	}
}

// TestDataParallelCancel checks a data-parallel run that one rank's ctx
// stops: every rank stops after the same step, rank 0's checkpoint holds
// that step, and resuming it on one process ends where the uninterrupted
// run does. Rank 1 is cancelled in its OnStep of step 3. Reading each step
// back at its end, the vote is counted at step 4, the next to end; with 3
// steps queued before a read-back (Config.Pipeline), later, at the same
// step on both ranks.
func TestDataParallelCancel(t *testing.T) {
	mpitest.Require(t)
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	defer d.Close()
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.safetensors")
	dpRun(t, d, nil, 2*dpSteps, "", straight)
	for _, pipeline := range []int{0, 3} {
		t.Run(fmt.Sprint("pipeline", pipeline), func(t *testing.T) {
			dir := t.TempDir()
			mpitest.Run(t, 2, "TestDataParallelRank", 2*time.Minute, "GOCURRENT_DP_DIR="+dir, "GOCURRENT_DP_CASE=cancel",
				"GOCURRENT_DP_PIPELINE="+strconv.Itoa(pipeline)).Check(t, "2 ranks, one cancelled")
			var stopped [2]string
			for r := range 2 {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("stopped-%d", r)))
				check(t, err)
				stopped[r] = string(b)
			}
			step, _ := strconv.ParseInt(stopped[0], 10, 64)
			if stopped[0] != stopped[1] || step < 4 || step >= 2*dpSteps || pipeline == 0 && step != 4 {
				t.Fatalf("the ranks stopped after steps %s and %s, want both after the same step, 4 without a pipeline, before %d", stopped[0], stopped[1], 2*dpSteps)
			}
			ckpt := filepath.Join(dir, "cancelled-2.safetensors")
			ck, err := train.ReadCheckpoint(ckpt)
			check(t, err)
			rec, err := ck.Record()
			check(t, err)
			if rec.Step != step {
				t.Fatalf("the checkpoint holds step %d, want %d", rec.Step, step)
			}
			resumed := filepath.Join(dir, "resumed.safetensors")
			dpRun(t, d, nil, 2*dpSteps, ckpt, resumed)
			if diff := maxDiff(t, checkpointValues(t, straight), checkpointValues(t, resumed)); diff > dpTol {
				t.Errorf("stopped after step %d, resumed on one process: weights at step %d differ from the uninterrupted run's by %g, want ≤ %g", step, 2*dpSteps, diff, dpTol)
			}
			t.Logf("pipeline %d: both ranks stopped after step %d", pipeline, step)
		})
	}
}

// TestDataParallelFailure checks that a rank that hangs, or is killed,
// stops the whole job with an error, within the deadline: never a hang.
func TestDataParallelFailure(t *testing.T) {
	mpitest.Require(t)
	const timeout = 2 * time.Second
	for _, c := range []struct {
		what, says string
	}{
		{"hang", "not done after"},
		{"kill", "signal 9"},
	} {
		t.Run(c.what, func(t *testing.T) {
			r := mpitest.Run(t, 2, "TestDataParallelRank", time.Minute,
				"GOCURRENT_DP_DIR="+t.TempDir(), "GOCURRENT_DP_CASE="+c.what, "GOCURRENT_DP_TIMEOUT="+timeout.String())
			var exit *exec.ExitError
			if r.Err == nil || !errors.As(r.Err, &exit) {
				t.Fatalf("mpirun: %v, want a failed job\n%s", r.Err, r)
			}
			if !strings.Contains(string(r.Output), c.says) {
				t.Errorf("the job's output does not say %q:\n%s", c.says, r)
			}
			// Starting 2 ranks takes about a second here; the deadline is 2 s.
			if limit := 20 * time.Second; r.Elapsed > limit {
				t.Errorf("the job took %v to stop, want under %v", r.Elapsed, limit)
			}
			t.Logf("%s: the job stopped after %v", c.what, r.Elapsed.Round(time.Millisecond))
		})
	}
}

// TestEmulatedDataParallelNCCL runs TestDataParallel's job of 2 ranks on the CUDA
// device over NCCL, both in the emulator (internal/cudaemu: the real cgo
// bindings of the driver, cuBLAS and NCCL, and an in-process NCCL whose
// ranks are goroutines): the sums queued on the collectives' own stream,
// the compute stream waiting on their events. Its 2 ranks take the steps
// one emulated device takes with the whole batch, within dpTol.
func TestEmulatedDataParallelNCCL(t *testing.T) {
	lib := cudaemu.ForTest(t)
	open := func(t *testing.T) *cuda.Device {
		d, err := cuda.Open(cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path()})
		check(t, err)
		t.Cleanup(func() { d.Close() })
		return d
	}
	dir := t.TempDir()
	one := filepath.Join(dir, "one.safetensors")
	dpRun(t, open(t), nil, dpSteps, "", one)
	cfg := dist.Config{NCCLLibrary: lib.Path(), Timeout: time.Minute}
	id, err := nccl.NewUniqueID(cfg)
	check(t, err)
	t.Run("ranks", func(t *testing.T) {
		for r := range 2 {
			t.Run(fmt.Sprint(r), func(t *testing.T) {
				t.Parallel()
				d := open(t)
				c, err := nccl.Open(d, r, 2, id, cfg)
				check(t, err)
				defer c.Close()
				dpRun(t, d, c, dpSteps, "", filepath.Join(dir, "two.safetensors"))
			})
		}
	})
	if diff := maxDiff(t, checkpointValues(t, one), checkpointValues(t, filepath.Join(dir, "two.safetensors"))); diff > dpTol {
		t.Errorf("2 ranks over NCCL: weights after %d steps differ from one device's by %g, want ≤ %g", dpSteps, diff, dpTol)
	} else {
		t.Logf("2 ranks over NCCL: weights after %d steps within %g of one device's", dpSteps, diff)
	}
}
