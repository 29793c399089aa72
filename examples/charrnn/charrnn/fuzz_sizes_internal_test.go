package charrnn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/sizetest"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// sizeFlags are the train flags whose products size memory.
var sizeFlags = []string{"batch", "seq", "accum", "embed", "hidden", "layers", "pipeline"}

// FuzzSizeFlags: train's size flags drawn from sizetest.Values never
// panic. A command line the checks refuse is a usage error that names a
// flag it gave; one they accept plans (models.PlanMemory, the train run's own
// code on a meta device of 1 GiB) without a panic, fitting or not, and
// stops within a second of its context's deadline when it takes longer
// (65,536 micro-batches a step take their time): whatever sizes pass the
// flag checks, the library takes them without crashing or hanging.
func FuzzSizeFlags(f *testing.F) {
	// The reproductions, as indices into sizetest.Values per flag.
	f.Add([]byte{11, 5, 8, 5, 5, 4, 5})  // -batch 2^40 -accum 2^24
	f.Add([]byte{10, 5, 10, 5, 5, 4, 5}) // -batch 2^32 -accum 2^32
	f.Add([]byte{12, 5, 3, 5, 5, 4, 5})  // -batch 2^62 -accum 2
	f.Add([]byte{5, 5, 2, 12, 5, 4, 5})  // -embed 2^62
	f.Add([]byte{5, 13, 2, 5, 5, 4, 5})  // -seq 2^63-1
	f.Add([]byte{5, 5, 2, 5, 5, 11, 5})  // -layers 2^40
	f.Add([]byte{5, 5, 2, 5, 12, 4, 5})  // -hidden 2^62
	f.Add([]byte{5, 5, 2, 5, 5, 4, 11})  // -pipeline 2^40
	f.Add([]byte{4, 4, 2, 4, 4, 3, 5})   // a run that fits
	f.Fuzz(func(t *testing.T, picks []byte) {
		args := []string{"-data", "unused.txt"}
		for i, name := range sizeFlags {
			args = append(args, "-"+name, fmt.Sprint(sizetest.Pick(picks, i, 64)))
		}
		var fl TrainFlags
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fl.register(fs)
		err := parse(fs, args, Env{}, &fl)
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("%q: %v, want a usage error", args, err)
			}
			if !sizetest.Names(err.Error(), "-", sizeFlags) {
				t.Errorf("%q: %q names none of the size flags", args, err)
			}
			return
		}
		spec := models.MemorySpec{CharRNN: &fl.Model, Vocab: 65, Batch: fl.Batch, Seq: fl.Seq, Accum: fl.Accum, Optimizer: train.Adam}
		sizetest.PlanStops(t, fmt.Sprintf("%q", args), func(ctx context.Context) error {
			_, err := models.PlanMemory(ctx, meta.Config{Capacity: 1 << 30}, spec)
			return err
		})
	})
}
