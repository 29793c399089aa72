package models_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// eagerModel hides the model's train.Replayable, so Sample draws every
// token eagerly.
type eagerModel struct{ train.Model }

// TestSampleGraph: on a device that records graphs, Sample replays a
// recorded chunk of 64 tokens for the whole chunks after the first, and
// the tokens are those drawn eagerly, bit for bit; with top-k and without,
// for both cells, with a prime longer than one token and a remainder
// after the last whole chunk (300 tokens: chunk 0 eager, chunks 1-3
// replayed, 44 eager). On the test device: the CPU, or the GPU kit's
// CUDA device (where it is cuGraphLaunch against cuLaunchKernel).
func TestSampleGraph(t *testing.T) {
	d := testdevice.Open(t)
	if _, ok := d.(device.Grapher); !ok {
		t.Fatalf("%s does not record graphs: both devices of this module do", d.Name())
	}
	counter, counts := d.(device.Counter)
	v := vocab(t, "abcdefghijklmnopqrstuvwxyz .,")
	for _, cell := range []string{"lstm", "gru"} {
		for _, topK := range []int{0, 5} {
			t.Run(cell, func(t *testing.T) {
				m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: cell, Embed: 8, Hidden: 24, Layers: 2}, v, 3)
				check(t, err)
				defer m.Close()
				sample := func(model train.Model) (ids []int32, graphs int64) {
					var c0 device.Counts
					if counts {
						c0 = counter.Counts()
					}
					cfg := train.SampleConfig{N: 300, Temperature: 0.9, TopK: topK, Prime: []int32{3, 1, 4}, Seed: 11}
					check(t, train.Sample(context.Background(), d, model, cfg, func(id int32) error {
						ids = append(ids, id)
						return nil
					}))
					if counts {
						graphs = counter.Counts().Sub(c0).Graphs
					}
					return ids, graphs
				}
				want, eagerGraphs := sample(eagerModel{m})
				got, graphs := sample(m)
				if !slices.Equal(got, want) {
					t.Errorf("the tokens with graphs differ from those drawn eagerly:\n got %v\nwant %v", got, want)
				}
				if counts && (eagerGraphs != 0 || graphs != 3) {
					t.Errorf("graph launches: %d eagerly, %d replaying; want 0 and 3 (chunks 1 to 3 of 300 tokens)", eagerGraphs, graphs)
				}
			})
		}
	}
}
