package rnn_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// seqCase is a case of testdata/torch_seq.json: a fixtureCase with a
// direction count and, for a packed batch, the lengths.
type seqCase struct {
	fixtureCase
	Bidirectional bool     `json:"bidirectional"`
	Lengths       []int32  `json:"lengths"`
	ParamOrder    []string `json:"param_order"`
}

func (c *seqCase) name() string {
	return fmt.Sprintf("%s/bidirectional=%v/lengths=%v", c.fixtureCase.name(), c.Bidirectional, c.Lengths)
}

// seqCases reads the PyTorch fixtures of bidirectional stacks and packed
// batches.
func seqCases(t *testing.T) []seqCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/torch_seq.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []seqCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	// Packed: 2 cells × 3 depths × 2 directions × bias on/off × initial
	// state on/off = 48; unpacked bidirectional: 24 more.
	if len(fx.Cases) != 72 {
		t.Fatalf("%d fixture cases, want 72", len(fx.Cases))
	}
	return fx.Cases
}

// TestSequencesAgreeWithTorch runs LSTM and GRU stacks (1-3 layers, uni-
// and bidirectional, with and without bias and initial state) on
// PyTorch's parameters and inputs from testdata/torch_seq.json, packed
// with unsorted lengths (1 and T among them) or unpacked, in float64, and
// compares the output (zero at padded positions), the final states and
// every gradient of the fixture's loss with PyTorch's, within torchTol.
// The parameters must be PyTorch's, in PyTorch's order, so that a state
// dict moves between the two unchanged. x and w_out hold random values at
// padded positions, which must change nothing.
func TestSequencesAgreeWithTorch(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range seqCases(t) {
		t.Run(c.name(), func(t *testing.T) {
			r := newRecurrent(t, d, c.Cell, rnn.Config{Input: c.Input, Hidden: c.Hidden, Layers: c.Layers, NoBias: !c.Bias,
				Bidirectional: c.Bidirectional, DType: device.Float64})
			if order := agreeWithTorch(t, d, r, &c.fixtureCase, c.Lengths); !slices.Equal(order, c.ParamOrder) {
				t.Errorf("parameters %v, PyTorch's %v", order, c.ParamOrder)
			}
		})
	}
}
