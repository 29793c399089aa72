package seqcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/sizetest"
	"github.com/gocurrent/gocurrent/models"
)

// sizeFlags are the train flags of the tagger and the classifier whose
// products size memory (the character flags the tagger's only).
var sizeFlags = []string{"batch", "accum", "max-tokens", "embed", "hidden", "layers", "char-embed", "char-hidden"}

// FuzzSizeFlags: the tagger's and the classifier's train size flags drawn
// from sizetest.Values never panic. A command line the checks refuse is a
// usage error naming a flag it gave; one they accept plans two steps of
// sequences of 8 tokens (models.PlanMemory on a meta device of 1 GiB)
// without a panic, fitting or not, and stops within a second of its
// context's deadline when it takes longer.
func FuzzSizeFlags(f *testing.F) {
	f.Add(false, []byte{11, 8, 0, 5, 5, 4, 0, 0}) // -batch 2^40 -accum 2^24
	f.Add(true, []byte{5, 2, 0, 12, 5, 4, 0, 0})  // -embed 2^62
	f.Add(false, []byte{5, 2, 0, 5, 5, 11, 0, 0}) // -layers 2^40
	f.Add(false, []byte{5, 2, 0, 5, 5, 4, 2, 12}) // -char-hidden 2^62
	f.Add(true, []byte{5, 2, 13, 5, 5, 4, 0, 0})  // -max-tokens 2^63-1
	f.Add(false, []byte{5, 2, 0, 5, 5, 4, 5, 5})  // a run that fits
	f.Fuzz(func(t *testing.T, classify bool, picks []byte) {
		task, flags := Tagging, sizeFlags
		if classify {
			task, flags = Classification, sizeFlags[:6]
		}
		args := []string{"-data", "unused.jsonl"}
		for i, name := range flags {
			args = append(args, "-"+name, fmt.Sprint(sizetest.Pick(picks, i, 64)))
		}
		fl := &TrainFlags{task: task}
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		fl.register(fs)
		err := fs.Parse(args)
		if err == nil {
			fl.Explicit = map[string]bool{}
			fs.Visit(func(f *flag.Flag) { fl.Explicit[f.Name] = true })
			err = fl.validate()
		} else {
			err = fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("%q: %v, want a usage error", args, err)
			}
			if !sizetest.Names(err.Error(), "-", flags) {
				t.Errorf("%q: %q names none of the size flags", args, err)
			}
			return
		}
		spec := batching{Batch: fl.Batch, Accum: fl.Accum, MaxTokens: fl.MaxTokens, Optimizer: fl.Optimizer}.spec()
		fl.Model.describe(task, &spec)
		spec.Vocab, spec.Classes, spec.Seq = 10, 3, 8
		if task == Tagging && fl.Model.CharEmbed > 0 {
			spec.Chars = 10
		}
		sizetest.PlanStops(t, fmt.Sprintf("%q", args), func(ctx context.Context) error {
			_, err := models.PlanMemory(ctx, meta.Config{Capacity: 1 << 30}, spec)
			return err
		})
	})
}
