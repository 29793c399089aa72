package devicetest

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// testGraphs checks device.Grapher: a replay computes what the recorded
// calls compute, every time it is launched and only then; what a graph
// cannot hold is refused with ErrNotCapturable and leaves nothing run; the
// memory rule; errors raised inside a graph; Close.
func testGraphs(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	if _, ok := e.dev.(device.Grapher); !ok {
		t.Skipf("%s does not implement device.Grapher", e.dev.Name())
	}
	// A device may lack graphs at run time (a CUDA driver before 11.4):
	// then Capture of nothing at all says so.
	if g, err := e.dev.(device.Grapher).Capture(func() error { return nil }); errors.Is(err, device.ErrNotCapturable) {
		t.Skipf("%s captures no graphs: %v", e.dev.Name(), err)
	} else if err != nil {
		t.Fatalf("Capture of nothing: %v", err)
	} else if err := g.Close(); err != nil {
		t.Fatalf("Close of an empty graph: %v", err)
	}
	// 1001 elements: more than one block of a GPU, not a multiple of any.
	const n = 1001
	x, y0 := e.uniform(n, -1, 1), e.uniform(n, -1, 1)
	a, b := e.uniform(6, -1, 1), e.uniform(12, -1, 1)

	// step queues the work under test on the buffers of s: y = x + 2y,
	// c += a·b (2×3 by 3×4), z = y.
	type set struct{ y, c, z vec }
	newSet := func(e *env) set {
		return set{y: e.vec(y0), c: e.vec(make([]float64, 8)), z: e.vec(make([]float64, n))}
	}
	av, bv, xv := e.vec(a), e.vec(b), e.vec(x)
	step := func(e *env, s set) error {
		k := e.dev.Kernels()
		return errors.Join(
			k.Axpby(device.Axpby{DType: e.dt, N: n, Alpha: 1, Beta: 2, X: xv.buf, Y: s.y.buf}),
			k.Gemm(device.Gemm{DType: e.dt, M: 2, N: 4, K: 3, Alpha: 1, Beta: 1, A: av.buf, B: bv.buf, C: s.c.buf}),
			k.Copy(device.Copy{Dst: s.z.buf, Src: s.y.buf.Elems(e.dt, 0, n)}))
	}
	capture := func(e *env, record func() error) device.Graph {
		e.t.Helper()
		g, err := e.dev.(device.Grapher).Capture(record)
		if errors.Is(err, device.ErrNotCapturable) {
			e.t.Skipf("%s captures no graphs: %v", e.dev.Name(), err)
		}
		if err != nil {
			e.t.Fatalf("Capture: %v", err)
		}
		e.t.Cleanup(func() { _ = g.Close() })
		return g
	}
	launch := func(e *env, g device.Graph) {
		e.t.Helper()
		if err := call(e.t, "Graph.Launch", g.Launch); err != nil {
			e.t.Fatalf("Graph.Launch: %v", err)
		}
	}

	e.run("Replay", func(e *env) {
		got, want := newSet(e), newSet(e)
		before := counts(e.dev)
		g := capture(e, func() error { return step(e, got) })
		if c := counts(e.dev).Sub(before); c.Launches != 0 || c.GEMMs != 0 || c.Copies != 0 || c.Calls != 0 {
			e.t.Errorf("counts while capturing: %+v, want none (nothing ran)", c)
		}
		// Nothing ran during the capture.
		checkExact(e.t, "y after Capture", e.get("y", got.y), y0)
		for round := 1; round <= 3; round++ {
			before := counts(e.dev)
			launch(e, g)
			if err := step(e, want); err != nil {
				e.t.Fatal(err)
			}
			if counterOf(e.dev) != nil {
				c := counts(e.dev).Sub(before)
				if (c != device.Counts{Launches: 2, GEMMs: 2, Copies: 2, Graphs: 1, Calls: 4}) {
					e.t.Errorf("round %d: counts %+v, want the recorded calls' (1 launch, 1 GEMM, 1 copy) twice and 1 graph, "+
						"and 4 calls (the graph's launch, the eager step's 3)", round, c)
				}
			}
			// Each launch runs the work again: y doubles and c grows.
			checkExact(e.t, "y", e.get("y", got.y), e.get("y", want.y))
			checkExact(e.t, "c", e.get("c", got.c), e.get("c", want.c))
			checkExact(e.t, "z", e.get("z", got.z), e.get("z", want.z))
		}
	})

	// Work queued on another stream while the compute stream records (the
	// loader's copies, from its producers) runs at once and is the
	// device's, not the graph's: a replay counts the recorded work only,
	// and the copy is counted once, as it ran.
	e.run("OtherStream", func(e *env) {
		if counterOf(e.dev) == nil {
			e.t.Skipf("%s counts nothing", e.dev.Name())
		}
		s, err := e.dev.NewStream()
		if err != nil {
			e.t.Fatal(err)
		}
		defer s.Close()
		host, err := e.dev.Staging(4 * n)
		if err != nil {
			e.t.Fatal(err)
		}
		defer func() { _ = e.dev.FreeStaging(host) }()
		dst := e.alloc(device.Float32, n)
		got := newSet(e)
		before := counts(e.dev)
		var ev device.Event
		g := capture(e, func() error {
			var err error
			ev, err = e.dev.CopyToDevice(dst, host, s)
			return errors.Join(err, step(e, got))
		})
		if err := ev.Wait(); err != nil {
			e.t.Fatal(err)
		}
		if c := counts(e.dev).Sub(before); c.Copies != 1 || c.Calls != 1 || c.Launches != 0 || c.GEMMs != 0 {
			e.t.Errorf("counts over a capture with a copy on another stream: %+v, want the copy alone (1 copy, 1 call)", c)
		}
		before = counts(e.dev)
		launch(e, g)
		if c := counts(e.dev).Sub(before); (c != device.Counts{Launches: 1, GEMMs: 1, Copies: 1, Graphs: 1, Calls: 1}) {
			e.t.Errorf("a replay counted %+v, want the recorded calls' (1 launch, 1 GEMM, 1 copy) and 1 graph launch, 1 call", c)
		}
	})

	// What changes from replay to replay lives in device memory: a count
	// that Advance moves, read by the work recorded after it (Dropout's
	// StateAt), draws new masks at each replay.
	e.run("Count", func(e *env) {
		const seed, start = 1<<40 + 7, 1<<32 - 3 // the offset's words both change
		// The state as an rnn stack keeps it: seed, the current masks'
		// offset, the next ones'.
		st := e.words(seed, 0xDEAD, start)
		xv, yv, mv := e.vec(x), e.vec(nans(n)), e.vec(nans(n))
		g := capture(e, func() error {
			k := e.dev.Kernels()
			return errors.Join(
				k.Advance(device.Advance{At: st.buf.Slice(16, 8), Add: n, Prev: st.buf.Slice(8, 8)}),
				k.Dropout(device.Dropout{DType: e.dt, N: n, P: 0.5, Offset: 3, StateAt: st.buf.Slice(0, 16), X: xv.buf, Y: yv.buf, Mask: mv.buf}))
		})
		checkWords(e.t, "the state after Capture (nothing ran)", e.getWords("state", st), []uint64{seed, 0xDEAD, start})
		for round := range uint64(3) {
			launch(e, g)
			off := start + round*n
			checkWords(e.t, "the state", e.getWords("state", st), []uint64{seed, off, off + n})
			mask := e.get("Mask", mv)
			for i := range n {
				if keep := device.DropoutKeep(seed, off+3+uint64(i), 0.5); keep != (mask[i] != 0) {
					e.t.Fatalf("replay %d: element %d of the mask is %v, want it kept: %v (DropoutKeep at %d)", round+1, i, mask[i], keep, off+3+uint64(i))
				}
			}
		}
	})

	e.run("Refused", func(e *env) {
		d := e.dev
		host, err := d.Staging(16)
		if err != nil {
			e.t.Fatal(err)
		}
		defer func() { _ = d.FreeStaging(host) }()
		for _, c := range []struct {
			name string
			op   func(z device.Buffer) error
		}{
			{"Synchronize", func(device.Buffer) error { return d.Synchronize() }},
			{"StreamSynchronize", func(device.Buffer) error { return d.Stream().Synchronize() }},
			{"Upload", func(z device.Buffer) error { return d.Upload(z, make([]byte, 8)) }},
			{"Download", func(z device.Buffer) error { return d.Download(make([]byte, 8), z) }},
			{"Record", func(device.Buffer) error { _, err := d.Stream().Record(); return err }},
			{"CopyToHost", func(z device.Buffer) error { _, err := d.CopyToHost(host, z, d.Stream()); return err }},
			{"CopyToDevice", func(z device.Buffer) error { _, err := d.CopyToDevice(z, host, d.Stream()); return err }},
			{"Capture", func(device.Buffer) error {
				_, err := d.(device.Grapher).Capture(func() error { return nil })
				return err
			}},
		} {
			e.run(c.name, func(e *env) {
				s := newSet(e)
				var opErr error
				g, err := d.(device.Grapher).Capture(func() error {
					if err := step(e, s); err != nil {
						return err
					}
					opErr = call(e.t, c.name, func() error { return c.op(s.z.buf) })
					return opErr
				})
				if g != nil {
					_ = g.Close()
					e.t.Fatalf("Capture with %s inside returned a graph", c.name)
				}
				if !errors.Is(opErr, device.ErrNotCapturable) || !errors.Is(err, device.ErrNotCapturable) {
					e.t.Errorf("%s inside Capture: %v; Capture: %v; want both to match ErrNotCapturable", c.name, opErr, err)
				}
				// Nothing recorded ran, and the device works eagerly after.
				checkExact(e.t, "y after a refused Capture", e.get("y", s.y), y0)
				want := newSet(e)
				if err := errors.Join(step(e, s), step(e, want)); err != nil {
					e.t.Fatal(err)
				}
				checkExact(e.t, "y eagerly after", e.get("y", s.y), e.get("y", want.y))
			})
		}
	})

	e.run("RecordError", func(e *env) {
		mine := errors.New("the record function's own error")
		g, err := e.dev.(device.Grapher).Capture(func() error { return mine })
		if g != nil || !errors.Is(err, mine) {
			e.t.Errorf("Capture of a failing record: graph %v, error %v; want no graph and the record's error", g, err)
		}
	})

	e.run("Memory", func(e *env) {
		d := e.dev
		allocated := func() int64 { return d.MemStats().AllocatedBytes[0].Current }
		s := newSet(e)
		// A buffer allocated before the capture, which the graph writes.
		pre, err := d.Alloc(4096, device.Workspace)
		if err != nil {
			e.t.Fatal(err)
		}
		base := allocated()
		var kept device.Buffer
		g := capture(e, func() error {
			// A temporary freed inside the capture, and a buffer that
			// outlives it: the graph writes both at every replay.
			tmp, err := d.Alloc(4096, device.Workspace)
			if err != nil {
				return err
			}
			if kept, err = d.Alloc(4096, device.Workspace); err != nil {
				return err
			}
			k := d.Kernels()
			return errors.Join(k.Fill(device.Fill{DType: e.dt, N: 1024, X: tmp, Value: 3}), k.Copy(device.Copy{Dst: pre, Src: tmp}),
				k.Copy(device.Copy{Dst: kept, Src: tmp}), step(e, s), d.Free(tmp))
		})
		after := allocated()
		if after < base+2*4096 {
			e.t.Errorf("allocated bytes %d after capturing, want at least %d: the temporary freed in the capture must stay allocated", after, base+2*4096)
		}
		if err := errors.Join(d.Free(kept), d.Free(pre)); err != nil {
			e.t.Fatal(err)
		}
		if got := allocated(); got != after {
			e.t.Errorf("allocated bytes %d after freeing buffers the graph writes (one allocated during the capture, one before), want %d: they stay allocated while the graph lives", got, after)
		}
		launch(e, g)
		if err := g.Close(); err != nil {
			e.t.Fatalf("Graph.Close: %v", err)
		}
		if got := allocated(); got != base-4096 {
			e.t.Errorf("allocated bytes %d after Graph.Close, want %d as before the capture, less the buffer freed", got, base-4096)
		}
	})

	e.run("IndexError", func(e *env) {
		table, out := e.vec(e.uniform(8, -1, 1)), e.vec(make([]float64, 4))
		ids := e.ids([]int32{1, 9})
		// A StepGuard later in the graph sees the error, not yet
		// reported, as it does eagerly: a replayed step with bad data is
		// refused (the trainer records its verdict in the step's graph).
		loss, normSq := e.vec([]float64{2.5}), e.vec([]float64{9})
		rec, guard := e.vecOf(device.Float64, nans(3)), e.vecOf(device.Float64, []float64{-3, 0})
		g := capture(e, func() error {
			k := e.dev.Kernels()
			return errors.Join(k.Embedding(device.Embedding{DType: e.dt, N: 2, Dim: 2, Vocab: 4, Table: table.buf, IDs: ids.buf, Out: out.buf}),
				k.StepGuard(device.StepGuard{DType: e.dt, Loss: loss.buf, NormSq: normSq.buf, Scale: 1, Record: rec.buf, Guard: guard.buf}))
		})
		if err := e.dev.Synchronize(); err != nil {
			e.t.Fatalf("Synchronize after capturing a bad id: %v, want nil (nothing ran)", err)
		}
		launch(e, g)
		if err := e.dev.Synchronize(); !errors.Is(err, device.ErrIndex) {
			e.t.Errorf("Synchronize after launching a graph with an id out of range: %v, want ErrIndex", err)
		}
		if err := e.dev.Synchronize(); err != nil {
			e.t.Errorf("second Synchronize: %v, want nil (reported once)", err)
		}
		checkExact(e.t, "Guard", e.get("Guard", guard), []float64{1, 1})
		checkExact(e.t, "Record", e.get("Record", rec), []float64{2.5, 3, 1})
	})

	e.run("Closed", func(e *env) {
		s := newSet(e)
		g := capture(e, func() error { return step(e, s) })
		if err := g.Close(); err != nil {
			e.t.Fatalf("Close: %v", err)
		}
		if err := g.Close(); err != nil {
			e.t.Errorf("second Close: %v, want nil", err)
		}
		if err := g.Launch(); !errors.Is(err, device.ErrClosed) {
			e.t.Errorf("Launch after Close: %v, want ErrClosed", err)
		}
		checkExact(e.t, "y", e.get("y", s.y), y0)
	})
}

// counts is d's device.Counts, zero for a device that does not count.
func counts(d device.Device) device.Counts {
	if c := counterOf(d); c != nil {
		return c.Counts()
	}
	return device.Counts{}
}

// counterOf is what counts d's work: d, or for a scope its device (which
// counts its scopes' work with its own), nil when neither counts.
func counterOf(d device.Device) device.Counter {
	if c, ok := d.(device.Counter); ok {
		return c
	}
	if s, ok := d.(device.Scope); ok {
		c, _ := s.Parent().(device.Counter)
		return c
	}
	return nil
}
