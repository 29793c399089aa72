#!/bin/sh
# run.sh: compiles the CUDA kernels for the CPU emulator (cuda_emu.h) and
# runs their checks (emu_test.cc). Works from any directory; needs g++ 11
# or later (C++20 <barrier>). CXX overrides the compiler. The same test
# runs in `go test ./cuda` (TestKernelsEmulated).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cxx=${CXX:-g++}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

# Each source must also compile on its own, as nvcc compiles it.
for f in "$here"/../*.cu; do
	"$cxx" -std=c++20 -pthread -Wall -fsyntax-only -x c++ -include "$here/cuda_emu.h" "$f"
done
"$cxx" -std=c++20 -O1 -pthread -Wall -o "$out/emu_test" "$here/emu_test.cc"
"$out/emu_test"
