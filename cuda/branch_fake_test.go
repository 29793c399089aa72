package cuda

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// openBranch opens a branch of d, failing the test if it cannot.
func openBranch(t *testing.T, d device.Device) *branch {
	t.Helper()
	b, err := device.NewBranch(d)
	if err != nil {
		t.Fatalf("NewBranch(%s): %v", d.Name(), err)
	}
	return b.(*branch)
}

// eventsSince returns the fake's event log from entry n on.
func (f *fakeAPI) eventsSince(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.eventLog[n:])
}

// TestFakeBranch checks what a branch holds and where its work goes, over
// the fake driver, which records the stream of every launch and cuBLAS
// call: a stream of its own; a cuBLAS handle of its own bound to it, with
// a workspace of the device's size taken from the allocator as Workspace
// and given back at Close; its kernels, copies and GEMMs on its stream and
// handle; its temporaries on an allocator stream of its own; Fork and Join
// as an event recorded on one stream and waited for by the other; index
// errors reported by the device's next synchronisation after a Join; its
// work counted as the device's; and after Close, errors matching ErrClosed.
func TestFakeBranch(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{BLASWorkspace: 1 << 20})
	ws0 := d.MemStats().CategoryBytes[alloc.Workspace].Current
	b := openBranch(t, d)
	if b.q.on == d.compute.s || b.q.on == 0 || b.q.blas == d.blas || b.q.temps == d.compute.id {
		t.Fatalf("branch stream %d, handle %d, temporaries' stream %d; the device's %d, %d, %d: want its own",
			b.q.on, b.q.blas, b.q.temps, d.compute.s, d.blas, d.compute.id)
	}
	f.mu.Lock()
	bound, ws := f.blasStream[b.q.blas], f.blasWorkspace[b.q.blas]
	f.mu.Unlock()
	if bound != b.q.on || ws != b.q.workspace || ws == 0 || ws == d.workspace || b.q.wsBytes != d.BLASWorkspace() {
		t.Errorf("branch handle on stream %d with workspace %v of %d bytes; want its stream %d, a workspace of its own of %d bytes",
			bound, ws, b.q.wsBytes, b.q.on, d.BLASWorkspace())
	}
	if got := d.MemStats().CategoryBytes[alloc.Workspace].Current - ws0; got != d.BLASWorkspace() {
		t.Errorf("opening a branch took %d bytes of Workspace, want its cuBLAS workspace, %d", got, d.BLASWorkspace())
	}

	x := upload(t, d, device.Float32, []float64{1, 2, 3, 4})
	y := upload(t, d, device.Float32, make([]float64, 4))
	out := upload(t, d, device.Float32, make([]float64, 1))
	log0 := len(f.eventLog)
	if err := b.Fork(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	launch0, gemm0 := len(f.launches), len(f.gemms)
	f.mu.Unlock()
	before := d.Counts()
	k := b.Kernels()
	if err := errors.Join(
		k.Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: x, B: x, C: y}),
		k.Fill(device.Fill{DType: device.Float32, N: 4, X: x, Value: 3}),
		k.Copy(device.Copy{Src: x, Dst: y}),
		k.SumSquares(device.SumSquares{DType: device.Float32, N: 4, X: y, Out: out})); err != nil {
		t.Fatal(err)
	}
	if err := b.Join(); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Counts().Sub(before), (device.Counts{Launches: 3, GEMMs: 1, Copies: 1, Calls: 5}); got != want {
		t.Errorf("the branch's work counted %+v, want %+v", got, want)
	}
	f.mu.Lock()
	for _, l := range f.launches[launch0:] {
		if l.stream != b.q.on {
			t.Errorf("%s launched on stream %d, want the branch's %d", l.name, l.stream, b.q.on)
		}
	}
	if n := len(f.gemms) - gemm0; n != 1 || f.gemmStreams[gemm0] != b.q.on {
		t.Errorf("%d GEMMs, the first on stream %d; want 1 on the branch's %d", n, f.gemmStreams[gemm0], b.q.on)
	}
	f.mu.Unlock()
	c, s := d.compute.s, b.q.on
	want := []string{
		fmt.Sprintf("record %d on %d", b.fork, c), fmt.Sprintf("%d waits for %d", s, b.fork),
		fmt.Sprintf("record %d on %d", b.join, s), fmt.Sprintf("%d waits for %d", c, b.join),
	}
	if got := f.eventsSince(log0); !slices.Equal(got, want) {
		t.Errorf("Fork then Join queued %q, want %q", got, want)
	}
	// The fake runs GEMMs and copies (not kernels): y = x·x, then x's
	// copy, [1 2 3 4].
	if got := download(t, d, device.Float32, y, 4); got[0] != 1 || got[3] != 4 {
		t.Errorf("y = %v after the branch's work, want [1 2 3 4]", got)
	}
	// SumSquares's temporary came from the branch's allocator stream.
	found := false
	for _, seg := range d.Memory().Snapshot().Segments {
		found = found || seg.Stream == b.q.temps
	}
	if !found {
		t.Errorf("no segment on the branch's allocator stream %d: its temporaries came from another", b.q.temps)
	}

	// An index error raised on the branch: the device's next
	// synchronisation after the Join reports it, once.
	ids := uploadI32(t, d, []int32{0, 7})
	table := uploadF32(t, d, []float32{1, 2, 3, 4, 5, 6})
	emb, _ := d.Alloc(16, device.Activations)
	if err := b.Kernels().Embedding(device.Embedding{DType: device.Float32, N: 2, Dim: 2, Vocab: 3, Table: table, IDs: ids, Out: emb}); err != nil {
		t.Fatal(err)
	}
	if err := b.Join(); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); !errors.Is(err, device.ErrIndex) {
		t.Errorf("Synchronize after a branch's index error and a Join: %v, want ErrIndex", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("a second Synchronize: %v, want nil (reported once)", err)
	}

	handle, stream := b.q.blas, b.q.on
	ws1 := d.MemStats().CategoryBytes[alloc.Workspace].Current
	log0 = len(f.eventLog)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Its workspace goes back to the compute stream's cache: the compute
	// stream waits for the branch's work first.
	var e1, e2 cuEvent
	var on, waiter cuStream
	if log := f.eventsSince(log0); len(log) != 2 {
		t.Errorf("Close queued %q, want an event recorded on the branch's stream and the compute stream's wait for it", log)
	} else if _, err1 := fmt.Sscanf(log[0], "record %d on %d", &e1, &on); err1 != nil || on != stream {
		t.Errorf("Close queued %q first, want an event recorded on the branch's stream %d", log[0], stream)
	} else if _, err2 := fmt.Sscanf(log[1], "%d waits for %d", &waiter, &e2); err2 != nil || waiter != c || e2 != e1 {
		t.Errorf("Close queued %q second, want the compute stream %d waiting for event %d", log[1], c, e1)
	}
	if err := b.Close(); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
	f.mu.Lock()
	_, handleLive := f.blasStream[handle]
	streamLive := f.streams[uintptr(stream)]
	f.mu.Unlock()
	if handleLive || streamLive {
		t.Errorf("after Close, its cuBLAS handle live: %v, its stream live: %v; want both destroyed", handleLive, streamLive)
	}
	if got := ws1 - d.MemStats().CategoryBytes[alloc.Workspace].Current; got != d.BLASWorkspace() {
		t.Errorf("Close gave back %d bytes of Workspace, want its cuBLAS workspace, %d", got, d.BLASWorkspace())
	}
	for name, err := range map[string]error{
		"Fork": b.Fork(), "Join": b.Join(), "Fill": b.Kernels().Fill(device.Fill{DType: device.Float32, N: 4, X: x}),
	} {
		if !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// TestFakeBranchReusesIDs: a branch opened after one closed takes its
// allocator stream id, so the blocks the first left cached serve the
// second, and its stream first waits for an event recorded after the
// first's work, so they serve it only after that work.
func TestFakeBranchReusesIDs(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	a := openBranch(t, d)
	id, old := a.q.temps, a.q.on
	log0 := len(f.eventLog)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := openBranch(t, d)
	if b.q.temps != id {
		t.Errorf("the next branch's allocator stream %d, want the closed one's %d", b.q.temps, id)
	}
	// The wait of the new stream is for an event recorded on the old one
	// after its work (the compute stream waits for it too).
	log := f.eventsSince(log0)
	var waited cuEvent
	var waiter cuStream
	recordedOn := map[cuEvent]cuStream{}
	for _, l := range log {
		var e cuEvent
		var s cuStream
		if _, err := fmt.Sscanf(l, "record %d on %d", &e, &s); err == nil {
			recordedOn[e] = s
		} else if _, err := fmt.Sscanf(l, "%d waits for %d", &waiter, &waited); err != nil {
			t.Fatalf("unexpected log line %q", l)
		}
	}
	if waiter != b.q.on || waited == 0 || recordedOn[waited] != old {
		t.Errorf("closing a branch and opening the next queued %q; want an event recorded on the first's stream %d, waited for by the next's %d", log, old, b.q.on)
	}
	c := openBranch(t, d)
	if c.q.temps == b.q.temps {
		t.Errorf("two open branches share allocator stream %d", c.q.temps)
	}
}

// TestFakeBranchFailedOpenKeepsID: a branch that fails to open (its
// cuBLAS handle refused) gives back the allocator stream id it took, a
// closed branch's or a new one, with the closed branch's wait: the next
// branch opened takes that id, and no id is made in vain.
func TestFakeBranchFailedOpenKeepsID(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	fail := func() {
		t.Helper()
		f.mu.Lock()
		f.blasCreateErr = errors.New("no handle")
		f.mu.Unlock()
		b, err := d.Branch()
		f.mu.Lock()
		f.blasCreateErr = nil
		f.mu.Unlock()
		if err == nil {
			b.Close()
			t.Fatal("Branch with cublasCreate failing: no error")
		}
	}
	fail()
	a := openBranch(t, d)
	id, old := a.q.temps, a.q.on
	log0 := len(f.eventLog)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	fail()
	b := openBranch(t, d)
	if b.q.temps != id {
		t.Errorf("after a failed open, the next branch's allocator stream %d, want the closed one's %d", b.q.temps, id)
	}
	// The closed branch's wait still comes first: the new stream waits
	// for the event recorded on the closed one's after its work.
	recordedOn := map[cuEvent]cuStream{}
	found := false
	for _, l := range f.eventsSince(log0) {
		var e cuEvent
		var s cuStream
		if _, err := fmt.Sscanf(l, "record %d on %d", &e, &s); err == nil {
			recordedOn[e] = s
		} else if _, err := fmt.Sscanf(l, "%d waits for %d", &s, &e); err == nil && s == b.q.on && recordedOn[e] == old {
			found = true
		}
	}
	if !found {
		t.Errorf("closing a branch, a failed open and the next queued %q; want the next's stream %d waiting for an event recorded on the closed one's %d", f.eventsSince(log0), b.q.on, old)
	}
	if d.nextID != id {
		t.Errorf("the device made stream ids up to %d, want %d (the failed opens made none of their own)", d.nextID, id)
	}
}

// TestFakeBranchCapture checks a branch in a capture of the compute
// stream, over the fake driver's cross-stream capture: forked during the
// capture, its work is recorded with the compute stream's, not run, and
// counted as the graph's; each replay runs both; a branch forked and not
// joined fails the capture with ErrNotCapturable and is usable after; one
// not forked is refused, its work and its Join, while the capture goes
// on; and one closed during a capture is released when it ends.
func TestFakeBranchCapture(t *testing.T) {
	f := newFakeAPI()
	d := openFake(t, f, Config{})
	b := openBranch(t, d)
	x := upload(t, d, device.Float32, []float64{1, 2, 3, 4})
	y := upload(t, d, device.Float32, make([]float64, 4))
	c := upload(t, d, device.Float32, make([]float64, 4))
	k, bk := d.Kernels(), b.Kernels()
	f.mu.Lock()
	launch0, gemm0 := len(f.launches), len(f.gemms)
	f.mu.Unlock()
	g, err := d.Capture(func() error {
		return errors.Join(
			k.Copy(device.Copy{Src: x, Dst: y}),
			b.Fork(),
			bk.Gemm(device.Gemm{DType: device.Float32, M: 2, N: 2, K: 2, Alpha: 1, Beta: 1, A: x, B: x, C: c}),
			k.Axpby(device.Axpby{DType: device.Float32, N: 4, Alpha: 1, Beta: 1, X: x, Y: y}),
			b.Join(),
			k.Copy(device.Copy{Src: c, Dst: y}))
	})
	if err != nil {
		t.Fatalf("Capture with a branch forked and joined: %v", err)
	}
	f.mu.Lock()
	ran := len(f.launches) - launch0 + len(f.gemms) - gemm0
	f.mu.Unlock()
	if ran != 0 {
		t.Fatalf("%d launches and GEMMs ran during the capture, want none", ran)
	}
	if got, want := g.(*graph).counts, (device.Counts{Launches: 1, GEMMs: 1, Copies: 2}); got != want {
		t.Errorf("the graph's counts %+v, want %+v: the branch's GEMM among them", got, want)
	}
	for round := 1; round <= 2; round++ {
		f.mu.Lock()
		g0 := len(f.gemms)
		f.mu.Unlock()
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		onBranch := len(f.gemms) == g0+1 && f.gemmStreams[g0] == b.q.on
		f.mu.Unlock()
		if !onBranch {
			t.Errorf("round %d: the replay's GEMM did not run once on the branch's stream", round)
		}
		// c = c + x·x ([7 10 15 22] a round), then copied into y.
		got := download(t, d, device.Float32, y, 4)
		if want := 22 * float64(round); got[3] != want {
			t.Errorf("round %d: y = %v, want y[3] = %v", round, got, want)
		}
	}

	// Forked and not joined: the capture fails, the branch is out of it.
	_, err = d.Capture(func() error {
		return errors.Join(b.Fork(), bk.Fill(device.Fill{DType: device.Float32, N: 4, X: c}))
	})
	if !errors.Is(err, device.ErrNotCapturable) {
		t.Errorf("Capture with a branch not joined: %v, want ErrNotCapturable", err)
	}
	if err := errors.Join(b.Fork(), bk.Copy(device.Copy{Src: x, Dst: c}), b.Join()); err != nil {
		t.Errorf("the branch after an unjoined capture: %v, want it usable", err)
	}
	if got := download(t, d, device.Float32, c, 4); got[3] != 4 {
		t.Errorf("the branch's Copy after an unjoined capture left %v, want [1 2 3 4]", got)
	}

	// Not forked: its work and its Join are refused while the capture goes
	// on, and the capture itself is whole.
	var workErr, joinErr error
	g2, err := d.Capture(func() error {
		workErr = bk.Fill(device.Fill{DType: device.Float32, N: 4, X: c})
		joinErr = b.Join()
		return k.Fill(device.Fill{DType: device.Float32, N: 4, X: y})
	})
	if err != nil || !errors.Is(workErr, device.ErrNotCapturable) || !errors.Is(joinErr, device.ErrNotCapturable) {
		t.Errorf("a branch not forked during a capture: work %v, Join %v, Capture %v; want ErrNotCapturable twice and the capture whole", workErr, joinErr, err)
	}
	if g2 != nil {
		g2.Close()
	}

	// Closed during a capture: released at its end (its stream takes part
	// in the capture until then). Forked, it was not joined: the capture
	// fails.
	for _, forked := range []bool{false, true} {
		c2 := openBranch(t, d)
		stream := c2.q.on
		_, err := d.Capture(func() error {
			if forked {
				if err := c2.Fork(); err != nil {
					return err
				}
			}
			if err := c2.Close(); err != nil {
				return err
			}
			f.mu.Lock()
			live := f.streams[uintptr(stream)]
			f.mu.Unlock()
			if !live {
				return errors.New("the stream was destroyed during the capture")
			}
			return k.Fill(device.Fill{DType: device.Float32, N: 4, X: y})
		})
		if forked != errors.Is(err, device.ErrNotCapturable) || (!forked && err != nil) {
			t.Errorf("a branch closed during a capture (forked: %v): Capture %v", forked, err)
		}
		f.mu.Lock()
		live := f.streams[uintptr(stream)]
		f.mu.Unlock()
		if live {
			t.Errorf("a branch closed during a capture (forked: %v): its stream still live after the capture", forked)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFakeBranchLaneClose: closing a device with branches open, one of
// its own and one of a scope's, and one just closed, gives everything
// back, and a scope's Close closes its branches (later calls ErrClosed)
// and leaves the device's alone.
func TestFakeBranchLaneClose(t *testing.T) {
	f := newFakeAPI()
	d, err := open(f, Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := openScope(t, d, device.ScopeConfig{Limit: 64 << 20})
	sb := openBranch(t, s)
	if sb.q.wsBytes != s.wsWant || sb.q.wsBytes == 0 {
		t.Errorf("a scope's branch has a workspace of %d bytes, want the scope's %d", sb.q.wsBytes, s.wsWant)
	}
	if got := s.MemStats().CategoryBytes[alloc.Workspace].Current; got != sb.q.wsBytes {
		t.Errorf("the scope counts %d bytes of Workspace, want its branch's %d", got, sb.q.wsBytes)
	}
	db := openBranch(t, d)
	x := upload(t, d, device.Float32, []float64{1, 2})
	if err := errors.Join(db.Fork(), db.Kernels().Fill(device.Fill{DType: device.Float32, N: 2, X: x}), db.Join()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("scope Close with a branch open: %v", err)
	}
	if err := sb.Fork(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Fork on a closed scope's branch: %v, want ErrClosed", err)
	}
	if err := sb.Close(); err != nil {
		t.Errorf("Close of a closed scope's branch: %v, want nil", err)
	}
	if err := errors.Join(db.Fork(), db.Kernels().Fill(device.Fill{DType: device.Float32, N: 2, X: x}), db.Join()); err != nil {
		t.Errorf("the device's branch after a scope's Close: %v", err)
	}
	// A branch closed right before the device: nothing of it is left
	// pending for the device's Close (once, an allocator's event on its
	// stream was, and failed that Close).
	eb := openBranch(t, d)
	if err := eb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close with a branch open and one just closed: %v", err)
	}
	if err := db.Fork(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Fork after the device's Close: %v, want ErrClosed", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("Close of a branch of a closed device: %v, want nil", err)
	}
	f.checkReleased(t)
}
