package svc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/internal/sizetest"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// specFields are the spec's numbers, as JSON paths.
var specFields = []string{"batch", "seq", "accum", "model.embed", "model.hidden", "model.layers", "model.vocab",
	"steps", "memory_limit", "max_skips", "checkpoint_every"}

// FuzzSpec: a POST /jobs body whose numbers are drawn from sizetest.Values
// never panics the decoding or the checks. A spec they refuse is
// ErrInvalid naming a field it set; one they accept plans (the job's run
// on a meta device of 1 GiB, models.PlanMemory, what the job's CheckFits
// does) without a panic and stops within a second of its deadline.
func FuzzSpec(f *testing.F) {
	f.Add([]byte{11, 5, 8, 5, 5, 4, 0, 5, 0, 0, 0})  // batch 2^40, accum 2^24
	f.Add([]byte{10, 5, 10, 5, 5, 4, 0, 5, 0, 0, 0}) // batch 2^32, accum 2^32
	f.Add([]byte{12, 5, 4, 5, 5, 4, 0, 5, 0, 0, 0})  // batch 2^62, accum 3
	f.Add([]byte{5, 5, 2, 12, 5, 4, 0, 5, 0, 0, 0})  // embed 2^62
	f.Add([]byte{5, 5, 2, 5, 5, 11, 0, 5, 0, 0, 0})  // layers 2^40
	f.Add([]byte{5, 13, 2, 5, 5, 4, 0, 5, 0, 0, 0})  // seq 2^63-1
	f.Add([]byte{5, 5, 2, 5, 5, 4, 0, 5, 0, 1, 0})   // max_skips -1
	f.Add([]byte{4, 4, 2, 4, 4, 3, 0, 5, 0, 0, 0})   // a job that fits
	f.Fuzz(func(t *testing.T, picks []byte) {
		top, model := []string{`"data": "/tmp"`}, []string{}
		for i, field := range specFields {
			v := sizetest.Pick(picks, i, 0)
			if name, ok := strings.CutPrefix(field, "model."); ok {
				model = append(model, fmt.Sprintf("%q: %d", name, v))
			} else {
				top = append(top, fmt.Sprintf("%q: %d", field, v))
			}
		}
		body := "{" + strings.Join(append(top, `"model": {`+strings.Join(model, ", ")+"}"), ", ") + "}"
		spec, err := decodeSpec(strings.NewReader(body))
		if err == nil {
			spec = spec.withDefaults()
			err = spec.validate()
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s: %v, want an error matching ErrInvalid", body, err)
			}
			named := false
			for _, field := range specFields {
				last := field[strings.LastIndex(field, ".")+1:]
				named = named || strings.Contains(strings.ToLower(err.Error()), strings.ReplaceAll(last, "_", " ")) ||
					strings.Contains(strings.ToLower(err.Error()), last)
			}
			if !named {
				t.Errorf("%s: %q names none of the spec's numbers", body, err)
			}
			return
		}
		cfg := spec.Model.charRNN()
		vocab := spec.Model.Vocab
		if vocab == 0 || vocab > 1<<16 {
			vocab = 65
		}
		sizetest.PlanStops(t, body, func(ctx context.Context) error {
			_, err := models.PlanMemory(ctx, meta.Config{Capacity: 1 << 30},
				models.MemorySpec{CharRNN: &cfg, Vocab: vocab, Batch: spec.Batch, Seq: spec.Seq, Accum: spec.Accum, Optimizer: train.Algorithm(spec.Optimizer)})
			return err
		})
	})
}
