package devicetest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// InScope wraps open so that each group of the suite runs on a scope of a
// fresh device instead of the device itself: a scope is a Device, and
// passes the whole suite as one. The scope is closed before its device.
func InScope(open func(t testing.TB) device.Device) func(t testing.TB) device.Device {
	return func(t testing.TB) device.Device {
		t.Helper()
		d := open(t)
		if d == nil {
			t.Fatal("open returned a nil device.Device")
		}
		s, err := device.NewScope(d, device.ScopeConfig{Name: "suite"})
		if err != nil {
			_ = d.Close()
			t.Fatalf("NewScope: %v", err)
		}
		t.Cleanup(func() { _ = call(t, d.Name()+".Close", d.Close) })
		return s
	}
}

// testScopes checks the isolation device.Scope promises, on two scopes
// and the device: errors, ownership, memory figures, limits, Close.
func testScopes(t *testing.T, open opener) {
	d := openDevice(t, open)
	if _, ok := d.(device.Scoper); !ok {
		t.Skipf("%s runs no scopes (device.Scoper)", d.Name())
	}
	if s, ok := d.(device.Scope); ok {
		t.Skipf("%s is a scope already", s.Name())
	}
	newScope := func(t *testing.T, name string, limit int64) device.Scope {
		t.Helper()
		s, err := device.NewScope(d, device.ScopeConfig{Name: name, Limit: limit})
		if err != nil {
			t.Fatalf("NewScope(%q): %v", name, err)
		}
		if !strings.Contains(s.Name(), name) || s.Parent() != d || s.Limit() != limit || s.ID() == 0 {
			t.Errorf("scope %q: Name %q, Parent %v, Limit %d, ID %d", name, s.Name(), s.Parent() == d, s.Limit(), s.ID())
		}
		t.Cleanup(func() { _ = call(t, s.Name()+".Close", s.Close) })
		return s
	}
	// envOf is an env on dev for t that leaves dev open.
	envOf := func(t *testing.T, dev device.Device) *env {
		h := fnv.New64a()
		h.Write([]byte(t.Name() + dev.Name()))
		return &env{t: t, dev: dev, k: dev.Kernels(), dt: device.Float32, rng: rand.New(rand.NewPCG(0x5eed, h.Sum64()))}
	}

	t.Run("Errors", func(t *testing.T) {
		// An index out of range in B is B's: A and the device, whose
		// work ran at the same time, report nothing and computed right.
		a, b := newScope(t, "a", 0), newScope(t, "b", 0)
		ea, eb, ed := envOf(t, a), envOf(t, b), envOf(t, d)
		const n, dim, vocab = 4, 3, 5
		table := ea.uniform(vocab*dim, -1, 1)
		goodIDs, badIDs := []int32{0, 4, 2, 1}, []int32{0, vocab, 2, -1}
		outA, outD := ea.vec(nans(n*dim)), ed.vec(nans(n*dim))
		tA, tB, tD := ea.vec(table), eb.vec(table), ed.vec(table)
		iA, iB, iD := ea.ids(goodIDs), eb.ids(badIDs), ed.ids(goodIDs)
		outB := eb.vec(nans(n * dim))
		eb.launch(device.Embedding{DType: device.Float32, N: n, Dim: dim, Vocab: vocab, Table: tB.buf, IDs: iB.buf, Out: outB.buf})
		ea.launch(device.Embedding{DType: device.Float32, N: n, Dim: dim, Vocab: vocab, Table: tA.buf, IDs: iA.buf, Out: outA.buf})
		ed.launch(device.Embedding{DType: device.Float32, N: n, Dim: dim, Vocab: vocab, Table: tD.buf, IDs: iD.buf, Out: outD.buf})
		if err := call(t, "B's Embedding's event", func() error {
			ev, err := b.Stream().Record()
			if err == nil {
				err = ev.Wait()
			}
			return err
		}); !errors.Is(err, device.ErrIndex) {
			t.Errorf("an event after B's bad Embedding: Wait = %v, want device.ErrIndex", err)
		}
		if err := call(t, "A's Synchronize", a.Synchronize); err != nil {
			t.Errorf("A's Synchronize = %v, want nil: B's error spread to A", err)
		}
		if err := call(t, "the device's Synchronize", d.Synchronize); err != nil {
			t.Errorf("the device's Synchronize = %v, want nil: B's error spread to the device", err)
		}
		want := refEmbedding(dim, vocab, table, goodIDs)
		checkExact(t, "A's Embedding", ea.get("Out", outA), want)
		checkExact(t, "the device's Embedding", ed.get("Out", outD), want)
		if err := call(t, "B's Synchronize", b.Synchronize); !errors.Is(err, device.ErrIndex) {
			t.Errorf("B's Synchronize = %v, want device.ErrIndex", err)
		}
		if err := call(t, "B's second Synchronize", b.Synchronize); err != nil {
			t.Errorf("B's second Synchronize = %v, want nil (an error is reported once)", err)
		}
		// B goes on working after its error was reported.
		checkExact(t, "B's good rows", eb.get("Out", outB)[:dim], want[:dim])
	})

	t.Run("Ownership", func(t *testing.T) {
		a, b := newScope(t, "a", 0), newScope(t, "b", 0)
		ea := envOf(t, a)
		x := ea.filled(8, 1)
		yB := envOf(t, b).filled(8, 0)
		yD := envOf(t, d).filled(8, 0)
		foreign := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, device.ErrForeignBuffer) {
				t.Errorf("%s = %v, want device.ErrForeignBuffer", what, err)
			}
		}
		foreign("B's Copy of A's buffer", call(t, "Copy", func() error {
			return b.Kernels().Copy(device.Copy{Src: x.buf, Dst: yB.buf})
		}))
		foreign("the device's Copy of A's buffer", call(t, "Copy", func() error {
			return d.Kernels().Copy(device.Copy{Src: x.buf, Dst: yD.buf})
		}))
		foreign("A's Copy into the device's buffer", call(t, "Copy", func() error {
			return a.Kernels().Copy(device.Copy{Src: x.buf, Dst: yD.buf})
		}))
		foreign("B's Free of A's buffer", call(t, "Free", func() error { return b.Free(x.buf) }))
		foreign("the device's Free of A's buffer", call(t, "Free", func() error { return d.Free(x.buf) }))
		foreign("B's Download of A's buffer", call(t, "Download", func() error { return b.Download(make([]byte, 4), x.buf) }))
		h, err := a.Staging(32)
		if err != nil {
			t.Fatalf("A's Staging: %v", err)
		}
		foreign("B's CopyToDevice from A's staging", call(t, "CopyToDevice", func() error {
			_, err := b.CopyToDevice(yB.buf, h, b.Stream())
			return err
		}))
		foreign("A's CopyToDevice on B's stream", call(t, "CopyToDevice", func() error {
			_, err := a.CopyToDevice(x.buf, h, b.Stream())
			return err
		}))
		ev, err := a.Stream().Record()
		if err != nil {
			t.Fatalf("A's Record: %v", err)
		}
		foreign("B's stream waiting for A's event", call(t, "Wait", func() error { return b.Stream().Wait(ev) }))
		if err := a.FreeStaging(h); err != nil {
			t.Errorf("A's FreeStaging: %v", err)
		}
	})

	t.Run("Memory", func(t *testing.T) {
		const limit = 64 << 20
		a, b := newScope(t, "a", 0), newScope(t, "b", limit)
		devBefore := d.MemStats().AllocatedBytes[alloc.AllPools].Current
		pa, err := a.Alloc(3<<20, device.Parameters)
		if err != nil {
			t.Fatalf("A's Alloc: %v", err)
		}
		pb, err := b.Alloc(5<<20, device.Activations)
		if err != nil {
			t.Fatalf("B's Alloc: %v", err)
		}
		sa, sb := a.MemStats(), b.MemStats()
		if got := sa.CategoryBytes[alloc.Parameters].Current; got < 3<<20 || sa.CategoryBytes[alloc.Activations].Current != 0 {
			t.Errorf("A's parameters %d bytes, activations %d; want >= 3 MiB and 0", got, sa.CategoryBytes[alloc.Activations].Current)
		}
		if got := sb.CategoryBytes[alloc.Activations].Current; got < 5<<20 || sb.CategoryBytes[alloc.Parameters].Current != 0 {
			t.Errorf("B's activations %d bytes, parameters %d; want >= 5 MiB and 0", got, sb.CategoryBytes[alloc.Parameters].Current)
		}
		if sb.Limit != limit {
			t.Errorf("B's MemStats().Limit = %d, want %d", sb.Limit, limit)
		}
		all := d.MemStats().AllocatedBytes[alloc.AllPools].Current
		if want := devBefore + sa.AllocatedBytes[alloc.AllPools].Current + sb.AllocatedBytes[alloc.AllPools].Current; all != want {
			t.Errorf("the device's allocated bytes %d, want its own %d plus A's and B's = %d", all, devBefore, want)
		}
		if r, ok := device.MemoryReport(b); ok {
			if r.Categories[alloc.Activations].Current != sb.CategoryBytes[alloc.Activations].Current || r.Limit != limit || !strings.Contains(r.Device, "b") {
				t.Errorf("MemoryReport(B): device %q, activations %d, limit %d; want B's", r.Device, r.Categories[alloc.Activations].Current, r.Limit)
			}
		}

		// B past its limit fails B, naming it; A's memory is untouched
		// and A still allocates.
		_, err = b.Alloc(limit, device.Activations)
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Fatalf("B's Alloc past its limit = %v, want an *alloc.OutOfMemoryError", err)
		}
		if !oom.ScopeRefused || !strings.Contains(err.Error(), "b") {
			t.Errorf("the error does not say B's limit refused: %v", err)
		}
		if got := a.MemStats(); got.AllocatedBytes != sa.AllocatedBytes || got.ReservedBytes != sa.ReservedBytes {
			t.Errorf("A's memory changed when B ran out of its limit")
		}
		qa, err := a.Alloc(limit, device.Activations)
		if err != nil {
			t.Errorf("A's Alloc of B's limit after B ran out: %v", err)
		} else if err := a.Free(qa); err != nil {
			t.Error(err)
		}
		for _, f := range []func() error{func() error { return a.Free(pa) }, func() error { return b.Free(pb) }} {
			if err := f(); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("Close", func(t *testing.T) {
		// A scope closed with buffers, a staging buffer and a stream still
		// held gives them all back; the device and the other scope go on.
		a, b := newScope(t, "a", 0), newScope(t, "b", 0)
		ea := envOf(t, a)
		x := ea.filled(16, 2)
		for _, n := range []int64{100, 1 << 20, 12 << 20} {
			if _, err := b.Alloc(n, device.Activations); err != nil {
				t.Fatalf("B's Alloc(%d): %v", n, err)
			}
		}
		if _, err := b.Staging(4096); err != nil {
			t.Fatalf("B's Staging: %v", err)
		}
		st, err := b.NewStream()
		if err != nil {
			t.Fatalf("B's NewStream: %v", err)
		}
		eb := envOf(t, b)
		xB := eb.alloc(device.Float32, 16)
		eb.launch(device.Fill{DType: device.Float32, N: 16, X: xB, Value: 1})
		before := d.MemStats().AllocatedBytes[alloc.AllPools].Current
		if err := call(t, "B's Close", b.Close); err != nil {
			t.Fatalf("B's Close: %v", err)
		}
		if got, want := d.MemStats().AllocatedBytes[alloc.AllPools].Current, before-(13<<20); got > want {
			t.Errorf("the device's allocated bytes after B's Close: %d, want at most %d (B's 13 MiB given back)", got, want)
		}
		if r, ok := device.MemoryReport(d); ok {
			if _, left := r.Scopes[b.ID()]; left {
				t.Errorf("the device's report still lists B after its Close")
			}
		}
		closed := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, device.ErrClosed) {
				t.Errorf("%s after Close = %v, want device.ErrClosed", what, err)
			}
		}
		closed("B's Alloc", call(t, "Alloc", func() error { _, err := b.Alloc(8, device.Other); return err }))
		closed("B's Synchronize", call(t, "Synchronize", b.Synchronize))
		closed("B's stream's Record", call(t, "Record", func() error { _, err := st.Record(); return err }))
		closed("B's Kernels().Fill", call(t, "Fill", func() error {
			return b.Kernels().Fill(device.Fill{DType: device.Float32, N: 16, X: xB, Value: 0})
		}))
		if err := call(t, "B's second Close", b.Close); err != nil {
			t.Errorf("a second Close = %v, want nil", err)
		}
		ea.launch(device.Axpby{DType: device.Float32, N: 16, Alpha: 1, Beta: 1, X: x.buf, Y: x.buf})
		checkExact(t, "A's Axpby after B's Close", ea.get("Y", x), constant(16, 4))
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Jobs on two goroutines, each in its scope, compute their own
		// results (run under -race).
		var wg sync.WaitGroup
		scopes := []device.Scope{newScope(t, "a", 0), newScope(t, "b", 0)}
		got := make([][]float64, len(scopes))
		errs := make([]error, len(scopes))
		for i, s := range scopes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = scopeWork(s, float32(i+1), &got[i])
			}()
		}
		wg.Wait()
		for i := range scopes {
			if errs[i] != nil {
				t.Errorf("scope %d: %v", i, errs[i])
				continue
			}
			checkExact(t, fmt.Sprintf("scope %d's result", i), got[i], constant(1024, float64(i+1)*64))
		}
	})

	t.Run("DeviceCloseClosesScopes", func(t *testing.T) {
		d := openDevice(t, open)
		s, err := device.NewScope(d, device.ScopeConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Alloc(1<<20, device.Activations); err != nil {
			t.Fatal(err)
		}
		if err := call(t, "Close", d.Close); err != nil {
			t.Fatalf("the device's Close with a scope open: %v", err)
		}
		if _, err := s.Alloc(8, device.Other); !errors.Is(err, device.ErrClosed) {
			t.Errorf("a scope's Alloc after its device closed = %v, want device.ErrClosed", err)
		}
		if _, err := device.NewScope(d, device.ScopeConfig{}); !errors.Is(err, device.ErrClosed) {
			t.Errorf("NewScope on a closed device = %v, want device.ErrClosed", err)
		}
	})
}

// scopeWork fills 1024 floats with v and doubles them six times, on s,
// and downloads the result into *out.
func scopeWork(s device.Scope, v float32, out *[]float64) (err error) {
	const n = 1024
	x, err := s.Alloc(n*4, device.Activations)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Free(x)) }()
	k := s.Kernels()
	if err := k.Fill(device.Fill{DType: device.Float32, N: n, X: x, Value: float64(v)}); err != nil {
		return err
	}
	for range 6 {
		if err := k.Axpby(device.Axpby{DType: device.Float32, N: n, Alpha: 1, Beta: 1, X: x, Y: x}); err != nil {
			return err
		}
	}
	host := make([]float32, n)
	if err := device.DownloadSlice(s, host, x); err != nil {
		return err
	}
	*out = make([]float64, n)
	for i, f := range host {
		(*out)[i] = float64(f)
	}
	return nil
}
