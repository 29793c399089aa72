package cuda

import (
	"fmt"
	"testing"

	"github.com/gocurrent/gocurrent/device"
)

// TestEmulatedFuseCells checks which path a cell given its recurrent product
// takes on the emulated device, by what it launches (Counts): the fused
// kernel, one launch and no GEMM, up to Config.FuseCellsUpTo (256 by
// default), two launches (its product alone, then the cell kernel) where
// the new h overlaps the previous one; a cuBLAS GEMM and the cell kernel
// above it. The results of every path are checked by the conformance
// suite (LSTMCellFused, GRUCellFused). Named Emulated: the GPU kit's
// tests stage leaves it out, as the emulator cannot be built there.
func TestEmulatedFuseCells(t *testing.T) {
	fused, unfused := device.Counts{Launches: 1, Calls: 1}, device.Counts{Launches: 1, GEMMs: 1, Calls: 2}
	for _, c := range []struct {
		upTo, hidden int
		inPlace      bool
		want         device.Counts
	}{
		{0, 256, false, fused},
		{0, 257, false, unfused},
		{0, 8, true, device.Counts{Launches: 2, Calls: 2}}, // h over hprev: the fused product, then the cell
		{64, 64, false, fused},
		{64, 65, false, unfused},
		{-1, 1, false, unfused},
	} {
		t.Run(fmt.Sprintf("FuseCellsUpTo=%d/Hidden=%d/InPlace=%v", c.upTo, c.hidden, c.inPlace), func(t *testing.T) {
			d := openEmulated(t, Config{FuseCellsUpTo: c.upTo})
			const B = 3
			H := c.hidden
			buf := func(n int) device.Buffer {
				b, err := d.Alloc(int64(n)*4, device.Workspace)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			hPrev, w := buf(B*H), buf(4*H*H)
			h := buf(B * H)
			if c.inPlace {
				h = hPrev
			}
			k := d.Kernels()
			for _, call := range []struct {
				name string
				do   func() error
			}{
				{"LSTMCell", func() error {
					return k.LSTMCell(device.LSTMCell{DType: device.Float32, Batch: B, Hidden: H, Pre: buf(4 * B * H),
						CPrev: buf(B * H), C: buf(B * H), H: h, HPrev: hPrev, W: w})
				}},
				{"GRUCell", func() error {
					return k.GRUCell(device.GRUCell{DType: device.Float32, Batch: B, Hidden: H, XPre: buf(3 * B * H),
						HPre: buf(3 * B * H), HPrev: hPrev, H: h, W: w})
				}},
			} {
				before := d.Counts()
				if err := call.do(); err != nil {
					t.Fatalf("%s: %v", call.name, err)
				}
				if got := d.Counts().Sub(before); got != c.want {
					t.Errorf("%s counted %+v, want %+v", call.name, got, c.want)
				}
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEmulatedFuseCellGrads is TestEmulatedFuseCells for the cell gradients given the next
// step's recurrent product: the fused kernel, one launch and no GEMM, up
// to Config.FuseCellsUpTo, with the next step covering as many rows,
// fewer or more; two launches (its product alone, then the cell gradient
// kernel) where the next step's gradient is the call's own output
// (DPre, DHPre), which the contract allows; a cuBLAS GEMM and the cell
// gradient kernel above the threshold. The results of every path are
// checked by the conformance suite (LSTMCellGradFused, GRUCellGradFused).
func TestEmulatedFuseCellGrads(t *testing.T) {
	fused, apart, unfused := device.Counts{Launches: 1, Calls: 1}, device.Counts{Launches: 2, Calls: 2}, device.Counts{Launches: 1, GEMMs: 1, Calls: 2}
	for _, c := range []struct {
		upTo, hidden, next int
		nextIsOut          bool
		want               device.Counts
	}{
		{0, 256, 0, false, fused},
		{0, 256, 0, true, apart},
		{0, 257, 0, false, unfused},
		{0, 257, 0, true, unfused},
		{0, 8, 1, false, fused},
		{0, 40, 7, false, fused},
		{64, 64, 0, false, fused},
		{64, 65, 0, false, unfused},
		{-1, 1, 0, false, unfused},
	} {
		t.Run(fmt.Sprintf("FuseCellsUpTo=%d/Hidden=%d/Next=%d/NextIsOut=%v", c.upTo, c.hidden, c.next, c.nextIsOut), func(t *testing.T) {
			d := openEmulated(t, Config{FuseCellsUpTo: c.upTo})
			const B = 3
			H, rows := c.hidden, max(B, c.next)
			buf := func(n int) device.Buffer {
				b, err := d.Alloc(int64(n)*4, device.Workspace)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			k := d.Kernels()
			for _, call := range []struct {
				name string
				do   func() error
			}{
				{"LSTMCellGrad", func() error {
					dPre, next := buf(4*B*H), buf(4*rows*H)
					if c.nextIsOut {
						next = dPre
					}
					return k.LSTMCellGrad(device.LSTMCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: buf(4 * B * H),
						CPrev: buf(B * H), C: buf(B * H), DH: buf(rows * H), DC: buf(B * H), DPre: dPre, DCPrev: buf(B * H),
						DPreNext: next, W: buf(4 * H * H), NextBatch: c.next})
				}},
				{"GRUCellGrad", func() error {
					dhp, next := buf(3*B*H), buf(3*rows*H)
					if c.nextIsOut {
						next = dhp
					}
					return k.GRUCellGrad(device.GRUCellGrad{DType: device.Float32, Batch: B, Hidden: H, Act: buf(4 * B * H),
						HPrev: buf(B * H), DH: buf(rows * H), DXPre: buf(3 * B * H), DHPre: dhp, DHPrev: buf(B * H),
						DHPreNext: next, W: buf(3 * H * H), NextBatch: c.next})
				}},
			} {
				before := d.Counts()
				if err := call.do(); err != nil {
					t.Fatalf("%s: %v", call.name, err)
				}
				if got := d.Counts().Sub(before); got != c.want {
					t.Errorf("%s counted %+v, want %+v", call.name, got, c.want)
				}
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
