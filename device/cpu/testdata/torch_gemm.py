#!/usr/bin/python3
"""SGEMM GFLOP/s of PyTorch's CPU BLAS at the shapes of BenchmarkGemm.

The comparison for device/cpu's GEMM benchmark: run both in the same session
and compare ratios, never absolute figures from different runs.

    apt-get install -y python3-torch libopenblas0-pthread  # Debian's PyTorch 1.13 + OpenBLAS
    /usr/bin/python3 device/cpu/testdata/torch_gemm.py [threads]

Prints one JSON line per shape: {"shape", "m", "n", "k", "gflops"}; the
figure is the best of 5 rounds of at least 0.2 s each.
"""
import json
import sys
import time

import torch

# (name, transA, transB, m, n, k): the shapes of BenchmarkGemm in
# device/cpu/bench_test.go (the char-RNN bench workload: hidden 256, embed
# 64, vocab 65, batch 32, sequence 64).
SHAPES = [
    ("input-proj-l0", False, True, 2048, 1024, 64),
    ("input-proj-l1", False, True, 2048, 1024, 256),
    ("recurrent", False, True, 32, 1024, 256),
    ("bwd-dx", False, False, 2048, 256, 1024),
    ("bwd-dw", True, False, 1024, 256, 2048),
    ("bwd-dh", False, False, 32, 256, 1024),
    ("head", False, True, 2048, 65, 256),
    ("sample-step", False, True, 1, 1024, 256),
]


def operand(rows, cols, trans):
    """A row-major rows x cols operand, stored transposed when trans."""
    if trans:
        return torch.rand(cols, rows).t()
    return torch.rand(rows, cols)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(threads)
    for name, ta, tb, m, n, k in SHAPES:
        a, b = operand(m, k, ta), operand(k, n, tb)
        c = torch.empty(m, n)
        best = 0.0
        for _ in range(5):
            reps, start = 0, time.perf_counter()
            while True:
                torch.mm(a, b, out=c)
                reps += 1
                elapsed = time.perf_counter() - start
                if elapsed >= 0.2:
                    break
            best = max(best, 2.0 * m * n * k * reps / elapsed / 1e9)
        print(json.dumps({"shape": name, "m": m, "n": n, "k": k, "threads": threads,
                          "gflops": round(best, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
