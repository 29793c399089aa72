// Package charrnn is the command line of the character-level RNN example,
// the first thing a newcomer runs (go run ./examples/charrnn train),
// importable so that a test or a script can drive the same code: Run, and
// Train, Sample, Eval and Bench with their flags as structs. The model
// itself is library code, models.CharRNN (its checkpoints carry PyTorch's
// names; models.LoadCharRNN loads one PyTorch wrote), and -device is
// devices.Open's spec. The four commands have the command line of the
// architecture's public contract:
//
//   - train: -data (default: the hand-written, ASCII-only Go files of the
//     standard library under $(go env GOROOT)/src, outside testdata and
//     without generated files, streamed from disk; a directory's files
//     that are not text, binary or checkpoints, are left out with a
//     warning), -cell, -embed, -hidden, -layers, -dropout, -batch, -seq,
//     -accum, -optimizer, -lr, -clip, -steps or -epochs, -val-frac,
//     -device, -seed, -init, -resume, -checkpoint, -force, -plot, -memstats, -json;
//     and -schedule, -warmup, -val-tokens, -eval-every, -log-every,
//     -checkpoint-every, -sample, -temperature, -prime, -tf32, -skip-nonfinite,
//     -max-skips, -pipeline. A progress bar on a
//     terminal, plain lines otherwise; Ctrl-C, SIGTERM or SIGHUP (main
//     cancels the context) ends
//     the run at a step boundary and saves the checkpoint. An
//     existing -checkpoint is replaced only with -force or by -resume
//     from that same file. -resume continues the run as the checkpoint
//     records it: its shape, batching, seed, optimizer, rate, clipping,
//     schedule (a cosine's end included), held-out fraction and, unless
//     -steps or -epochs is given, its end; -init takes the shape. Those
//     flags need not be repeated; one given with another value is a usage
//     error naming both. -steps and -epochs may change (not past a cosine
//     schedule's end), as may every flag of outputs, validation, logging,
//     sampling and the device.
//   - sample: -checkpoint, -n, -temperature (0: argmax), -top-k, -prime,
//     -seed, -device, -unknown, -memstats, -json.
//   - eval: -checkpoint, -data, -batch, -seq, -device, -unknown, -json: loss in
//     nats/char and bits/char, cut into streams as training cuts them,
//     with progress as it reads and evaluates the text.
//   - bench: the workload of bench/torch_charrnn.py; prints
//     train_tokens_per_s, sample_tokens_per_s, segment_allocs (device
//     allocations during the timed run) and data_wait; -tf32 on a GPU.
//
// -json makes every line of standard output one JSON object with an
// "event" field, and leaves standard error empty: warnings are "warning"
// events, the progress of a long phase "progress" events, and Report
// prints a failure as an "error" event. -device auto takes the first GPU if one can be used and
// the CPU otherwise (devices.Open); Env.CUDA carries the GPU's libraries
// (main reads GOCURRENT_CUBLAS and GOCURRENT_CUDA_DRIVER) and -tf32 sets
// its TF32.
//
// # Errors and exit statuses
//
// Every flag of every command is checked before any work: before a
// device is opened or a file read. A bad value is an error wrapping
// ErrUsage that names the flag and its value (-batch 0, -accum 0, a
// negative -sample, a non-finite -temperature, a -plot not ending in
// .png, ...). Train checks -prime in the vocabulary as soon as it has
// one, before the first step, and before any work checks its outputs:
// -checkpoint and -plot must be writable (a probe file,
// ".NAME.probe-*" beside the output, is created and removed at once),
// and an existing -checkpoint is not replaced unless -force says so or
// the run resumes from it. Those errors wrap both ErrUsage and
// ErrOutput. The charrnn program exits with status 2 for an error
// wrapping ErrUsage, 1 for any other failure and 0 on success (help
// included); a run that SIGINT, SIGTERM or SIGHUP ended (at a step
// boundary, the checkpoint saved) exits with 128 + the signal's number.
package charrnn
