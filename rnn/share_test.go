package rnn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/rnn"
)

// sharedChain is an Embedding, a stack and a Linear, as the models chain
// them, or shares of each.
type sharedChain struct {
	emb *rnn.Embedding
	rec interface {
		ForwardLengths(mode rnn.Mode, x device.Buffer, seq, batch int, lengths []int32, s *rnn.State) (device.Buffer, error)
		Backward(dy device.Buffer) (device.Buffer, error)
		NewState(batch int) (*rnn.State, error)
		Close() error
	}
	out *rnn.Linear
}

// forward runs ids [T, B] through the chain without grad, with a state
// when st is not nil, and downloads the logits [T·B, V].
func (c sharedChain) forward(d device.Device, ids device.Buffer, T, B int, lengths []int32, st *rnn.State) ([]float32, error) {
	x, err := c.emb.Forward(rnn.NoGrad, ids, T*B)
	if err != nil {
		return nil, err
	}
	y, err := c.rec.ForwardLengths(rnn.NoGrad, x, T, B, lengths, st)
	if err != nil {
		return nil, err
	}
	logits, err := c.out.Forward(rnn.NoGrad, y, T*B)
	if err != nil {
		return nil, err
	}
	v := make([]float32, T*B*c.out.Config().Out)
	return v, device.DownloadSlice(d, v, logits)
}

func (c sharedChain) close() error {
	return errors.Join(c.emb.Close(), c.rec.Close(), c.out.Close())
}

// share makes a chain of shares of c's layers.
func (c sharedChain) share(t testing.TB) sharedChain {
	t.Helper()
	emb, err := c.emb.Share()
	ok(t, err)
	out, err := c.out.Share()
	ok(t, err)
	var rec sharedChain
	switch r := c.rec.(type) {
	case *rnn.LSTM:
		s, err := r.Share()
		ok(t, err)
		rec.rec = s
	case *rnn.GRU:
		s, err := r.Share()
		ok(t, err)
		rec.rec = s
	}
	return sharedChain{emb: emb, rec: rec.rec, out: out}
}

func paramBytes(d device.Device) int64 { return d.MemStats().CategoryBytes[alloc.Parameters].Current }

// TestSharesRunConcurrently: 8 goroutines, each with shares of one chain's
// layers (Embedding, LSTM or GRU, uni- or bidirectional, with lengths and
// with a carried state, Linear), make 100 NoGrad forwards each over
// inputs the owner ran serially first, and every answer is the serial
// one to the bit (every device gives the same bits for the same calls,
// and a share makes the owner's calls on its own buffers). The shares
// add nothing to the device's parameter memory; each refuses to train
// (ErrShared); the owner closed first leaves them running, and the
// parameters go with the last share.
func TestSharesRunConcurrently(t *testing.T) {
	const goroutines, calls, inputs = 8, 100, 5
	const T, B, E, H, V = 4, 3, 6, 5, 7
	for _, tc := range []struct {
		cell    string
		bidi    bool
		lengths []int32
		state   bool
	}{
		{cell: "lstm", state: true},
		{cell: "gru", state: true},
		{cell: "lstm", bidi: true, lengths: []int32{2, 4, 1}},
		{cell: "gru", bidi: true, lengths: []int32{4, 3, 3}, state: true},
	} {
		t.Run(fmt.Sprintf("%s_bidi=%v_lengths=%v_state=%v", tc.cell, tc.bidi, tc.lengths != nil, tc.state), func(t *testing.T) {
			d := testdevice.Open(t)
			before := paramBytes(d)
			var owner sharedChain
			var err error
			owner.emb, err = rnn.NewEmbedding(context.Background(), d, rnn.EmbeddingConfig{Vocab: V, Dim: E, Seed: 1})
			ok(t, err)
			rc := rnn.Config{Input: E, Hidden: H, Layers: 2, Bidirectional: tc.bidi, Seed: 2}
			if tc.cell == "lstm" {
				owner.rec, err = rnn.NewLSTM(context.Background(), d, rc)
			} else {
				owner.rec, err = rnn.NewGRU(context.Background(), d, rc)
			}
			ok(t, err)
			in := H
			if tc.bidi {
				in *= 2
			}
			owner.out, err = rnn.NewLinear(context.Background(), d, rnn.LinearConfig{In: in, Out: V, Seed: 3})
			ok(t, err)
			withParams := paramBytes(d)

			// Distinct inputs, and each one's answer from the owner alone.
			ids := make([]device.Buffer, inputs)
			want := make([][]float32, inputs)
			for i := range inputs {
				v := make([]int32, T*B)
				for k := range v {
					v[k] = int32((k*(i+2) + i) % V)
				}
				ids[i] = uploadInt32(t, d, v)
				var st *rnn.State
				if tc.state {
					st, err = owner.rec.NewState(B)
					ok(t, err)
				}
				want[i], err = owner.forward(d, ids[i], T, B, tc.lengths, st)
				ok(t, err)
				if st != nil {
					ok(t, st.Free())
				}
			}

			shares := make([]sharedChain, goroutines)
			for g := range shares {
				shares[g] = owner.share(t)
			}
			if got := paramBytes(d); got != withParams {
				t.Errorf("parameter bytes with %d shares = %d, want %d as with none: a share copies no weight", goroutines, got, withParams)
			}
			// A share refuses to train.
			x, err := shares[0].emb.Forward(rnn.NoGrad, ids[0], T*B)
			ok(t, err)
			for what, err := range map[string]error{
				"Embedding.Forward(Train)": second(shares[0].emb.Forward(rnn.Train, ids[0], T*B)),
				"Embedding.Backward":       shares[0].emb.Backward(x),
				"stack Forward(Train)":     second(shares[0].rec.ForwardLengths(rnn.Train, x, T, B, tc.lengths, nil)),
				"stack Backward":           second(shares[0].rec.Backward(x)),
				"Linear.Forward(Train)":    second(shares[0].out.Forward(rnn.Train, x, B)),
				"Linear.Backward":          second(shares[0].out.Backward(x)),
			} {
				if !errors.Is(err, rnn.ErrShared) {
					t.Errorf("%s on a share = %v, want an error matching rnn.ErrShared", what, err)
				}
			}

			run := func() {
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := range goroutines {
					wg.Go(func() {
						c := shares[g]
						var st *rnn.State
						if tc.state {
							var err error
							if st, err = c.rec.NewState(B); err != nil {
								errs <- err
								return
							}
							defer st.Free()
						}
						for k := range calls {
							i := (g + k) % inputs
							if st != nil {
								if err := st.Reset(); err != nil {
									errs <- err
									return
								}
							}
							got, err := c.forward(d, ids[i], T, B, tc.lengths, st)
							if err != nil {
								errs <- fmt.Errorf("goroutine %d, call %d: %w", g, k, err)
								return
							}
							if !slices.Equal(got, want[i]) {
								errs <- fmt.Errorf("goroutine %d, call %d, input %d: logits %v, want %v as serial", g, k, i, got, want[i])
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
			run()
			// The owner closed, the shares still hold the parameters.
			ok(t, owner.close())
			if got := paramBytes(d); got != withParams {
				t.Errorf("parameter bytes after the owner's Close with shares alive = %d, want %d", got, withParams)
			}
			run()
			for _, c := range shares {
				ok(t, c.close())
			}
			if got := paramBytes(d); got != before {
				t.Errorf("parameter bytes after the last share's Close = %d, want %d as before the layers", got, before)
			}
		})
	}
}

// TestOneLayerFromManyGoroutines: 8 goroutines call one stack's Forward
// (100 calls each) with no share: every call either runs or is refused
// with rnn.ErrBusy, nothing panics or returns another error. Inside a
// call (a NotifyLayers callback, which Backward makes while it holds the
// stack) every other call and Close are ErrBusy, and Close then leaves
// the stack working.
func TestOneLayerFromManyGoroutines(t *testing.T) {
	d := testdevice.Open(t)
	const T, B, I, H = 3, 2, 4, 5
	l, err := rnn.NewLSTM(context.Background(), d, rnn.Config{Input: I, Hidden: H, Layers: 2})
	ok(t, err)
	x32, err := d.Alloc(int64(T*B*I)*4, device.Workspace)
	ok(t, err)
	ok(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: T * B * I, X: x32, Value: 0.5}))

	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, busy := 0, 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, err := l.Forward(rnn.NoGrad, x32, T, B, nil)
				mu.Lock()
				switch {
				case err == nil:
					ran++
				case errors.Is(err, rnn.ErrBusy):
					busy++
				default:
					t.Errorf("Forward from 8 goroutines: %v, want nil or an error matching rnn.ErrBusy", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ran == 0 {
		t.Errorf("no call of 800 ran (%d busy), want at least the first", busy)
	}
	t.Logf("%d calls ran, %d were refused as busy", ran, busy)

	st, err := l.NewState(B)
	ok(t, err)
	defer st.Free()
	dy, err := d.Alloc(int64(T*B*H)*4, device.Workspace)
	ok(t, err)
	ok(t, d.Kernels().Fill(device.Fill{DType: device.Float32, N: T * B * H, X: dy}))
	_, err = l.Forward(rnn.Train, x32, T, B, st)
	ok(t, err)
	inside := map[string]error{}
	l.NotifyLayers(func(layer int) error {
		if layer != 1 {
			return nil
		}
		inside["Forward"] = second(l.Forward(rnn.NoGrad, x32, T, B, nil))
		inside["NewState"] = second(l.NewState(B))
		inside["Share"] = second(l.Share())
		inside["Close"] = l.Close()
		inside["State.Free"] = st.Free()
		inside["State.Reset"] = st.Reset()
		return nil
	})
	_, err = l.Backward(dy)
	ok(t, err)
	l.NotifyLayers(nil)
	for what, err := range inside {
		if !errors.Is(err, rnn.ErrBusy) {
			t.Errorf("%s inside Backward = %v, want an error matching rnn.ErrBusy", what, err)
		}
	}
	if _, err := l.Forward(rnn.NoGrad, x32, T, B, st); err != nil {
		t.Errorf("Forward after the refused Close and Free: %v, want the stack and the state still open", err)
	}
	ok(t, l.Close())
}
