// Package loader turns text on disk into batches resident on a device
// without holding the corpus in memory and without making the device wait:
// corpus files are streamed and tokenized into characters, cut into
// contiguous streams read by independent cursors (or into shuffled windows),
// packed into a fixed ring of staging buffers by producer goroutines, and
// copied to the device on a copy stream whose events the compute stream
// waits on. Batches are delivered as an iter.Seq2[Batch, error]; a context
// cancels; closing leaves no goroutine behind.
//
// The loader imports device only (never cuda, never rnn). It arrives with
// issue 5.
package loader
