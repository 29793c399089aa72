// Package gemm is a fast row-major float32 matrix product (SGEMM) for the
// CPU device: C = alpha·op(A)·op(B) + beta·C, with op(X) = X or Xᵀ.
//
// gorgonia.org/tensor runs its float32 products through a BLAS interface
// whose default, gonum's pure-Go Sgemm, reaches 12–35 GFLOP/s on the two
// cores this package was tuned on. Sgemm here reaches 195–245 GFLOP/s on
// the products of the char-RNN benchmark, the per-time-step ones included,
// and 96 GFLOP/s on the single-row sampling step (figures below). BLAS
// wraps it in gonum's interface, so that
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
// k%8 tail is loaded with VMASKMOVPS, so nothing past a row is read. The
// same dot path serves transposed-B products with few columns (n ≤ 128, the
// 65-wide output head), which the 16-wide panels would pad. With B not
// transposed the 6×16 kernel reads B in place, at stride ldb.
//
// # Threads
//
// A product is cut into parts of at least a quarter MFLOP, row ranges of
// C or column ranges (whichever shares the smaller operand, which each part
// reads and repacks), computed by the calling goroutine and by a pool of
// GOMAXPROCS(0)−1 worker goroutines started by the first product, which
// live as long as the process. Parts are claimed from a counter, so a
// worker busy with another caller's product, or one the scheduler starts
// late, leaves its parts to the caller instead of delaying it; the dot path
// cuts four parts per goroutine to balance cores slowed by other work, and
// counts its reads of B as work too (at few rows of A, as in sampling, they
// cost more than the arithmetic).
//
// Waking a parked goroutine on another core takes 50–100 µs on the KVM
// guest this was tuned on, as long as a whole recurrent-step product, so
// workers poll for new parts for 200 µs after their last one before they
// park (yielding to any other runnable goroutine while they poll), and a
// caller polls as long for its workers to finish before it blocks. Products
// that follow each other closely, as in training, hand parts over in well
// under a microsecond. Packing buffers are reused from a free list, so
// steady-state products allocate nothing.
//
// # Portability
//
// The kernels are Go assembly for amd64 with AVX2 and FMA, detected with
// CPUID (and XGETBV for the operating system's YMM support) at start-up.
// Other CPUs and architectures, and builds with the purego tag, run
// pure-Go kernels of the same shapes: same blocking and threads, results
// equal within rounding, 12–17 GFLOP/s on the two cores.
//
// # Performance
//
// GFLOP/s (2·m·n·k per product) on 2 cores of an AMD EPYC (Zen 5) under
// KVM, median of 3 runs of
//
//	go test -run '^$' -bench 'Sgemm/(ours|gonum)/' -count 3 ./device/cpu/gemm/
//
// with gonum v0.11.0 in the same run, while no other process was running
// (the machine is shared; other tenants halve these figures at times):
//
//	product                        m     n     k   ours   gonum
//	input projection, layer 0   2048  1024    64    243      35
//	input projection, layer 1   2048  1024   256    247      34
//	recurrent step (x·Wᵀ)         32  1024   256    215      33
//	backward dX (dG·W)          2048   256  1024    234      31
//	backward dW (dGᵀ·X)         1024   256  2048    222   5–13
//	backward dh step              32   256  1024    197      22
//	output head                 2048    65   256    233      29
//	sampling step (m = 1)          1  1024   256     96      13
//	square                      1024  1024  1024    241      26
//
// The 6×16 kernel alone runs at 133 GFLOP/s on one core (BenchmarkKernel),
// so the large products reach about 90% of two cores' kernel peak.
//
// Against OpenBLAS (PyTorch 1.13's torch.mm, 2 threads), alternating with
// BenchmarkGemm of package device/cpu (the same products through the CPU
// device) in one session, best of device/cpu/testdata/torch_gemm.py:
// large products 180–242 GFLOP/s for OpenBLAS against 224–248 here, the
// recurrent step 164–167 against 212–217, the dh step 155 against
// 163–176, the output head 110 against 221–227, the sampling step 8.7
// against 54–73.
//
// # Concurrency
//
// Sgemm and BLAS are safe for concurrent use by several goroutines, as
// long as their C matrices do not overlap.
package gemm
