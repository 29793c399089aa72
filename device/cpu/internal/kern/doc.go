// Package kern holds the bodies of the CPU device's pointwise kernels as
// plain Go functions over slices.
//
// The CPU device (package device/cpu) checks a kernel's arguments, resolves
// its device.Buffers to Go slices, splits the work into parts (ranges of
// rows, or of columns where a function says so) and calls the function
// here once per part on its thread pool. So a function sees only the
// slices of its part; the number of rows is implied by a slice length that
// its documentation names, and the other slices must hold at least as many
// rows. The functions trust their caller's validation: they do not
// allocate, start goroutines or check shapes, and with valid input they do
// not panic. Each one writes exactly what the matching argument struct of
// package device specifies, including the outputs that may alias an
// input (each element is read before it is written).
//
// The float functions are generic over Float. float64 serves gradient
// checks and float32 the speed path; a function picks the float32 or
// float64 activations once per call (or per chunk of 64 elements), never
// per element through an interface.
//
// # Concurrency
//
// The functions keep no state, so calls whose outputs are disjoint may run
// at the same time; that is how the device's pool runs the parts. The
// parts of EmbeddingGrad and SumRows are ranges of columns, not rows,
// because every row adds into the same output: split by columns, each part
// adds its rows in index order and the result does not depend on the
// number of cores.
//
// # Numerics
//
// The LSTM and GRU cells compute each element in float64 from the stored
// values and round the results once to the element type. Their float64
// instances use math.Exp and math.Tanh. Their float32 instances use
// float64 exp-based sigmoid and tanh: musl-style table reduction
// exp(t) = 2^(k/32)·(1 + q(r)), |r| ≤ ln2/64, with a degree-4 Taylor q,
// 1.2e-12 relative error for exp and sigmoid; tanh = em/(em+2) with
// em = expm1(2x), which keeps relative accuracy near 0, 1.2e-10 at worst.
// Measured over every finite float32 input against math in float64, the
// stored float32 results are within 0.50002 ulp (sigmoid) and 0.50132 ulp
// (tanh): correctly rounded but for rare near-halfway cases;
// TestFastActivations rechecks it on a grid. Sigmoid saturates to exactly 1
// and to 0 in float32, tanh to exactly ±1; tanh keeps the sign of zero;
// NaN propagates. They take about a third of the time of their
// math-package forms (BenchmarkActivations).
//
// Sums are float64 and added in a fixed order, so results are
// deterministic: SoftmaxCrossEntropy's row sums and loss, Softmax's row
// sums, SumSquares (four interleaved partial sums each), SumRows (row
// order, rounded once), SeqPool's mean (step order, divided by the length
// and rounded once: the CUDA kernel's operations in the same order), and
// Sample's weights and sums (float64 in device.Sample's documented order,
// with device.SampleExp: the CUDA kernel's bits, not merely its
// precision). The softmax of a float32 row uses the fast exp;
// its float32 outputs are within 1.5 ulp (two roundings). The optimizer
// steps compute in the element type with the hyperparameters rounded to
// it, as PyTorch does, and compute per-call scalars (Adam's bias
// corrections) once in float64.
//
// A part's call, here the loss of two rows of three classes:
//
//	logits := []float32{2, 1, 0, 0, 0, 5}
//	dLogits := make([]float32, 6)
//	loss, bad := kern.SoftmaxCrossEntropy(3, logits, []int32{0, 2}, 0.5, dLogits)
//	// loss = 0.5·(-log softmax(2,1,0)[0] - log softmax(0,0,5)[2]), bad = -1
package kern
