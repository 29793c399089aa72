// Package charrnn is the command line of the character-level RNN example,
// the first thing a newcomer runs (go run ./examples/charrnn train),
// importable so that a test or a script can drive the same code: Run, and
// Train, Sample, Eval and Bench with their flags as structs. The model
// itself is library code, models.CharRNN (its checkpoints carry PyTorch's
// names; models.LoadCharRNN loads one PyTorch wrote), and -device is
// devices.Open's spec. The four commands have the command line of the
// architecture's public contract:
//
//   - train: -data (default: the Go standard library's source under
//     $(go env GOROOT)/src, its ASCII Go files outside testdata, streamed
//     from disk), -cell, -embed, -hidden, -layers, -dropout, -batch, -seq,
//     -accum, -optimizer, -lr, -clip, -steps or -epochs, -val-frac,
//     -device, -seed, -init, -resume, -checkpoint, -plot, -memstats, -json;
//     and -schedule, -warmup, -val-tokens, -eval-every, -log-every,
//     -checkpoint-every, -sample, -temperature, -prime, -tf32. A progress bar on a
//     terminal, plain lines otherwise; Ctrl-C (a cancelled context) ends
//     the run after the step under way and saves the checkpoint.
//   - sample: -checkpoint, -n, -temperature (0: argmax), -top-k, -prime,
//     -seed, -device, -memstats, -json.
//   - eval: -checkpoint, -data, -batch, -seq, -device, -json: loss in
//     nats/char and bits/char, cut into streams as training cuts them.
//   - bench: the workload of bench/torch_charrnn.py; prints
//     train_tokens_per_s, sample_tokens_per_s, segment_allocs (device
//     allocations during the timed steps) and data_wait; -tf32 on a GPU.
//
// -json makes every line of standard output one JSON object with an
// "event" field. -device auto takes the first GPU if one can be used and
// the CPU otherwise (devices.Open); Env.CUDA carries the GPU's libraries
// (main reads GOCURRENT_CUBLAS and GOCURRENT_CUDA_DRIVER) and -tf32 sets
// its TF32.
package charrnn
