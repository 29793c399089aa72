// Package nn is how a model is composed: one module interface that every
// layer, head and chain implements, shaped and typed views of device
// memory between them, and losses with PyTorch's semantics. The trainer
// (package train) trains any Module against any Loss; the ready-made
// models of package models are the same pieces.
//
// # Tensors
//
// A Tensor is a view, not an owner: device memory, its DType, its Shape
// (outermost first, dense, row-major) and, for a batch of sequences, their
// Lengths. Sequences are time-major, [T, B, F], as PyTorch's recurrent
// layers take them by default: step t of sequence b is row t·B + b. With
// lengths, the steps past a sequence's end are padding, which nothing
// reads: the recurrent modules run each sequence over its own steps only
// (PyTorch's packed sequences), the heads pool the real steps, and the
// losses count them only. Modules over steps keep the lengths, so they
// travel from the input to the loss with the data.
//
// # Modules
//
// A Module has Forward (in a Mode: Train saves what Backward needs and
// applies dropout, NoGrad neither), Backward (the gradient with respect to
// its output in, the input's out, the parameters' gradients added into
// their buffers), Groups (its parameters, named as PyTorch names them) and
// Close. The pieces:
//
//   - Embedding, Linear (over the last dimension of any shape), Dropout;
//   - Recurrent: PyTorch's nn.LSTM and nn.GRU (NewLSTM, NewGRU), uni- or
//     bidirectional, over lengths, with recomputation; its output every
//     step's, or the final states (RecurrentConfig.Final); ForwardFrom,
//     Final, InitialGrad and BackwardFinal for a state passed between
//     modules (an encoder's final state starting a decoder);
//   - Pool: a sequence's last real step, or the mean or maximum of its
//     real steps;
//   - Concat: features joined from branches, for a module of one's own;
//   - Sequential: a chain, whose Backward runs the chain in reverse.
//
// Where the order is not a chain, a model is a type of the user's own
// with the same four methods, calling its parts' (nn.Prefix names their
// groups); a model over several inputs implements MultiInput too.
//
// # Losses
//
// A Loss sums its elements' losses into a running total on the device
// and keeps the gradient for Backward. Mean divides by what Count says (the
// elements counted, or the sum of their class weights, as PyTorch does),
// so a trainer summing micro-batches and dividing once at the step's end
// trains exactly as one large batch would. CrossEntropy is PyTorch's
// nn.CrossEntropyLoss (weight, ignore_index).
//
// # Concurrency
//
// A module, a loss and a Concat are used by one goroutine at a time: a
// call meeting another's returns an error matching rnn.ErrBusy, and any
// call after Close one matching rnn.ErrClosed. A chain holds its own guard
// besides its children's.
//
// # Errors
//
// A tensor of the wrong type or shape, lengths that do not fit its batch,
// or a gradient that is not the shape of the forward's output is an error
// matching device.ErrShape, naming the tensor; a Backward with nothing to
// differentiate matches rnn.ErrNoForward.
package nn
