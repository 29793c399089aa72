// Package train is the trainer a training service embeds: optimizers with
// their state on the device, learning-rate schedules, gradient accumulation
// over micro-batches, global-norm clipping, truncated backpropagation
// through time (state carried across windows and detached between them),
// no-grad evaluation and sampling, atomic safetensors checkpoints with exact
// resume, cancellation through a context, and progress callbacks.
//
// The trainer imports rnn, loader and device, never cuda. It arrives with
// issue 6.
package train
