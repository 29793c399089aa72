// Command memfig measures the memory figures of docs/guide.md (the README's until issue 47) on the CPU device:
// the planner against the measured peaks of the same runs, the time the
// automatic batch size takes (planned, and with real training steps), and
// the peak memory of a training step against the sequence length with and
// without recomputation, drawn to docs/memory-recompute.png. It prints a
// Markdown table per figure.
//
//	go run ./internal/cmd/memfig [-only recompute] [-png docs/memory-recompute.png]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/plot"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

func main() {
	log.SetFlags(0)
	only := flag.String("only", "", "one figure: planner, batch or recompute")
	png := flag.String("png", "docs/memory-recompute.png", "where the recomputation figure goes")
	flag.Parse()
	ctx := context.Background()
	for _, f := range []struct {
		name string
		run  func(context.Context) error
	}{{"planner", plannerTable}, {"batch", batchTable}, {"recompute", func(ctx context.Context) error { return recomputeFigure(ctx, *png) }}} {
		if *only != "" && *only != f.name {
			continue
		}
		if err := f.run(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// recomputeFigure measures, on the CPU device, as the window grows, with
// and without recomputation through time: the peak memory of the
// char-RNN's training steps (LSTM 2x256, embedding 64, batch 32, no
// validation), and the activations the recurrent stack alone keeps for
// its backward (the same stack over a random input). It plots them.
func recomputeFigure(ctx context.Context, png string) error {
	fmt.Println("| window (steps) | char-RNN step peak, plain | recompute auto | stack's kept activations, plain | recompute auto | step time, plain | recompute auto |")
	fmt.Println("|---|---|---|---|---|---|---|")
	var curves [4]plot.Curve
	curves[0].Name, curves[1].Name = "char-RNN step peak, plain", "char-RNN step peak, recompute auto"
	curves[2].Name, curves[3].Name = "stack's kept activations, plain", "stack's kept activations, recompute auto"
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	const B, E, H = 32, 64, 256
	for _, T := range []int{64, 128, 256, 512, 1024, 2048} {
		var peak, kept [2]int64
		var took [2]time.Duration
		for i, k := range []int{0, rnn.RecomputeAuto} {
			spec := models.MemorySpec{CharRNN: &models.CharRNNConfig{Cell: "lstm", Embed: E, Hidden: H, Layers: 2, Recompute: k},
				Vocab: 97, Batch: B, Seq: T}
			d, err := cpu.Open(cpu.Config{})
			if err != nil {
				return err
			}
			t0 := time.Now()
			r, err := models.MeasureMemory(ctx, d, spec)
			took[i] = time.Since(t0) / 2 // two steps
			if err == nil {
				kept[i], err = stackActivations(d, rnn.Config{Input: E, Hidden: H, Layers: 2, Recompute: k}, T, B)
			}
			if cerr := d.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			plan, err := models.PlanMemory(ctx, meta.Config{Name: "cpu"}, spec)
			if err != nil {
				return err
			}
			if plan.Report.PeakAllocated != r.PeakAllocated {
				fmt.Fprintf(os.Stderr, "memfig: T %d, recompute %d: planned %d, measured %d\n", T, k, plan.Report.PeakAllocated, r.PeakAllocated)
			}
			peak[i] = r.PeakAllocated
			curves[i].X, curves[i].Y = append(curves[i].X, float64(T)), append(curves[i].Y, mib(peak[i]))
			curves[2+i].X, curves[2+i].Y = append(curves[2+i].X, float64(T)), append(curves[2+i].Y, mib(kept[i]))
		}
		fmt.Printf("| %d | %s | %s | %s | %s | %.2f s | %.2f s (%+.0f%%) |\n", T, alloc.FormatSize(peak[0]), alloc.FormatSize(peak[1]),
			alloc.FormatSize(kept[0]), alloc.FormatSize(kept[1]),
			took[0].Seconds(), took[1].Seconds(), 100*(took[1].Seconds()/took[0].Seconds()-1))
	}
	fmt.Println()
	return plot.WriteFile(png, plot.Chart{Title: "LSTM 2x256, batch 32: training memory by window",
		XLabel: "window (steps of truncated backpropagation)", YLabel: "MiB", Curves: curves[:]})
}

// stackActivations is the Activations peak of one training forward and
// backward of a stack of configuration c over a random [T, B, Input]
// input on d: what the stack keeps for its backward (its reserve; the
// input is the caller's, kept by reference).
func stackActivations(d *cpu.Device, c rnn.Config, T, B int) (int64, error) {
	m, err := rnn.NewLSTM(context.Background(), d, c)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	x, err := d.Alloc(int64(T*B*c.Input)*4, device.Batches)
	if err != nil {
		return 0, err
	}
	defer d.Free(x)
	dy, err := d.Alloc(int64(T*B*c.Hidden)*4, device.Workspace)
	if err != nil {
		return 0, err
	}
	defer d.Free(dy)
	k := d.Kernels()
	if err := errors.Join(k.Fill(device.Fill{DType: device.Float32, N: T * B * c.Input, X: x, Value: 0.5}),
		k.Fill(device.Fill{DType: device.Float32, N: T * B * c.Hidden, X: dy, Value: 0.01})); err != nil {
		return 0, err
	}
	before := d.MemStats().CategoryBytes[alloc.Activations].Current
	d.Memory().ResetPeak()
	if _, err := m.Forward(rnn.Train, x, T, B, nil); err != nil {
		return 0, err
	}
	if _, err := m.Backward(dy); err != nil {
		return 0, err
	}
	if err := d.Synchronize(); err != nil {
		return 0, err
	}
	return d.MemStats().CategoryBytes[alloc.Activations].Peak - before, nil
}

// runs are the planner's figure: the char-RNN of the README's quick start
// and larger ones, the tagger and the classifier.
func runs() []struct {
	name string
	spec models.MemorySpec
} {
	lengths := make([]int, 400)
	for i := range lengths {
		lengths[i] = 1 + (i*7919)%120
	}
	return []struct {
		name string
		spec models.MemorySpec
	}{
		{"char-RNN LSTM 2x256, batch 32 x 64", models.MemorySpec{CharRNN: &models.CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 2},
			Vocab: 97, Batch: 32, Seq: 64, Validate: true}},
		{"char-RNN GRU 3x512, batch 64 x 128, accum 2", models.MemorySpec{CharRNN: &models.CharRNNConfig{Cell: "gru", Embed: 64, Hidden: 512, Layers: 3, Dropout: 0.2},
			Vocab: 97, Batch: 64, Seq: 128, Accum: 2}},
		{"tagger bi-LSTM 128 + char features, lengths 1-120", models.MemorySpec{Tagger: &models.TaggerConfig{Cell: "lstm", Embed: 100, Hidden: 128,
			Bidirectional: true, Layers: 1, CharEmbed: 16, CharHidden: 32}, Vocab: 20000, Classes: 17, Chars: 100, LongestWord: 20,
			Batch: 32, Seq: 120, Lengths: lengths}},
		{"classifier bi-GRU 256 x 2, max pool, lengths 1-120, 2000-token budget", models.MemorySpec{Classifier: &models.ClassifierConfig{Cell: "gru",
			Embed: 100, Hidden: 256, Layers: 2, Bidirectional: true, Pool: models.PoolMax}, Vocab: 20000, Classes: 10,
			Batch: 64, Seq: 120, Lengths: lengths, MaxTokens: 2000}},
	}
}

func plannerTable(ctx context.Context) error {
	fmt.Println("| run | planned peak (allocated / reserved) | measured on the CPU device | planning | run |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range runs() {
		t0 := time.Now()
		plan, err := models.PlanMemory(ctx, meta.Config{Name: "cpu"}, r.spec)
		if err != nil {
			return err
		}
		planned := time.Since(t0)
		d, err := cpu.Open(cpu.Config{})
		if err != nil {
			return err
		}
		t0 = time.Now()
		got, err := models.MeasureMemory(ctx, d, r.spec)
		measured := time.Since(t0)
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %s / %s | %s / %s | %.2f s | %.2f s |\n", r.name,
			alloc.FormatSize(plan.Report.PeakAllocated), alloc.FormatSize(plan.Report.PeakReserved),
			alloc.FormatSize(got.PeakAllocated), alloc.FormatSize(got.PeakReserved), planned.Seconds(), measured.Seconds())
		if plan.Report.PeakAllocated != got.PeakAllocated || plan.Report.PeakReserved != got.PeakReserved {
			fmt.Fprintf(os.Stderr, "memfig: %s: the plan and the run differ\n", r.name)
		}
	}
	fmt.Println()
	return nil
}

// batchTable times -batch auto's search for the quick start's model under
// memory limits, with real training steps on the CPU device (FitBatch)
// and planned ones (PlanBatch).
func batchTable(ctx context.Context) error {
	spec := models.MemorySpec{CharRNN: &models.CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 2}, Vocab: 97, Batch: 8, Seq: 64,
		Optimizer: train.Adam}
	fmt.Println("| memory limit | batch found | its peak | search by training steps (trials) | seeded by the plan (trials) | planned search |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, limit := range []int64{256 << 20, 1 << 30} {
		var found [2]models.FitResult
		for i, plan := range []*meta.Config{nil, {Name: "cpu"}} {
			d, err := cpu.Open(cpu.Config{Memory: alloc.Config{MemoryLimit: limit}})
			if err != nil {
				return err
			}
			found[i], err = models.FitBatch(ctx, d, spec, models.FitConfig{Plan: plan})
			if cerr := d.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		res, seeded := found[0], found[1]
		if seeded.Spec.Batch != res.Spec.Batch {
			fmt.Fprintf(os.Stderr, "memfig: the seeded search found %d, the plain one %d\n", seeded.Spec.Batch, res.Spec.Batch)
		}
		planned, err := models.PlanBatch(ctx, meta.Config{Name: "cpu"}, spec, models.FitConfig{Limit: limit})
		if err != nil {
			return err
		}
		same := ""
		if planned.Spec.Batch != res.Spec.Batch {
			same = fmt.Sprintf(" (batch %d)", planned.Spec.Batch)
		}
		fmt.Printf("| %s | %d | %s | %.1f s (%d) | %.1f s (%d) | %.2f s%s |\n", alloc.FormatSize(limit), res.Spec.Batch, alloc.FormatSize(res.PeakReserved),
			res.Elapsed.Seconds(), len(res.Trials), seeded.Elapsed.Seconds(), len(seeded.Trials), planned.Elapsed.Seconds(), same)
	}
	fmt.Println()
	return nil
}
