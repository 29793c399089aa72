package svc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// specValues are the values FuzzSpec draws each number of a job's spec
// from: the boundaries of int32 and int64 arithmetic (0, -1, 2^31, 2^32,
// 2^62, 2^63-1), 2^40 and 2^24, rnn.MaxLayers (1,024) and one past it, and
// small sizes that run.
var specValues = []int64{0, -1, 1, 2, 3, 64, 1 << 10, 1<<10 + 1, 1 << 24, 1 << 31, 1 << 32, 1 << 40, 1 << 62, math.MaxInt64}

// specFields are the spec's numbers, as JSON paths.
var specFields = []string{"batch", "seq", "accum", "model.embed", "model.hidden", "model.layers", "model.vocab",
	"steps", "memory_limit", "max_skips", "checkpoint_every"}

// FuzzSpec: a POST /jobs body whose numbers are drawn from specValues
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
			v := specValues[0]
			if i < len(picks) {
				v = specValues[int(picks[i])%len(specValues)]
			}
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
		const deadline = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		_, err = models.PlanMemory(ctx, meta.Config{Capacity: 1 << 30},
			models.MemorySpec{CharRNN: &cfg, Vocab: vocab, Batch: spec.Batch, Seq: spec.Seq, Accum: spec.Accum, Optimizer: train.Algorithm(spec.Optimizer)})
		if took := time.Since(start); took > deadline+time.Second {
			t.Errorf("%s: planning returned %v after its start, its deadline %v (%v)", body, took, deadline, err)
		}
	})
}
