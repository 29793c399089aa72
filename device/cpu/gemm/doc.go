// Package gemm is a fast row-major float32 matrix product (SGEMM) for the
// CPU device: C = alpha·op(A)·op(B) + beta·C, with op(X) = X or Xᵀ.
//
// gorgonia.org/tensor runs its float32 products through a BLAS interface
// whose default, gonum's pure-Go Sgemm, reaches 15–35 GFLOP/s on the two
// cores this package was tuned on. Sgemm here reaches 200–245 GFLOP/s on
// the large products of the char-RNN benchmark and 110 GFLOP/s on its
// per-time-step products (figures below). BLAS wraps it in gonum's
// interface, so that
//
//	tensor.Use(gemm.BLAS{})
//
// makes tensor use it, and a user can still install another BLAS (OpenBLAS)
// with tensor.Use instead.
//
// # Algorithm
//
// Large products follow Goto and van de Geijn ("Anatomy of high-performance
// matrix multiplication", 2008) as structured by BLIS: loops over blocks of
// nc columns of C, kc steps of the inner dimension and mc rows, with
//
//   - a kc×nc block of op(B) packed into panels of nr = 16 columns, each
//     panel kc×16 contiguous (16 KiB at kc = 256, kept in L1);
//   - an mc×kc block of op(A) packed into panels of mr = 6 rows (144 KiB at
//     mc = 144, kept in L2);
//   - a micro-kernel computing one 6×16 tile of C from one A panel and one
//     B panel: twelve 8-lane AVX2 accumulators updated by VBROADCASTSS of
//     an A value and VFMADD231PS with two B vectors per step, then scaled by
//     alpha and added to beta·C once at the end.
//
// Packing makes the kernel's memory access the same for all four
// transpositions and any leading dimensions; the transposition is paid once
// per element in the packing loops. Edge tiles (m or n not a multiple of 6
// or 16) run the kernel on zero-padded panels into a 6×16 scratch tile and
// copy the valid part out. Blocks are balanced (k = 300 runs as two steps
// of 152, not 256 + 44).
//
// Products with few rows (m ≤ 64: the recurrent step of a batch of 32, the
// single-row sampling step) do not pack B, which they would read only a few
// times. With B transposed (x·Wᵀ, W stored n×k) each element of C is a dot
// product of two contiguous rows: a 3×4 kernel keeps twelve 8-lane partial
// sums, 3 rows of A in registers and streams 4 rows of W, and reduces the
// sums with VHADDPS at the end; single rows of A use a 1×8 form of it. The
// k%8 tail is loaded with VMASKMOVPS, so nothing past a row is read. With B
// not transposed the 6×16 kernel reads B in place, at stride ldb.
//
// # Threads
//
// A product of more than a few MFLOP is cut into parts, row ranges of C or
// column ranges (whichever repacks the smaller shared operand), computed by
// the calling goroutine and by idle goroutines of a pool that the first
// such product starts: GOMAXPROCS(0)−1 goroutines at that moment, which
// live as long as the process and sleep between products. Parts are
// claimed from a counter, so a helper that is busy with another caller's
// product, or that the scheduler starts late, leaves its parts to the
// caller rather than delaying it. Packing buffers are per goroutine and
// reused, so steady-state products allocate nothing.
//
// # Portability
//
// The kernels are Go assembly for amd64 with AVX2 and FMA, detected with
// CPUID (and XGETBV for the operating system's YMM support) at start-up.
// Other CPUs and architectures, and builds with the purego tag, run
// pure-Go kernels of the same shape: same blocking, same results within
// rounding, 6–13 GFLOP/s.
//
// # Performance
//
// GFLOP/s (2·m·n·k per product) on 2 cores of an AMD EPYC (Zen 5) under
// KVM, median of 3 runs of
//
//	go test -run '^$' -bench Sgemm -count 3 ./device/cpu/gemm/
//
// with gonum v0.11.0 in the same run:
//
//	product                        m     n     k   ours   gonum
//	input projection, layer 0   2048  1024    64    215      30
//	input projection, layer 1   2048  1024   256    235      28
//	recurrent step (x·Wᵀ)         32  1024   256    110      17
//	backward dX (dG·W)          2048   256  1024    220      16
//	backward dW (dGᵀ·X)         1024   256  2048    215      15
//	backward dh step              32   256  1024     95      26
//	output head                 2048    65   256    135      32
//	sampling step (m = 1)          1  1024   256     57      11
//	square                      1024  1024  1024    235      17
//
// One core peaks at about 123 GFLOP/s (2 FMA pipes × 8 lanes × 2 flops at
// ~3.8 GHz); the large products run at 85–95% of two cores' peak.
//
// # Concurrency
//
// Sgemm and BLAS are safe for concurrent use by several goroutines, as
// long as their C matrices do not overlap.
package gemm
