package rnn_test

import (
	"testing"

	"gorgonia.org/tensor"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// TestLayersAgreeWithTorch runs LSTM and GRU (1-3 layers, with and without
// bias and initial state) on PyTorch's parameters and inputs from
// testdata/torch_rnn.json, in float64, and compares the output, the final
// state and every gradient of the fixture's loss
// L = Σ out·w_out + Σ h_n·w_h (+ Σ c_n·w_c) with PyTorch's, within
// torchTol.
func TestLayersAgreeWithTorch(t *testing.T) {
	d := testdevice.Open(t)
	for _, c := range torchCases(t) {
		t.Run(c.name(), func(t *testing.T) {
			r := newRecurrent(t, d, c.Cell, rnn.Config{Input: c.Input, Hidden: c.Hidden, Layers: c.Layers, NoBias: !c.Bias, DType: device.Float64})
			agreeWithTorch(t, d, r, &c, nil)
		})
	}
}

// agreeWithTorch sets r's parameters to the fixture's and checks that r,
// over the fixture's input with lengths (nil: none), gives PyTorch's
// output, final states and gradients, within torchTol. It returns the
// names of r's parameters in r's order.
func agreeWithTorch(t *testing.T, d device.Device, r recurrent, c *fixtureCase, lengths []int32) (order []string) {
	T, B, H := c.Seq, c.Batch, c.Hidden
	D := 1
	if r.Config().Bidirectional {
		D = 2
	}
	p := r.Params()
	for q := range p.All() {
		v, found := c.Params[q.Name]
		if !found {
			t.Fatalf("parameter %s is not in the fixture", q.Name)
		}
		ok(t, p.SetValue(q.Name, tensor.New(tensor.WithShape(v.Shape...), tensor.WithBacking(v.Data))))
		order = append(order, q.Name)
	}
	if len(order) != len(c.Params) {
		t.Fatalf("the layer has %d parameters, PyTorch %d", len(order), len(c.Params))
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
		// Without PyTorch's h0 a nil state must give the same output as
		// the zero state used below.
		out, err := r.ForwardLengths(rnn.NoGrad, x, T, B, lengths, nil)
		ok(t, err)
		compare(t, "out (nil state)", download(t, d, out, T*B*D*H), c.Out.Data, torchTol)
	}
	out, err := r.ForwardLengths(rnn.Train, x, T, B, lengths, st)
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
	return order
}
