package rnn_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"gorgonia.org/tensor"

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
			T, B, H := c.Seq, c.Batch, c.Hidden
			D := 1
			if c.Bidirectional {
				D = 2
			}
			r := newRecurrent(t, d, c.Cell, rnn.Config{Input: c.Input, Hidden: H, Layers: c.Layers, NoBias: !c.Bias,
				Bidirectional: c.Bidirectional, DType: device.Float64})
			p := r.Params()
			var order []string
			for q := range p.All() {
				order = append(order, q.Name)
				v := c.Params[q.Name]
				ok(t, p.SetValue(q.Name, tensor.New(tensor.WithShape(v.Shape...), tensor.WithBacking(v.Data))))
			}
			if !slices.Equal(order, c.ParamOrder) {
				t.Fatalf("parameters %v, PyTorch's %v", order, c.ParamOrder)
			}
			x := upload(t, d, c.X.Data)
			st, err := r.NewState(B)
			ok(t, err)
			defer st.Free()
			if c.InitialState {
				put(t, d, st.H(), c.H0.Data)
				if c.C0 != nil {
					put(t, d, st.C(), c.C0.Data)
				}
			} else {
				// A nil state gives the output of the zero state below.
				out, err := r.ForwardLengths(rnn.NoGrad, x, T, B, c.Lengths, nil)
				ok(t, err)
				compare(t, "out (nil state)", download(t, d, out, T*B*D*H), c.Out.Data, torchTol)
			}
			out, err := r.ForwardLengths(rnn.Train, x, T, B, c.Lengths, st)
			ok(t, err)
			compare(t, "out", download(t, d, out, T*B*D*H), c.Out.Data, torchTol)
			compare(t, "h_n", download(t, d, st.H(), len(c.HN.Data)), c.HN.Data, torchTol)
			if c.CN != nil {
				compare(t, "c_n", download(t, d, st.C(), len(c.CN.Data)), c.CN.Data, torchTol)
			}

			put(t, d, st.GradH(), c.WH.Data)
			if c.WC != nil {
				put(t, d, st.GradC(), c.WC.Data)
			}
			dx, err := r.Backward(upload(t, d, c.WOut.Data))
			ok(t, err)
			compare(t, "grad x", download(t, d, dx, len(c.GradX.Data)), c.GradX.Data, torchTol)
			for name, want := range c.GradParams {
				got, err := p.Grad(name)
				compare(t, "grad "+name, hostData(t, got, err), want.Data, torchTol)
			}
			if c.GradH0 != nil {
				compare(t, "grad h0", download(t, d, st.GradH(), len(c.GradH0.Data)), c.GradH0.Data, torchTol)
			}
			if c.GradC0 != nil {
				compare(t, "grad c0", download(t, d, st.GradC(), len(c.GradC0.Data)), c.GradC0.Data, torchTol)
			}
		})
	}
}
