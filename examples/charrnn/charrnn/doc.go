// Package charrnn is the character-level RNN example, the first thing a
// newcomer runs: train, sample, eval and bench commands over the layers,
// loader and trainer, with the command line and checkpoint format of the
// architecture's public contracts. It is importable; a thin main wraps it.
// It is the only package, with tests, that imports cuda.
//
// It arrives with issue 6.
package charrnn
