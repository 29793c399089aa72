package charrnn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// sizeValues are the values FuzzSizeFlags draws each size flag from: the
// boundaries of int32 and int64 arithmetic issue 46 asks for (0, -1,
// 2^31, 2^32, 2^62, 2^63-1), 2^40 and 2^24 (batch × accum = 2^64 wrapped
// to 0 before), rnn.MaxLayers (1,024) and one past it, and small sizes that run.
var sizeValues = []int64{0, -1, 1, 2, 3, 64, 1 << 10, 1<<10 + 1, 1 << 24, 1 << 31, 1 << 32, 1 << 40, 1 << 62, math.MaxInt64}

// sizeFlags are the train flags whose products size memory.
var sizeFlags = []string{"batch", "seq", "accum", "embed", "hidden", "layers", "pipeline"}

// FuzzSizeFlags: train's size flags drawn from sizeValues never panic.
// A command line the checks refuse is a usage error that names a flag it
// gave; one they accept plans (models.PlanMemory, the train run's own
// code on a meta device of 1 GiB) without a panic, fitting or not, and
// stops within a second of its context's deadline when it takes longer
// (2^16 micro-batches a step take their time): whatever sizes pass the
// flag checks, the library takes them without crashing or hanging.
func FuzzSizeFlags(f *testing.F) {
	// The reproductions, as indices into sizeValues per flag.
	f.Add([]byte{11, 5, 8, 5, 5, 4, 1})  // -batch 2^40 -accum 2^24
	f.Add([]byte{10, 5, 10, 5, 5, 4, 1}) // -batch 2^32 -accum 2^32
	f.Add([]byte{12, 5, 3, 5, 5, 4, 1})  // -batch 2^62 -accum 4 (3)
	f.Add([]byte{5, 5, 2, 12, 5, 4, 1})  // -embed 2^62
	f.Add([]byte{5, 13, 2, 5, 5, 4, 1})  // -seq 2^63-1
	f.Add([]byte{5, 5, 2, 5, 5, 11, 1})  // -layers 2^40
	f.Add([]byte{5, 5, 2, 5, 12, 4, 1})  // -hidden 2^62
	f.Add([]byte{4, 4, 2, 4, 4, 3, 1})   // a run that fits
	f.Fuzz(func(t *testing.T, picks []byte) {
		args := []string{"-data", "unused.txt"}
		for i, name := range sizeFlags {
			v := sizeValues[0]
			if i < len(picks) {
				v = sizeValues[int(picks[i])%len(sizeValues)]
			} else {
				v = sizeValues[5]
			}
			args = append(args, "-"+name, fmt.Sprint(v))
		}
		var fl TrainFlags
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fl.register(fs)
		err := parse(fs, args, Env{}, &fl)
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("%q: %v, want a usage error", args, err)
			}
			named := false
			for _, name := range sizeFlags {
				named = named || strings.Contains(err.Error(), "-"+name)
			}
			if !named {
				t.Errorf("%q: %q names none of the size flags", args, err)
			}
			return
		}
		const deadline = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		spec := models.MemorySpec{CharRNN: &fl.Model, Vocab: 65, Batch: fl.Batch, Seq: fl.Seq, Accum: fl.Accum, Optimizer: train.Adam}
		start := time.Now()
		_, err = models.PlanMemory(ctx, meta.Config{Capacity: 1 << 30}, spec)
		if took := time.Since(start); took > deadline+time.Second {
			t.Errorf("%q: planning returned %v after its start, its deadline %v (%v)", args, took, deadline, err)
		}
	})
}
