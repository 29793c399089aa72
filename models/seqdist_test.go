package models_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/mpi"
	"github.com/gocurrent/gocurrent/internal/mpitest"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// seqDPResult is what a data-parallel sequence run reports: the losses
// and norms of its steps, the tokens, and the parameters at the end.
type seqDPResult struct {
	Losses, Norms, Params []float64
	Tokens                []int64
}

// seqDPBuckets are the job's batches: 10 examples, 2 a step.
var seqDPBuckets = loader.BucketConfig{Batch: 10, Accum: 2, Pool: 3, Shuffle: true, Seed: 5}

// seqDPRun trains the float64 tagger or classifier of data for 6 steps of
// the job's batches of 10, accumulated 2 at a time, on this rank's shares
// (comm nil: one process, the whole batches), with class weights.
func seqDPRun(t *testing.T, d device.Device, comm dist.Comm, data *loader.Dataset) seqDPResult {
	t.Helper()
	sh := loader.Shard{}
	if comm != nil {
		sh = loader.Shard{Rank: comm.Rank(), Of: comm.Size()}
	}
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: seqDPBuckets, Shard: sh})
	check(t, err)
	defer l.Close()
	m := seqModel(t, d, data, "lstm", 0)
	defer m.Close()
	weights := make([]float64, data.Labels.Len())
	for i := range weights {
		weights[i] = 0.5 + float64(i%3)
	}
	opt, err := train.NewOptimizer(train.Adam, 1e-2)
	check(t, err)
	var r seqDPResult
	cfg := train.Config{Optimizer: opt, ClipNorm: 0.5, Steps: 6, Comm: comm, OnStep: func(p train.Progress) {
		r.Losses, r.Norms, r.Tokens = append(r.Losses, p.Loss), append(r.Norms, p.GradNorm), append(r.Tokens, p.Tokens)
	}}
	tr, err := train.NewSeq(d, m, l, cfg, train.SeqOptions{Weights: weights})
	check(t, err)
	defer tr.Close()
	_, err = tr.Run(context.Background())
	check(t, err)
	r.Params = params(t, d, m.Groups())
	return r
}

// TestSeqDataParallelRank is a rank of TestSeqDataParallel's jobs, under
// mpirun only: it trains on GOCURRENT_SEQ_DATA and rank 0 writes the
// result to GOCURRENT_SEQ_OUT.
func TestSeqDataParallelRank(t *testing.T) {
	if _, ok := mpitest.Rank(); !ok {
		t.Skip("a rank of TestSeqDataParallel: runs under mpirun only")
	}
	w, err := mpi.Join(dist.Config{})
	check(t, err)
	defer w.Close()
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	defer d.Close()
	comm, err := mpi.New(d, w, dist.Config{Timeout: time.Minute})
	check(t, err)
	defer comm.Close()
	data, err := loader.OpenDataset(context.Background(), os.Getenv("GOCURRENT_SEQ_DATA"), loader.DatasetConfig{})
	check(t, err)
	defer data.Close()
	r := seqDPRun(t, d, comm, data)
	if comm.Rank() == 0 {
		js, err := json.Marshal(r)
		check(t, err)
		check(t, os.WriteFile(os.Getenv("GOCURRENT_SEQ_OUT"), js, 0o644))
	}
}

// TestSeqDataParallel checks data-parallel training on labelled
// sequences over Open MPI: 3 ranks, each with its share of every batch of
// 10 (4, 3, 3 examples, and nothing for a rank past the examples of a
// smaller batch at a bucket's end), take the steps one process takes with
// the whole batches: a step's mean is over the whole batch's real rows,
// weighted, whatever share a rank has. The bound is TestSeqAccumulation's
// (float64, the sums added in another order).
func TestSeqDataParallel(t *testing.T) {
	mpitest.Require(t)
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	defer d.Close()
	for _, kind := range []string{"tagger", "classifier"} {
		t.Run(kind, func(t *testing.T) {
			path := writeTagged(t, 62, 1)
			if kind == "classifier" {
				path = writeLabelled(t, 62, 1)
			}
			data, err := loader.OpenDataset(context.Background(), path, loader.DatasetConfig{})
			check(t, err)
			defer data.Close()
			// The first epoch has a batch smaller than the job (62 = 6·10
			// + 2), of which the third rank gets nothing.
			lengths := make([]int32, data.Len())
			for i := range lengths {
				lengths[i] = int32(data.Length(i))
			}
			bs, err := loader.Buckets(lengths, seqDPBuckets, 0)
			check(t, err)
			small := false
			for _, b := range bs {
				small = small || len(b) < 3
			}
			if !small {
				t.Fatal("no batch of fewer than 3 examples: the test no longer covers an empty share")
			}
			want := seqDPRun(t, d, nil, data)
			out := filepath.Join(t.TempDir(), "rank0.json")
			mpitest.Run(t, 3, "TestSeqDataParallelRank", 2*time.Minute, "GOCURRENT_SEQ_DATA="+path, "GOCURRENT_SEQ_OUT="+out).Check(t, kind+" on 3 ranks")
			js, err := os.ReadFile(out)
			check(t, err)
			var got seqDPResult
			check(t, json.Unmarshal(js, &got))
			if len(got.Losses) != len(want.Losses) {
				t.Fatalf("%d steps on 3 ranks, %d on one process", len(got.Losses), len(want.Losses))
			}
			for s := range want.Losses {
				if !(math.Abs(got.Losses[s]-want.Losses[s]) <= 1e-9) || !(math.Abs(got.Norms[s]-want.Norms[s]) <= 1e-9) || got.Tokens[s] != want.Tokens[s] {
					t.Errorf("step %d: loss %v, norm %v, tokens %d on 3 ranks; %v, %v, %d on one process", s+1,
						got.Losses[s], got.Norms[s], got.Tokens[s], want.Losses[s], want.Norms[s], want.Tokens[s])
				}
			}
			worst := maxDiff(got.Params, want.Params)
			if !(worst <= 1e-9) { // a NaN too
				t.Errorf("parameters differ by up to %g after 6 steps; want ≤ 1e-9", worst)
			}
			t.Logf("%s: 3 ranks within %g of one process after %d steps", kind, worst, len(want.Losses))
		})
	}
}
