// Command memfig measures the README's memory figures on the CPU device:
// the planner against the measured peaks of the same runs, and the time
// the automatic batch size takes (planned, and with real training steps).
// It prints a Markdown table per figure.
//
//	go run ./internal/cmd/memfig
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

func main() {
	log.SetFlags(0)
	ctx := context.Background()
	if err := plannerTable(ctx); err != nil {
		log.Fatal(err)
	}
	if err := batchTable(ctx); err != nil {
		log.Fatal(err)
	}
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
