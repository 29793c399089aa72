// Package rnn holds the layers of a recurrent language model: LSTM and GRU
// stacks, Embedding, Linear and softmax CrossEntropy, with PyTorch's
// equations, parameter names, shapes, gate orders and initialisation, so
// weights move between the two without conversion. The layers are written
// against device.Device alone and run unchanged on every device.
//
// # Fused execution
//
// A stack runs layer by layer, as cuDNN does. For each layer, large GEMMs
// project the inputs of many time steps at once (a chunk of ⌈256/batch⌉
// steps each); then each step is one call of the cell (device.LSTMCell or
// device.GRUCell) given the step's recurrent product, which adds it and
// both biases, applies the gates and writes the new state. Backward walks
// the steps in reverse with one call of the cell gradient per step, given
// the recurrent pre-activation gradient of the step walked back before,
// whose product with the recurrent weights it adds into the gradient it
// reads. The device runs each such call as one kernel or as a GEMM and a
// pointwise kernel (the CUDA device fuses them for small layers, where a
// step's launches cost more than its arithmetic). Then Backward does
// large GEMMs per layer: the gradients of both weight matrices (chunk by
// chunk, from the last), and the gradient with respect to the layer's
// input. Gradients are added into the gradient buffers, never overwritten,
// so gradient accumulation over micro-batches costs nothing: zero them
// (Params.ZeroGrad) once per optimizer step.
//
// # Bidirectional stacks and variable lengths
//
// Config.Bidirectional gives every layer a reverse direction, as
// PyTorch's bidirectional=True: parameters named and ordered as PyTorch's
// (weight_ih_l0, ..., then weight_ih_l0_reverse, ...), so a state dict
// moves unchanged; an output [seq, batch, 2·Hidden] with the forward
// direction's features first; states of Layers·2 rows, layer l's direction
// d at l·2 + d; layers above the first read 2·Hidden features.
//
// ForwardLengths takes each sequence's length, as PyTorch's
// pack_padded_sequence(enforce_sorted=False) does: final states are taken
// after each sequence's own last step, the reverse direction starts each
// sequence at its own last step, outputs at padded positions are zero and
// Backward sends no gradient there. The stack sorts the batch by length
// once per call, so every step's kernels run on the sequences still
// running and nothing else: the work is the sum of the lengths. Without
// lengths nothing changes.
//
// # Modes and memory
//
// Forward takes a Mode. Train saves what Backward needs in a reserve
// buffer the layer reuses from call to call, and applies dropout between
// layers; NoGrad saves nothing and applies no dropout, so the memory of
// evaluation and sampling does not grow with the number of steps or calls.
// Each layer keeps its outputs and temporaries in buffers it owns, grown
// when a call needs more and reused otherwise: a result is valid until the
// layer's next call of the same kind, and steady-state training allocates
// nothing. A training forward keeps references to its inputs rather than
// copies (the ids of an Embedding aside), and its output lies where only
// training forwards write: so a chain of layers saves each activation
// once, and NoGrad forwards between a training forward and its Backward
// change nothing Backward reads. The caller of a layer leaves its
// training input as it is until it has called the layer's Backward. Backward consumes what the training forward saved; calling it
// without one, or twice, is ErrNoForward with a message saying what to do.
//
// # Dropout masks
//
// A stack's masks are a function of a seed and of how many elements were
// drawn before (DropoutState, which a checkpoint records). Both live in
// device memory too, where the kernels read them, and each training
// forward moves the count on the device (device.Advance): so the work of
// a training step recorded in a device graph (device.Grapher) and
// replayed draws new masks at each replay, the masks the forwards queued
// one by one would draw. The caller of a replay tells the stack
// (Replayed), which keeps DropoutState where the device is without
// reading it; SetDropoutState sets both.
//
// # State and truncated backpropagation
//
// A State holds h (and c for an LSTM) for a batch of sequences and belongs
// to the caller. Forward reads it as the initial state and leaves the
// final state in it, so the next window continues where this one ended.
// State.Detach keeps the values and cuts the gradient path into the
// forward that produced them, which is truncated backpropagation through
// time; a training forward refuses a state that was not detached.
//
// # Recomputation
//
// Truncated backpropagation bounds a training step's memory by the window,
// and so the window by memory: a training forward keeps, per LSTM layer,
// h and c of every step and the four gates, about 6·B·H values a step for
// B sequences of H features (8 with dropout below the top; the GRU keeps
// 5). Config.Recompute lifts that bound, for long windows or whole long
// sequences: the stack cuts the T steps in segments of k, keeps only what
// starts each segment, and Backward runs each segment's forward again, the
// last segment first and with the same dropout masks, just before
// differentiating it. The gradients are the same (bit for bit on the CPU
// device) and a training step costs about one more forward, a third more
// time when Backward takes twice the forward. RecomputeAuto picks k =
// ⌈√T⌉ for each forward.
//
// What a training forward keeps with Recompute (device.Activations), for
// each layer and direction: in a unidirectional stack h (and the LSTM's c)
// at the ⌈T/k⌉+1 segment boundaries, 2·B·H·(T/k+1) values for an LSTM
// layer; in a bidirectional stack, whose walks each need the whole output
// of the layer below, the layer's outputs, B·H·(T+1), and the LSTM's c at
// the boundaries. Neither copies the input (nor does the stack without
// Recompute): Backward reads the caller's x again, which the caller
// leaves as it is until then (with lengths, the stack's sorted copy of
// it, T·B·Input). Backward's workspace (device.Workspace) holds one segment:
// h and c at k+1 positions and the gates of k steps, about 6·B·H·k per
// LSTM layer (8 with dropout), all layers at once in a unidirectional
// stack, one at a time in a bidirectional one. So a unidirectional LSTM
// layer needs about 2·B·H·T/k + 6·B·H·k values instead of 6·B·H·T: least
// at k ≈ √(T/3), 8·B·H·√T at k = √T, a twenty-fourth at T = 1024 (the
// package's BenchmarkRecompute measures it). Segments are whole chunks
// (k rounded up to a multiple of ⌈256/B⌉ steps), and a k that reaches T
// keeps everything, as without Recompute.
//
// # Data
//
// Sequences are [seq, batch, features] (PyTorch's default layout, not
// batch_first), token ids and targets are device.Int32, parameters and
// activations Float32 by default or Float64 for gradient checks. Params
// gives every parameter by name, as device views for optimizers and
// clipping, and as host *tensor.Dense values for checkpoints and users.
//
// # Errors
//
// Inputs whose shapes, devices or states do not match a layer are errors
// that name the mismatch and match device.ErrShape or
// device.ErrForeignBuffer. Ids and targets are read on the device: one
// outside the vocabulary is reported as device.ErrIndex by the next
// synchronisation of the compute stream, with what the device can tell
// (the CPU device names the value and its position, the CUDA device the
// kernel that found it).
//
// Sizes are checked before they are used: a constructor counts its
// parameters (Config.ParamCount) with overflow reported before it builds
// anything, refuses more than MaxLayers layers, and draws its initial
// values 2^20 at a time, checking its ctx between chunks (a cancelled
// build returns an error wrapping ctx.Err() and leaves nothing
// allocated); a call whose sizes (seq·batch, rows, ...) overflow is
// device.ErrShape naming them, before any buffer is sized from them. A
// layer that does not fit the device is the allocator's out-of-memory
// error, at once: nothing is initialised before both of its parameter
// buffers are allocated.
//
// Close (State.Free) frees a layer's device memory, and every later call
// that touches device memory or hands out its buffers returns an error
// matching ErrClosed (device.ErrClosed, the one sentinel of every
// package) that names the object and method, "rnn: LSTM.Forward: closed":
// nothing reads or writes freed memory. Getters of the configuration
// (Config, Params' Len, DType and names, LayerGrads, DropoutState) keep
// answering; a method that returns buffers without an error (Params.Flat,
// State.H, CrossEntropy.Total) returns zero Buffers, which every kernel
// refuses. Params are closed with the last Close of their layer and its
// shares. A second Close does nothing and returns nil. A call from a
// second goroutine while one is inside is ErrBusy; a share refuses what
// trains with ErrShared.
//
// # Concurrency
//
// A layer, a loss and a state are used by one goroutine at a time. They
// refuse, rather than race: each call holds an atomic guard (two atomic
// operations), and a call, or Close, that finds another inside returns an
// error matching ErrBusy and changes nothing. A state is held by the
// forward it is passed to, as by its own calls. A guard cannot see the
// other misuse, a result read after another goroutine's call replaced it
// (a layer's output is its buffer until its next call): so goroutines that
// run one layer at once each use a share of it (Share: LSTM, GRU,
// Embedding, Linear), a layer of its own buffers over the same Params, for
// NoGrad forwards only; shares copy no parameter and see the parameters as
// they are when their forward runs on the stream, so the parameters are
// left alone (no optimizer step, no SetValue) while shares run on them if
// their answers are to be those of fixed weights. The device itself is
// safe for concurrent use. All work is queued on
// the device's compute stream in call order; a nil error means the work was
// queued, and device errors surface at the next synchronisation. On a
// device with branches (device.Brancher) a stack queues part of its work
// on a branch of the compute stream: a unidirectional stack of two layers
// or more runs its forward and Backward as a wavefront (each pair's upper
// layer on the branch, one window of steps behind the lower one:
// Config.WaveWindows), a bidirectional layer its two directions side by
// side (the reverse one on the branch), and otherwise Backward runs each
// layer's weight and bias gradients there, beside the walk back of the
// layer below. The
// compute stream waits for the branch before Forward and Backward return
// (and before a NotifyLayers notice), so to the caller it is all one
// stream, and the results are the same bits as on one
// (Config.NoBranches) wherever the windows cut no product differently
// (on the CPU device, windows of whole chunks).
package rnn
