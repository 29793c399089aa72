//go:build amd64 && !purego

#include "textflag.h"

// Each kernel computes alpha times a small product and stores it into C,
// adding beta times C only when beta != 0 (so that NaN or Inf in C does not
// propagate when beta == 0, as BLAS requires). Beta is compared with
// UCOMISS: a NaN beta is "not zero" and takes the reading path.

// tailMask<> holds eight all-ones words then eight zero words. Loading eight
// words at byte offset 4*(8-r) gives a VMASKMOVPS mask selecting r lanes.
DATA tailMask<>+0(SB)/4, $0xffffffff
DATA tailMask<>+4(SB)/4, $0xffffffff
DATA tailMask<>+8(SB)/4, $0xffffffff
DATA tailMask<>+12(SB)/4, $0xffffffff
DATA tailMask<>+16(SB)/4, $0xffffffff
DATA tailMask<>+20(SB)/4, $0xffffffff
DATA tailMask<>+24(SB)/4, $0xffffffff
DATA tailMask<>+28(SB)/4, $0xffffffff
DATA tailMask<>+32(SB)/4, $0
DATA tailMask<>+36(SB)/4, $0
DATA tailMask<>+40(SB)/4, $0
DATA tailMask<>+44(SB)/4, $0
DATA tailMask<>+48(SB)/4, $0
DATA tailMask<>+52(SB)/4, $0
DATA tailMask<>+56(SB)/4, $0
DATA tailMask<>+60(SB)/4, $0
GLOBL tailMask<>(SB), RODATA|NOPTR, $64

// One step of the 6x16 kernel: two vectors of B, six broadcasts of A, twelve
// FMAs into Y0..Y11 (row i in Y(2i), Y(2i+1)).
#define STEP6x16(aoff) \
	VMOVUPS      (BX), Y12;          \
	VMOVUPS      32(BX), Y13;        \
	ADDQ         R8, BX;             \
	VBROADCASTSS aoff+0(AX), Y14;    \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VBROADCASTSS aoff+4(AX), Y14;    \
	VFMADD231PS  Y12, Y14, Y2;       \
	VFMADD231PS  Y13, Y14, Y3;       \
	VBROADCASTSS aoff+8(AX), Y14;    \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VBROADCASTSS aoff+12(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y6;       \
	VFMADD231PS  Y13, Y14, Y7;       \
	VBROADCASTSS aoff+16(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VBROADCASTSS aoff+20(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y10;      \
	VFMADD231PS  Y13, Y14, Y11

// func kernel6x16(k int, a *float32, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32)
//
// C[6x16] = alpha * A·B + beta * C with A packed k-major in panels of six
// (a[p*6+i]), B rows of 16 at stride ldb (16 when packed), C at stride ldc.
TEXT ·kernel6x16(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ ldb+24(FP), R8
	SHLQ $2, R8
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R9
	SHLQ $2, R9

	// Warm the six rows of C; the stores at the end then hit L1.
	LEAQ       (DI)(R9*2), R10
	ADDQ       R9, R10
	PREFETCHT0 (DI)
	PREFETCHT0 60(DI)
	PREFETCHT0 (DI)(R9*1)
	PREFETCHT0 60(DI)(R9*1)
	PREFETCHT0 (DI)(R9*2)
	PREFETCHT0 60(DI)(R9*2)
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	PREFETCHT0 (R10)(R9*1)
	PREFETCHT0 60(R10)(R9*1)
	PREFETCHT0 (R10)(R9*2)
	PREFETCHT0 60(R10)(R9*2)

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	MOVQ CX, DX
	ANDQ $3, DX
	SHRQ $2, CX
	JZ   k6rem

k6loop4:
	STEP6x16(0)
	STEP6x16(24)
	STEP6x16(48)
	STEP6x16(72)
	ADDQ $96, AX
	DECQ CX
	JNZ  k6loop4

k6rem:
	TESTQ DX, DX
	JZ    k6done

k6loop1:
	STEP6x16(0)
	ADDQ $24, AX
	DECQ DX
	JNZ  k6loop1

k6done:
	VBROADCASTSS alpha+48(FP), Y14
	VMULPS       Y14, Y0, Y0
	VMULPS       Y14, Y1, Y1
	VMULPS       Y14, Y2, Y2
	VMULPS       Y14, Y3, Y3
	VMULPS       Y14, Y4, Y4
	VMULPS       Y14, Y5, Y5
	VMULPS       Y14, Y6, Y6
	VMULPS       Y14, Y7, Y7
	VMULPS       Y14, Y8, Y8
	VMULPS       Y14, Y9, Y9
	VMULPS       Y14, Y10, Y10
	VMULPS       Y14, Y11, Y11

	VXORPS   X15, X15, X15
	VMOVSS   beta+52(FP), X13
	VUCOMISS X15, X13
	JNE      k6beta
	JPS      k6beta

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (DI)(R9*1)
	VMOVUPS Y3, 32(DI)(R9*1)
	VMOVUPS Y4, (DI)(R9*2)
	VMOVUPS Y5, 32(DI)(R9*2)
	VMOVUPS Y6, (R10)
	VMOVUPS Y7, 32(R10)
	VMOVUPS Y8, (R10)(R9*1)
	VMOVUPS Y9, 32(R10)(R9*1)
	VMOVUPS Y10, (R10)(R9*2)
	VMOVUPS Y11, 32(R10)(R9*2)
	VZEROUPPER
	RET

k6beta:
	VBROADCASTSS beta+52(FP), Y15
	VFMADD231PS  (DI), Y15, Y0
	VFMADD231PS  32(DI), Y15, Y1
	VFMADD231PS  (DI)(R9*1), Y15, Y2
	VFMADD231PS  32(DI)(R9*1), Y15, Y3
	VFMADD231PS  (DI)(R9*2), Y15, Y4
	VFMADD231PS  32(DI)(R9*2), Y15, Y5
	VFMADD231PS  (R10), Y15, Y6
	VFMADD231PS  32(R10), Y15, Y7
	VFMADD231PS  (R10)(R9*1), Y15, Y8
	VFMADD231PS  32(R10)(R9*1), Y15, Y9
	VFMADD231PS  (R10)(R9*2), Y15, Y10
	VFMADD231PS  32(R10)(R9*2), Y15, Y11
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y1, 32(DI)
	VMOVUPS      Y2, (DI)(R9*1)
	VMOVUPS      Y3, 32(DI)(R9*1)
	VMOVUPS      Y4, (DI)(R9*2)
	VMOVUPS      Y5, 32(DI)(R9*2)
	VMOVUPS      Y6, (R10)
	VMOVUPS      Y7, 32(R10)
	VMOVUPS      Y8, (R10)(R9*1)
	VMOVUPS      Y9, 32(R10)(R9*1)
	VMOVUPS      Y10, (R10)(R9*2)
	VMOVUPS      Y11, 32(R10)(R9*2)
	VZEROUPPER
	RET

// Reduce four accumulators a0..a3 (eight lanes each) to one xmm holding
// [sum a0, sum a1, sum a2, sum a3] in x0 (a0's low half); xt (a1's low
// half, free after the first add) is scratch.
#define REDUCE4(a0, a1, a2, a3, x0, xt) \
	VHADDPS      a1, a0, a0;  \
	VHADDPS      a3, a2, a2;  \
	VHADDPS      a2, a0, a0;  \
	VEXTRACTF128 $1, a0, xt;  \
	VADDPS       xt, x0, x0

// func dotNT3x4(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha float32, beta float32)
//
// C[3x4] = alpha * A·Bᵀ + beta * C where A is 3 rows and B is 4 rows of k
// contiguous floats (strides lda, ldb): twelve dot products, each kept in
// eight lanes of one accumulator (acc[i][j] in Y(4i+j)) and summed at the
// end. The k%8 tail is loaded first with masked loads, which never touch
// memory past the rows, and initialises the accumulators.
TEXT ·dotNT3x4(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8
	MOVQ b+24(FP), DX
	MOVQ ldb+32(FP), R9
	SHLQ $2, R9
	LEAQ (DX)(R9*2), R11
	ADDQ R9, R11

	MOVQ  CX, BX
	ANDQ  $7, BX
	SHRQ  $3, CX
	TESTQ BX, BX
	JZ    d34notail

	MOVQ    CX, R12
	SHLQ    $5, R12
	LEAQ    tailMask<>(SB), R13
	MOVQ    $8, R14
	SUBQ    BX, R14
	VMOVUPS (R13)(R14*4), Y15

	LEAQ       (SI)(R12*1), R14
	VMASKMOVPS (R14), Y15, Y12
	VMASKMOVPS (R14)(R8*1), Y15, Y13
	VMASKMOVPS (R14)(R8*2), Y15, Y14
	LEAQ       (DX)(R12*1), R14
	VMASKMOVPS (R14), Y15, Y0
	VMULPS     Y0, Y13, Y4
	VMULPS     Y0, Y14, Y8
	VMULPS     Y0, Y12, Y0
	VMASKMOVPS (R14)(R9*1), Y15, Y1
	VMULPS     Y1, Y13, Y5
	VMULPS     Y1, Y14, Y9
	VMULPS     Y1, Y12, Y1
	VMASKMOVPS (R14)(R9*2), Y15, Y2
	VMULPS     Y2, Y13, Y6
	VMULPS     Y2, Y14, Y10
	VMULPS     Y2, Y12, Y2
	LEAQ       (R11)(R12*1), R14
	VMASKMOVPS (R14), Y15, Y3
	VMULPS     Y3, Y13, Y7
	VMULPS     Y3, Y14, Y11
	VMULPS     Y3, Y12, Y3
	JMP        d34check

d34notail:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

d34check:
	TESTQ CX, CX
	JZ    d34reduce

d34loop:
	VMOVUPS     (SI), Y12
	VMOVUPS     (SI)(R8*1), Y13
	VMOVUPS     (SI)(R8*2), Y14
	VMOVUPS     (DX), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS     (DX)(R9*1), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS     (DX)(R9*2), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS     (R11), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, R11
	DECQ        CX
	JNZ         d34loop

d34reduce:
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X5)
	REDUCE4(Y8, Y9, Y10, Y11, X8, X9)

	MOVQ         c+40(FP), DI
	MOVQ         ldc+48(FP), R10
	SHLQ         $2, R10
	VBROADCASTSS alpha+56(FP), X14
	VMULPS       X14, X0, X0
	VMULPS       X14, X4, X4
	VMULPS       X14, X8, X8

	VXORPS   X15, X15, X15
	VMOVSS   beta+60(FP), X13
	VUCOMISS X15, X13
	JNE      d34beta
	JPS      d34beta

	VMOVUPS X0, (DI)
	VMOVUPS X4, (DI)(R10*1)
	VMOVUPS X8, (DI)(R10*2)
	VZEROUPPER
	RET

d34beta:
	VBROADCASTSS beta+60(FP), X15
	VFMADD231PS  (DI), X15, X0
	VFMADD231PS  (DI)(R10*1), X15, X4
	VFMADD231PS  (DI)(R10*2), X15, X8
	VMOVUPS      X0, (DI)
	VMOVUPS      X4, (DI)(R10*1)
	VMOVUPS      X8, (DI)(R10*2)
	VZEROUPPER
	RET

// func dotNT1x8(k int, a *float32, b *float32, ldb int, c *float32, alpha float32, beta float32)
//
// c[0:8] = alpha * (a·b_j for eight rows b_j of B at stride ldb) + beta * c:
// the matrix-vector form of dotNT3x4 for single rows of A (m = 1 sampling
// steps, and rows left over when m is not a multiple of 3).
TEXT ·dotNT1x8(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ ldb+24(FP), R9
	SHLQ $2, R9
	LEAQ (DX)(R9*2), R11
	ADDQ R9, R11
	LEAQ (R11)(R9*2), R12
	ADDQ R9, R12

	MOVQ  CX, BX
	ANDQ  $7, BX
	SHRQ  $3, CX
	TESTQ BX, BX
	JZ    d18notail

	MOVQ    CX, R13
	SHLQ    $5, R13
	LEAQ    tailMask<>(SB), R14
	MOVQ    $8, R10
	SUBQ    BX, R10
	VMOVUPS (R14)(R10*4), Y15

	VMASKMOVPS (SI)(R13*1), Y15, Y8
	LEAQ       (DX)(R13*1), R14
	VMASKMOVPS (R14), Y15, Y0
	VMASKMOVPS (R14)(R9*1), Y15, Y1
	VMASKMOVPS (R14)(R9*2), Y15, Y2
	LEAQ       (R11)(R13*1), R14
	VMASKMOVPS (R14), Y15, Y3
	VMASKMOVPS (R14)(R9*1), Y15, Y4
	VMASKMOVPS (R14)(R9*2), Y15, Y5
	LEAQ       (R12)(R13*1), R14
	VMASKMOVPS (R14), Y15, Y6
	VMASKMOVPS (R14)(R9*1), Y15, Y7
	VMULPS     Y8, Y0, Y0
	VMULPS     Y8, Y1, Y1
	VMULPS     Y8, Y2, Y2
	VMULPS     Y8, Y3, Y3
	VMULPS     Y8, Y4, Y4
	VMULPS     Y8, Y5, Y5
	VMULPS     Y8, Y6, Y6
	VMULPS     Y8, Y7, Y7
	JMP        d18check

d18notail:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

d18check:
	TESTQ CX, CX
	JZ    d18reduce

d18loop:
	VMOVUPS     (SI), Y8
	VFMADD231PS (DX), Y8, Y0
	VFMADD231PS (DX)(R9*1), Y8, Y1
	VFMADD231PS (DX)(R9*2), Y8, Y2
	VFMADD231PS (R11), Y8, Y3
	VFMADD231PS (R11)(R9*1), Y8, Y4
	VFMADD231PS (R11)(R9*2), Y8, Y5
	VFMADD231PS (R12), Y8, Y6
	VFMADD231PS (R12)(R9*1), Y8, Y7
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, R11
	ADDQ        $32, R12
	DECQ        CX
	JNZ         d18loop

d18reduce:
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X5)

	MOVQ         c+32(FP), DI
	VBROADCASTSS alpha+40(FP), X14
	VMULPS       X14, X0, X0
	VMULPS       X14, X4, X4

	VXORPS   X15, X15, X15
	VMOVSS   beta+44(FP), X13
	VUCOMISS X15, X13
	JNE      d18beta
	JPS      d18beta

	VMOVUPS X0, (DI)
	VMOVUPS X4, 16(DI)
	VZEROUPPER
	RET

d18beta:
	VBROADCASTSS beta+44(FP), X15
	VFMADD231PS  (DI), X15, X0
	VFMADD231PS  16(DI), X15, X4
	VMOVUPS      X0, (DI)
	VMOVUPS      X4, 16(DI)
	VZEROUPPER
	RET

// func cpuid(eaxArg uint32, ecxArg uint32) (eax uint32, ebx uint32, ecx uint32, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax uint32, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL   $0, CX
	XGETBV
	MOVL   AX, eax+0(FP)
	MOVL   DX, edx+4(FP)
	RET
