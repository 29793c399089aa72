// Package loader turns text on disk into batches resident on a device,
// without holding the corpus in memory and without making the device wait.
//
// # Corpus, vocabulary, text
//
// A Corpus is a file, a directory tree (regular files in lexical order of
// their paths, read as one continuous stream; files that are not text,
// binary by their first 8 KiB or safetensors checkpoints, are left out
// and listed by Corpus.Skipped) or any io.ReaderAt. Tokenize
// reads it once, in chunks: it validates UTF-8, builds the vocabulary (the
// distinct characters sorted by code point) or checks the characters
// against a given one, counts the tokens and keeps a sparse index (the byte
// offset of every 1024th token). The resulting Text reads any token range
// by seeking to the nearest indexed token, so memory is a few bytes per
// thousand tokens whatever the corpus size. Text.Split keeps the end of the
// text for validation.
//
// # Labelled data
//
// For tagging and classification, ExampleReader streams the examples of a
// file in CoNLL-U (the word form and the UPOS or XPOS column; comments,
// multiword tokens and empty nodes as the format says), two-column TSV
// (token<TAB>tag, sentences separated by blank lines) or JSON lines
// ({"tokens", "tags"}, {"tokens", "label"} or {"text", "label"}).
// OpenDataset reads a file once to build its vocabularies (Words: words or
// characters with 0 for padding and 1 for unknown, a minimum count;
// Labels) or check it against given ones, and to index it (each example's
// offset and length), then reads any example from disk: memory holds a few
// numbers per example. Malformed input is a *LineError with the file, the
// line and the reason; so is a line longer than ReadConfig.MaxLine (1 MiB
// by default), found without reading the line whole, so that memory stays
// bounded whatever the input. Buckets groups examples of similar lengths into
// batches (sorted within pools of batches, seeded per epoch, an optional
// token budget), Padding says what fraction of a batching is padding,
// Collate lays a batch out time-major with its lengths and labels
// (IgnoreLabel at padding), CollateConfig.Chars adds the characters of its
// words for a model's character features (the real words only, time-major
// over them, with the permutation between the batch's positions and its
// words), and a SeqLoader delivers those batches to a device through a
// staging ring and a copy stream, from any Position.
//
// # Batches
//
// A Loader cuts a Text into batches by the Mode of its Config. In Streams
// mode (the char-RNN contract) the text is cut into Batch·Accum contiguous
// streams read by windows of Seq inputs and Seq targets, in order, for
// truncated backpropagation through time; micro-batch j of a step holds
// streams j·Batch .. (j+1)·Batch-1. In Windows mode windows start every
// Stride tokens and are shuffled each epoch from a seed. A Position (epoch
// and batch index) says where an iteration starts, so a run resumes exactly
// where a checkpoint left it.
//
// # Pipeline
//
// New allocates a ring of Prefetch+1 staging buffers (device.Staging:
// pinned on CUDA) and as many device batches, once. While the consumer
// works on one batch, producer goroutines fill the next slots from the
// text and copy each to its device batch on a copy stream; the compute
// stream waits on the copy's event, never the host. A staging buffer is
// refilled only after its copy completed, and a device batch is
// overwritten only after the compute stream passed the point where the
// consumer returned it. Stats reports what the consumer waited.
//
// # Ownership and concurrency
//
// Batches is an iter.Seq2[Batch, error]; a Batch's device buffers are valid
// in the loop body that receives it, for kernels queued on the compute
// stream there. One iteration runs at a time. Cancelling the context ends
// it with the context's error, Close with ErrClosed, at once even while a
// producer is blocked reading the data (a reader waiting for data that does
// not come, a stalled network filesystem); every goroutine has ended when
// the loop does, but such a producer, which the loop does not wait for: it
// reads into memory of its own, and when its read returns it returns too,
// touching nothing of the loader's. A second iteration while one runs
// (Batches, or a SeqLoader's Load) is refused with an error matching
// ErrBusy. A Text, a Corpus's ReadAt and a Dataset's Example are safe for
// concurrent use; Close may be called from any goroutine.
//
// # Errors
//
// After Close, what reads the data or the device (Corpus.ReadAt,
// Dataset.Example, Batches, Load) returns an error matching ErrClosed
// (device.ErrClosed, the one sentinel of every package) naming the method;
// the getters (sizes, configurations, vocabularies, Stats) keep
// answering, and a second Close does nothing. A Close while Load runs
// ends it with ErrClosed and frees the ring after it.
//
// Invalid UTF-8 and characters outside a given vocabulary are *DataError
// naming the file and byte offset (or are mapped to an unknown token when
// TokenizeConfig.Unknown asks for that); an empty corpus is ErrEmpty, a text
// too short for one batch ErrTooShort. A configuration whose sizes
// overflow (Batch × Accum, Seq + 1, a batch's staging) or pass a maximum
// (MaxAccum, MaxPrefetch, MaxWorkers, MaxStepExamples) is an error naming
// the fields and their values, from New, NewSeqLoader and Validate, which
// a command line or a service runs on its flags or specs first.
//
// The loader imports device only (never cuda, never rnn).
package loader
