package meta

import (
	"fmt"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
)

// kernels is device.Kernels that checks each call's arguments (as every
// device does, with the same errors) and runs nothing.
// kernels are a meta device's kernels, on its compute stream or on a
// branch, whose temporaries come from the allocator stream temps.
type kernels struct {
	d     *Device
	temps alloc.Stream
}

var (
	_ device.Kernels = kernels{}
	_ device.Walker  = kernels{}
)

// check is every kernel: an open device and valid arguments.
func (k kernels) check(name string, a interface{ Check(device.Device) error }) error {
	if err := k.d.checkOpen(name); err != nil {
		return err
	}
	if err := a.Check(k.d); err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.cfg.Name, name, err)
	}
	return nil
}

// temporary allocates and frees n bytes of workspace, as the CUDA device's
// kernel does, when the Config asks for it.
func (k kernels) temporary(name string, n int64) error {
	if !k.d.cfg.KernelTemporaries {
		return nil
	}
	p, err := k.d.mem.AllocCategory(n, k.temps, alloc.Workspace)
	if err == nil {
		k.d.graphs.Allocated(p)
	}
	if err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.cfg.Name, name, err)
	}
	if k.d.graphs.Keep(p) {
		return nil // a graph keeps it, as on the CUDA device
	}
	return k.d.mem.Free(p)
}

func (k kernels) Gemm(a device.Gemm) error                 { return k.check("Gemm", a) }
func (k kernels) LSTMCell(a device.LSTMCell) error         { return k.check("LSTMCell", a) }
func (k kernels) LSTMCellGrad(a device.LSTMCellGrad) error { return k.check("LSTMCellGrad", a) }
func (k kernels) GRUCell(a device.GRUCell) error           { return k.check("GRUCell", a) }
func (k kernels) GRUCellGrad(a device.GRUCellGrad) error   { return k.check("GRUCellGrad", a) }

// The walks check their arguments: a walk takes no temporary
// on any device (the CUDA device's persistent walk synchronises its
// blocks through words of its own, outside the allocator).
func (k kernels) LSTMWalk(a device.LSTMWalk) error           { return k.check("LSTMWalk", a) }
func (k kernels) GRUWalk(a device.GRUWalk) error             { return k.check("GRUWalk", a) }
func (k kernels) LSTMGradWalk(a device.LSTMGradWalk) error   { return k.check("LSTMGradWalk", a) }
func (k kernels) GRUGradWalk(a device.GRUGradWalk) error     { return k.check("GRUGradWalk", a) }
func (k kernels) GatherSeq(a device.GatherSeq) error         { return k.check("GatherSeq", a) }
func (k kernels) SeqPool(a device.SeqPool) error             { return k.check("SeqPool", a) }
func (k kernels) SeqPoolGrad(a device.SeqPoolGrad) error     { return k.check("SeqPoolGrad", a) }
func (k kernels) Embedding(a device.Embedding) error         { return k.check("Embedding", a) }
func (k kernels) EmbeddingGrad(a device.EmbeddingGrad) error { return k.check("EmbeddingGrad", a) }
func (k kernels) SoftmaxCrossEntropy(a device.SoftmaxCrossEntropy) error {
	if err := k.check("SoftmaxCrossEntropy", a); err != nil {
		return err
	}
	return k.temporary("SoftmaxCrossEntropy", int64(a.N)*8)
}

func (k kernels) Softmax(a device.Softmax) error { return k.check("Softmax", a) }
func (k kernels) Sample(a device.Sample) error   { return k.check("Sample", a) }
func (k kernels) Dropout(a device.Dropout) error { return k.check("Dropout", a) }
func (k kernels) Advance(a device.Advance) error { return k.check("Advance", a) }
func (k kernels) AddBias(a device.AddBias) error { return k.check("AddBias", a) }
func (k kernels) SumRows(a device.SumRows) error { return k.sumRows(a) }
func (k kernels) Fill(a device.Fill) error       { return k.check("Fill", a) }
func (k kernels) Copy(a device.Copy) error       { return k.check("Copy", a) }
func (k kernels) Axpby(a device.Axpby) error     { return k.check("Axpby", a) }
func (k kernels) Mul(a device.Mul) error         { return k.check("Mul", a) }
func (k kernels) Clamp(a device.Clamp) error     { return k.check("Clamp", a) }
func (k kernels) SumSquares(a device.SumSquares) error {
	if err := k.check("SumSquares", a); err != nil {
		return err
	}
	return k.temporary("SumSquares", int64(max(1, min((a.N+partWork-1)/partWork, maxParts)))*8)
}

func (k kernels) SGD(a device.SGD) error                 { return k.check("SGD", a) }
func (k kernels) Adam(a device.Adam) error               { return k.check("Adam", a) }
func (k kernels) RMSprop(a device.RMSprop) error         { return k.check("RMSprop", a) }
func (k kernels) StepGuard(a device.StepGuard) error     { return k.check("StepGuard", a) }
func (k kernels) GuardedCopy(a device.GuardedCopy) error { return k.check("GuardedCopy", a) }

// sumRows is SumRows: the CUDA device's temporary when it cuts the rows
// into slices (rowSlices).
func (k kernels) sumRows(a device.SumRows) error {
	if err := k.check("SumRows", a); err != nil {
		return err
	}
	if slices := rowSlices(a.Rows, a.Cols); slices > 1 {
		return k.temporary("SumRows", int64(slices*a.Cols)*8)
	}
	return nil
}
