// Package train is the trainer a training service embeds: optimizers with
// their state on the device, learning-rate schedules, gradient accumulation
// over micro-batches, global-norm and element-wise clipping, truncated
// backpropagation through time, no-grad evaluation and sampling, atomic
// safetensors checkpoints with exact resume, cancellation through a
// context, and progress callbacks.
//
// # The model
//
// A Model maps windows of token ids to next-token logits and back-propagates
// a gradient of the logits into its parameters; the trainer owns the loss
// (softmax cross-entropy), the optimizer, the carried State and the
// position in the data. The char-RNN of examples/charrnn (Embedding, an
// LSTM or GRU stack, Linear) is one Model; nothing here is specific to it.
//
// # Labelled sequences
//
// NewSeq trains a SeqModel (the tagger and classifier of package models)
// on a loader.SeqLoader's batches with the same step: the batch's labels
// say what a position means, a tag per token (padding, loader.IgnoreLabel,
// left out of the loss) or a label per sequence. Each batch adds the sum
// of its rows' cross-entropies; at the step's end the gradient and loss
// are divided by the step's real rows (or the sum of their class weights,
// SeqOptions.Weights) in the clipping pass, so a step is the mean over all
// its real tokens however its batches were cut. The loader's
// BucketConfig.Accum groups batches into steps. EvaluateSeq reports loss,
// accuracy, macro-F1 and the confusion counts.
//
// # A step
//
// With a loader in Streams mode and Accum = K, a step is K micro-batches;
// micro-batch j reads streams j·Batch..(j+1)·Batch-1 and carries its own
// state, which starts at zeros at each epoch and is detached after every
// window (truncated BPTT: values kept, gradient path cut). Each
// micro-batch's loss is weighted 1/K, so the step's gradient is that of the
// mean over all its positions and K micro-batches of B streams make the
// update of one batch of K·B streams. Then the gradient's global norm is
// computed (one small device-to-host read, which is also where a NaN or
// infinite loss or gradient is caught), clipped as
// torch.nn.utils.clip_grad_norm_ does, optionally clamped element-wise, and
// the optimizer updates the parameters with the schedule's rate.
//
// A step that fails (a non-finite loss or gradient, a data or device error)
// or is cancelled before its last micro-batch changes nothing: the carried
// state and the model's random state are copied aside when a step begins
// and put back, the parameters and optimizer state are only written by the
// update, and the position moves only when the step completes. With
// Config.SkipNonFinite a non-finite step is skipped (its data consumed),
// counted and reported to OnStep (Progress.NonFinite set) instead of ending
// the run, until Config.MaxSkips steps in a row have been (100 by
// default): then the run ends with the last one's *NonFiniteError.
//
// # Checkpoints
//
// A checkpoint is one safetensors file: the model's tensors under PyTorch's
// names (Group.Name + "." + parameter name), and with Trainer.Save the
// optimizer's state ("optim.<group>.<slot>", PyTorch's slot names such as
// exp_avg), the carried states ("optim.carry.<j>.h", ".c") and, in the
// "trainer" metadata key, the step, the position, the model's random state
// and how the loader cut the data. Files are written by WriteFile: to a
// temporary file, synced and renamed, so a crash leaves the old file or the
// new one; only over a regular file (never a directory or /dev/null),
// through symbolic links, with the usual mode, and removing what a killed
// writer left behind.
// Every file written records the CRC-32C of each tensor's bytes and of the
// rest of the metadata under metadata keys starting with "crc32c."
// (docs/ARCHITECTURE.md has the exact form), which ReadCheckpoint verifies:
// a flipped bit anywhere in the file is an error wrapping ErrCorrupt that
// names the tensor or the metadata, where it used to load as another model
// (or resume another run). A file without them, PyTorch's, is read as
// before.
// Trainer.Resume continues bit for bit as if the run had not stopped; a file
// that does not fit (another model shape, another batch cut, another
// optimizer) is an error wrapping ErrMismatch and a damaged one wraps
// ErrCorrupt; neither changes anything.
//
// # Errors
//
// Errors wrap sentinels callers branch on: ErrMismatch and ErrCorrupt
// (checkpoints), ErrNonFinite (a skipped step), ErrRankStopped (a
// data-parallel stop), ctx.Err() (a cancelled run), and those of the
// model, loader and device below. A checkpoint the trainer could not
// write to Config.Checkpoint is a *SaveError, beside ctx.Err() for a
// cancelled run: the step whose state was lost and the checkpoint that is
// on disk instead (the run's last, or the one it resumed from), so that a
// command exits 128 + the signal only when the work was saved. After Close, Run, Save and Resume
// return an error matching rnn.ErrClosed (device.ErrClosed, the one
// sentinel of every package) naming the method, "train: Trainer.Run:
// closed"; Step, Position and Skipped keep reporting where the trainer
// stood, and a second Close does nothing.
//
// # A loop of one's own
//
// Updater is the optimizer outside a Trainer, as torch.optim is outside a
// training loop: NewUpdater over a model's groups, ZeroGrad, the caller's
// forward, loss and backward, then Step, which decides the step on the
// device as the Trainer does (the gradients' global norm clipped, a step
// whose loss or gradient is not finite skipped, changing nothing) and
// updates the parameters; Save and Load make the loop resume bit for bit.
// A loop that takes the Trainer's steps with it takes them to the bit
// (TestUpdaterMatchesTrainer).
//
// # Concurrency
//
// A Trainer is used by one goroutine at a time: a call that meets another
// (Run, Save, Resume, Close from a second goroutine, or from OnStep and
// OnEval, Save excepted: a callback may save) is refused with an error
// matching rnn.ErrBusy and changes nothing, so Close during a run is
// refused and the way to stop one is to cancel its ctx. The model is the
// trainer's while it runs; serving it meanwhile from other goroutines is
// what a share of it is for (models' Share), which sees each step's
// weights as its forwards meet them on the stream. Run's ctx is checked after every
// step, taken or skipped, before every micro-batch, and by the loader
// while it waits for data, however long a read of the data blocks:
// cancelling it ends the run at a step boundary (a step cut short rolled
// back as a failed one is), writes the checkpoint if Config.Checkpoint is
// set and returns an error wrapping ctx.Err(). OnStep
// and OnEval run on Run's goroutine after the step's figures are read back
// from the device (Progress: loss, gradient norm, rate, tokens/s,
// data-wait fraction, allocator figures); OnStep after a skipped step too,
// which its Progress.NonFinite tells from a step taken. With
// Config.Pipeline above 1 the trainer reads steps back in groups without
// waiting for the device, so OnStep comes up to Pipeline-1 steps after its
// step and a cancelled run ends after the steps already queued; what the
// steps do is the same bit for bit.
//
// # Example
//
//	tr, err := train.New(d, model, batches, train.Config{
//		Optimizer: opt,                   // train.NewOptimizer(train.Adam, 2e-3)
//		Steps:     1000, ClipNorm: 5,
//		Checkpoint: "run.safetensors", CheckpointEvery: 200,
//		OnStep: func(p train.Progress) { log.Printf("step %d loss %.3f", p.Step, p.Loss) },
//	})
//	if err != nil { ... }
//	defer tr.Close()
//	summary, err := tr.Run(ctx)
package train
