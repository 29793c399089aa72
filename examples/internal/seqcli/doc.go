// Package seqcli is the command line of the two sequence examples,
// examples/tagger (a tag per token) and examples/classify (a label per
// sequence): the same commands, flags and conventions for both, on the
// library's models.Tagger and models.Classifier, trained by train.NewSeq
// on a loader.SeqLoader.
//
//   - train: -data PATH [-val PATH] [-format conllu|tsv|jsonl] [-column
//     upos|xpos] -cell lstm|gru -embed 100 -hidden 128 -layers 1
//     -bidirectional=true -dropout 0, the tagger's -char-embed 0
//     -char-hidden 0, the classifier's -pool last|mean|max and -input
//     words|chars, -batch 32 (or auto) -effective-batch 0 -accum 1
//     -max-tokens 0, -memory-limit SIZE, -epochs 5 (or -steps N),
//     -optimizer adam -lr 1e-3 -clip 5 -min-count 1 -device
//     auto|cpu|cuda|cuda:N -seed 1 -checkpoint tagger.safetensors (or
//     classifier.safetensors) -force -resume PATH -log-every 50
//     -per-class -memstats -json. Without -data it trains on the default
//     data (package godata: derived from the Go standard library's source,
//     written once to the user's cache directory), validates on its
//     held-out part every epoch and prints sample predictions. The
//     checkpoint is written every epoch, at the end and when the context
//     is cancelled (Ctrl-C); -resume continues it exactly, given the same
//     data and batching flags.
//   - eval -checkpoint PATH -data PATH [-format] [-column] [-batch]
//     [-device] [-per-class] [-json]: loss (mean cross-entropy over the
//     real tokens, or the sequences, in nats), accuracy, and tokens and
//     sentences (tagger) or macro_f1 and sequences (classifier); one JSON
//     object with -json.
//   - predict -checkpoint PATH [-batch] [-device] [-json]: one sentence
//     per input line (tokens separated by spaces; a classifier reading
//     characters takes the line's text), one line of output per line: the
//     tags, separated by spaces, or the label.
//   - plan: the device memory train would use with the same flags, by
//     category, planned on a meta device without allocating any
//     (models.PlanMemory): train's first epoch, its batches in train's
//     order, from the data's lengths (-data, -val, or the default data),
//     or -vocab N -classes N -seq N (-chars N) without data; whether it
//     fits -device (or -capacity SIZE, not opened) under -memory-limit,
//     and if not the largest batch and the accumulation that fit
//     (models.Advise); -batch auto plans train's search.
//
// Train's -batch auto finds the largest batch that fits in two searches:
// training steps on the device at the longest sequence length
// (models.FitBatch), then the first epoch planned, its batches of several
// shapes fragmenting the cache as the run's will (models.EpochBatch). An
// out-of-memory error carries the planner's advice (models.WithAdvice).
//
// Every flag is checked before any work; a bad one is an error wrapping
// ErrUsage (exit status 2) naming the flag and its value. An existing
// -checkpoint is replaced only with -force or by -resume from it
// (ErrOutput). Data errors name the file, line and reason. With -json
// every line of standard output is one JSON object with an "event" field
// (train) and Report prints a failure as an "error" event.
package seqcli
