package devicetest

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// testBranches checks device.Brancher: a branch's work runs after a Fork
// the compute stream's work before it, and the compute stream's work after
// a Join waits for the branch's; the branch's index errors reach the
// compute stream at a Join (a StepGuard after it refuses the step); its
// kernels count as the compute stream's; a Capture holds a branch forked
// and joined in it and replays the eager bits, refuses a branch left
// unjoined (leaving it usable) and branch work not forked into it; Close.
func testBranches(t *testing.T, open opener) {
	e := newEnv(t, open, device.Float32)
	if _, ok := e.dev.(device.Brancher); !ok {
		t.Skipf("%s does not implement device.Brancher", e.dev.Name())
	}
	branch := func(e *env) device.Branch {
		e.t.Helper()
		var b device.Branch
		err := call(e.t, "Branch", func() (err error) {
			b, err = device.NewBranch(e.dev)
			return err
		})
		if err != nil {
			e.t.Fatalf("NewBranch: %v", err)
		}
		e.t.Cleanup(func() { _ = b.Close() })
		return b
	}
	must := func(e *env, what string, err error) {
		e.t.Helper()
		if err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
	}
	// slow queues on k a product long enough (2·384³ flops, milliseconds
	// on a CPU) that work queued on another stream without a wait for it
	// would overtake it.
	const m = 384
	slow := func(e *env, k device.Kernels) error {
		a, c := e.alloc(e.dt, m*m), e.alloc(e.dt, m*m)
		return errors.Join(k.Fill(device.Fill{DType: e.dt, N: m * m, Value: 0.5, X: a}),
			k.Gemm(device.Gemm{DType: e.dt, M: m, N: m, K: m, Alpha: 1, A: a, B: a, C: c}))
	}
	const n = 1001
	// A scope's work is counted by its device.
	counted := counterOf(e.dev) != nil

	// The work under test: x is written on the compute stream, read on
	// the branch into y, and y read on the compute stream into z, each
	// after a slow product on the writer's side. Every value is exact.
	type set struct{ x, y, z vec }
	newSet := func(e *env) set {
		return set{x: e.filled(n, -1), y: e.filled(n, -1), z: e.filled(n, -1)}
	}
	step := func(e *env, b device.Branch, s set) error {
		k, bk := e.dev.Kernels(), b.Kernels()
		return errors.Join(
			slow(e, k),
			k.Fill(device.Fill{DType: e.dt, N: n, Value: 3, X: s.x.buf}),
			b.Fork(),
			// y = 2x + 0·y, after a slow product of the branch's own.
			slow(e, bk),
			bk.Axpby(device.Axpby{DType: e.dt, N: n, Alpha: 2, X: s.x.buf, Beta: 0, Y: s.y.buf}),
			// Independent work on the compute stream meanwhile.
			k.Fill(device.Fill{DType: e.dt, N: n, Value: 5, X: s.z.buf}),
			b.Join(),
			// z = y + z = 6 + 5.
			k.Axpby(device.Axpby{DType: e.dt, N: n, Alpha: 1, X: s.y.buf, Beta: 1, Y: s.z.buf}))
	}
	check := func(e *env, what string, s set) {
		e.t.Helper()
		checkExact(e.t, what+": x", e.get("x", s.x), constant(n, 3))
		checkExact(e.t, what+": y", e.get("y", s.y), constant(n, 6))
		checkExact(e.t, what+": z", e.get("z", s.z), constant(n, 11))
	}

	e.run("ForkJoin", func(e *env) {
		b := branch(e)
		for round := range 3 {
			s := newSet(e)
			before := counts(e.dev)
			must(e, "the step", step(e, b, s))
			// Counted as the compute stream's work: 2 slow products
			// (a Fill and a GEMM each), 2 Fills, 2 Axpbys.
			if c := counts(e.dev).Sub(before); counted && (c.Launches != 6 || c.GEMMs != 2 || c.Calls != 8) {
				e.t.Errorf("round %d: counts %+v, want 6 launches, 2 GEMMs, 8 calls", round, c)
			}
			e.sync()
			check(e, "eager", s)
		}
	})

	e.run("Errors", func(e *env) {
		b := branch(e)
		bk := b.Kernels()
		table, ids, out := e.vec(constant(4*2, 1)), e.ids([]int32{7}), e.vec(constant(2, 0))
		must(e, "Fork", b.Fork())
		must(e, "Embedding", bk.Embedding(device.Embedding{DType: e.dt, N: 1, Dim: 2, Vocab: 4, Table: table.buf, IDs: ids.buf, Out: out.buf}))
		must(e, "Join", b.Join())
		// The step after the Join sees the branch's error and is refused.
		loss, normSq := e.vec([]float64{2.5}), e.vec([]float64{9})
		rec, g := e.vecOf(device.Float64, nans(3)), e.vecOf(device.Float64, []float64{-3, 0})
		e.launch(device.StepGuard{DType: e.dt, Loss: loss.buf, NormSq: normSq.buf, Scale: 1, Record: rec.buf, Guard: g.buf})
		if err := call(e.t, "Synchronize", e.dev.Synchronize); !errors.Is(err, device.ErrIndex) {
			e.t.Fatalf("Synchronize after an id out of range on a joined branch: %v, want device.ErrIndex", err)
		}
		checkExact(e.t, "Guard", e.get("Guard", g), []float64{1, 1})
		// Reported once: the branch goes on.
		s := newSet(e)
		must(e, "a step after the error", step(e, b, s))
		e.sync()
		check(e, "after the error", s)
	})

	e.run("Capture", func(e *env) {
		gr := grapher(e)
		b := branch(e)
		s := newSet(e)
		before := counts(e.dev)
		g, err := gr.Capture(func() error { return step(e, b, s) })
		must(e, "Capture of a fork and join", err)
		defer g.Close()
		if c := counts(e.dev).Sub(before); c.Launches != 0 || c.GEMMs != 0 || c.Calls != 0 {
			e.t.Errorf("counts while capturing: %+v, want none (nothing ran)", c)
		}
		checkExact(e.t, "y after Capture", e.get("y", s.y), constant(n, -1))
		for round := range 2 {
			must(e, "Fill", e.k.Fill(device.Fill{DType: e.dt, N: n, Value: -1, X: s.y.buf}))
			before := counts(e.dev)
			must(e, "Graph.Launch", g.Launch())
			if c := counts(e.dev).Sub(before); counted && (c.Launches != 6 || c.GEMMs != 2 || c.Calls != 1 || c.Graphs != 1) {
				e.t.Errorf("round %d: a replay counted %+v, want the branch's work with the rest: 6 launches, 2 GEMMs, 1 call", round, c)
			}
			e.sync()
			check(e, "replayed", s)
		}
	})

	e.run("Unjoined", func(e *env) {
		gr := grapher(e)
		b := branch(e)
		y := e.filled(n, -1)
		_, err := gr.Capture(func() error {
			return errors.Join(b.Fork(), b.Kernels().Fill(device.Fill{DType: e.dt, N: n, Value: 4, X: y.buf}))
		})
		if !errors.Is(err, device.ErrNotCapturable) {
			e.t.Fatalf("Capture of a branch forked and not joined: %v, want ErrNotCapturable", err)
		}
		e.sync()
		checkExact(e.t, "y after the refused capture", e.get("y", y), constant(n, -1))
		// The branch is as good as new, eagerly and in a capture.
		s := newSet(e)
		must(e, "a step after the refused capture", step(e, b, s))
		e.sync()
		check(e, "after the refused capture", s)
		s = newSet(e)
		g, err := gr.Capture(func() error { return step(e, b, s) })
		must(e, "Capture after the refused one", err)
		defer g.Close()
		must(e, "Graph.Launch", g.Launch())
		e.sync()
		check(e, "replayed after the refused capture", s)
	})

	e.run("NotForked", func(e *env) {
		gr := grapher(e)
		b := branch(e)
		y := e.filled(n, -1)
		var kerr error
		_, err := gr.Capture(func() error {
			kerr = b.Kernels().Fill(device.Fill{DType: e.dt, N: n, Value: 4, X: y.buf})
			return kerr
		})
		if !errors.Is(kerr, device.ErrNotCapturable) || !errors.Is(err, device.ErrNotCapturable) {
			e.t.Fatalf("branch work not forked into a capture: %v, and the capture %v; want ErrNotCapturable", kerr, err)
		}
		e.sync()
		checkExact(e.t, "y", e.get("y", y), constant(n, -1))
	})

	e.run("Close", func(e *env) {
		b := branch(e)
		y := e.filled(n, -1)
		must(e, "Fork", b.Fork())
		must(e, "Fill", b.Kernels().Fill(device.Fill{DType: e.dt, N: n, Value: 4, X: y.buf}))
		must(e, "Join", b.Join())
		must(e, "Close", b.Close())
		must(e, "a second Close", b.Close())
		e.sync()
		checkExact(e.t, "y, queued before Close", e.get("y", y), constant(n, 4))
		for what, err := range map[string]error{
			"Kernels().Fill": call(e.t, "Fill", func() error {
				return b.Kernels().Fill(device.Fill{DType: e.dt, N: n, Value: 4, X: y.buf})
			}),
			"Fork": call(e.t, "Fork", b.Fork),
			"Join": call(e.t, "Join", b.Join),
		} {
			if !errors.Is(err, device.ErrClosed) {
				e.t.Errorf("%s after Close: %v, want ErrClosed", what, err)
			}
		}
	})

	e.run("DeviceClose", func(e *env) {
		d := openDevice(e.t, open)
		b, err := device.NewBranch(d)
		must(e, "NewBranch", err)
		x, err := d.Alloc(4*n, device.Workspace)
		must(e, "Alloc", err)
		must(e, "Fork", b.Fork())
		must(e, "Fill", b.Kernels().Fill(device.Fill{DType: device.Float32, N: n, Value: 4, X: x}))
		must(e, "Join", b.Join())
		must(e, "the device's Close", d.Close())
		if err := call(e.t, "Fork", b.Fork); !errors.Is(err, device.ErrClosed) {
			e.t.Errorf("Fork after the device's Close: %v, want ErrClosed", err)
		}
		if err := call(e.t, "Close", b.Close); err != nil {
			e.t.Errorf("Close of a branch of a closed device: %v, want nil", err)
		}
		if _, err := device.NewBranch(d); !errors.Is(err, device.ErrClosed) {
			e.t.Errorf("NewBranch of a closed device: %v, want ErrClosed", err)
		}
	})

	e.run("Scope", func(e *env) {
		// A scope's branch: the device under test's own, when it is a
		// scope already (the suite run in a scope), else a new one's.
		sc, isScope := e.dev.(device.Scope)
		if !isScope {
			var err error
			sc, err = device.NewScope(e.dev, device.ScopeConfig{Name: "branches"})
			if errors.Is(err, errors.ErrUnsupported) {
				e.t.Skipf("%s runs no scopes", e.dev.Name())
			}
			must(e, "NewScope", err)
			defer sc.Close()
		}
		b, err := device.NewBranch(sc)
		must(e, "NewBranch of a scope", err)
		defer b.Close()
		x, err := sc.Alloc(4*n, device.Workspace)
		must(e, "Alloc", err)
		must(e, "Fork", b.Fork())
		must(e, "Fill", b.Kernels().Fill(device.Fill{DType: device.Float32, N: n, Value: 4, X: x}))
		must(e, "Join", b.Join())
		got := make([]float32, n)
		must(e, "Download", device.DownloadSlice(sc, got, x))
		for i, v := range got {
			if v != 4 {
				e.t.Fatalf("the scope's buffer at %d: %v, want 4", i, v)
			}
		}
		// The device's buffers are not the scope branch's.
		y, err := sc.Parent().Alloc(4*n, device.Workspace)
		must(e, "the device's Alloc", err)
		defer sc.Parent().Free(y)
		err = call(e.t, "Fill", func() error {
			return b.Kernels().Fill(device.Fill{DType: device.Float32, N: n, Value: 4, X: y})
		})
		if !errors.Is(err, device.ErrForeignBuffer) {
			e.t.Errorf("a scope's branch given the device's buffer: %v, want ErrForeignBuffer", err)
		}
	})
}

// grapher is e's device as a device.Grapher, or skips the test on a
// device without graphs, or one that may lack them at run time (a CUDA
// driver before 11.4): Capture of nothing says so.
func grapher(e *env) device.Grapher {
	e.t.Helper()
	gr, ok := e.dev.(device.Grapher)
	if !ok {
		e.t.Skipf("%s does not implement device.Grapher", e.dev.Name())
	}
	g, err := gr.Capture(func() error { return nil })
	if errors.Is(err, device.ErrNotCapturable) {
		e.t.Skipf("%s captures no graphs: %v", e.dev.Name(), err)
	}
	if err != nil {
		e.t.Fatalf("Capture of nothing: %v", err)
	}
	_ = g.Close()
	return gr
}
