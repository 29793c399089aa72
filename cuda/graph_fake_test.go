package cuda

import (
	"errors"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestFakeGraph checks the CUDA device's graphs over the fake driver, whose
// capture records the calls on the captured stream and replays them at
// cuGraphLaunch: a capture queues nothing, each launch replays the
// kernels with the arguments they had, cuBLAS included; the counts; and a
// device closed with a graph open gives everything back.
func TestFakeGraph(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	a := upload(t, d, device.Float32, []float64{1, 2, 3, 4})
	b := upload(t, d, device.Float32, []float64{5, 6, 7, 8})
	c := upload(t, d, device.Float32, make([]float64, 4))
	x := upload(t, d, device.Float32, make([]float64, 8))
	k := d.Kernels()
	f.mu.Lock()
	launches0, gemms0 := len(f.launches), len(f.gemms)
	f.mu.Unlock()
	before := d.Counts()
	g, err := d.Capture(func() error {
		return errors.Join(
			k.Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, Beta: 1, A: a, B: b, C: c}),
			k.Fill(device.Fill{DType: device.Float32, N: 8, X: x, Value: 2}),
			k.SumSquares(device.SumSquares{DType: device.Float32, N: 8, X: x, Out: c.Slice(0, 4)}))
	})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	f.mu.Lock()
	ran := len(f.launches) - launches0 + len(f.gemms) - gemms0
	f.mu.Unlock()
	if ran != 0 {
		t.Fatalf("%d launches and GEMMs ran during the capture, want none", ran)
	}
	if got := d.Counts().Sub(before); got != (device.Counts{}) {
		t.Errorf("counts after the capture: %+v, want none", got)
	}
	if got := download(t, d, device.Float32, c, 4); got[0] != 0 {
		t.Fatalf("C = %v after the capture, want zeros: the GEMM must not run", got)
	}
	var perLaunch int
	for round := 1; round <= 2; round++ {
		f.mu.Lock()
		l0 := len(f.launches)
		f.mu.Unlock()
		before := d.Counts()
		if err := g.Launch(); err != nil {
			t.Fatalf("Launch: %v", err)
		}
		n := d.Counts().Sub(before)
		f.mu.Lock()
		perLaunch = len(f.launches) - l0
		f.mu.Unlock()
		if n.Graphs != 1 || n.GEMMs != 1 || n.Launches != int64(perLaunch) || perLaunch < 2 {
			t.Errorf("round %d: counts %+v with %d kernels replayed; want 1 graph, 1 GEMM and the replayed kernels", round, n, perLaunch)
		}
		// C accumulates a·b at each replay (Beta 1): [19 22 43 50]·round.
		got := download(t, d, device.Float32, c, 4)
		if want := float64(43 * round); got[2] != want {
			t.Errorf("round %d: C = %v, want C[2] = %v", round, got, want)
		}
	}
	// A second graph stays open: Close must destroy it.
	if _, err := d.Capture(func() error { return k.Fill(device.Fill{DType: device.Float32, N: 8, X: x}) }); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("Graph.Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f.checkReleased(t)
}

// TestFakeGraphUnsupported: a driver without graphs (before 11.4) makes
// Capture an error matching ErrNotCapturable, and runs nothing.
func TestFakeGraphUnsupported(t *testing.T) {
	f := newFakeAPI()
	f.noGraphs = true
	d := openFake(t, f, Config{})
	x := upload(t, d, device.Float32, []float64{1})
	called := false
	_, err := d.Capture(func() error {
		called = true
		return d.Kernels().Fill(device.Fill{DType: device.Float32, N: 1, X: x})
	})
	if !errors.Is(err, device.ErrNotCapturable) || called {
		t.Errorf("Capture without driver graphs: %v (record called: %v), want ErrNotCapturable without calling it", err, called)
	}
}

// TestFakeGraphInScope: a scope captures on its own compute stream, and
// its Close destroys the graphs it left open; the device's lane is not
// capturing meanwhile.
func TestFakeGraphInScope(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	s, err := d.Scope(device.ScopeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Alloc(64, device.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.(device.Grapher).Capture(func() error {
		if err := d.Synchronize(); err != nil { // the device's own stream is not captured
			return err
		}
		return s.Kernels().Fill(device.Fill{DType: device.Float32, N: 16, X: x, Value: 1})
	})
	if err != nil {
		t.Fatalf("Capture in a scope: %v", err)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("scope Close: %v", err)
	}
	if err := g.Launch(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Launch after the scope closed: %v, want ErrClosed", err)
	}
	f.mu.Lock()
	graphs, execs := len(f.graphs), len(f.execs)
	f.mu.Unlock()
	if graphs != 0 || execs != 0 {
		t.Errorf("after the scope's Close, %d graphs and %d executable graphs are left", graphs, execs)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Graph.Close after its scope's: %v", err)
	}
}
