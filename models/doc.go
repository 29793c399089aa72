// Package models holds ready-made models: train.Models assembled from the
// layers of package rnn, each with a checkpoint format of its own, for a
// program or service that wants to train or run a known architecture
// without wiring layers together: the character-level language model
// CharRNN (a train.Model, trained by train.New), and the sequence Tagger
// and Classifier (train.SeqModels, trained by train.NewSeq on a
// loader.SeqLoader's batches). A model is built on any device.Device
// (package devices opens one by name).
//
// # Taggers and classifiers
//
// A Tagger tags every token of a sentence:
//
//	emb = nn.Embedding(V, E)                        # words; id 0 <pad>, 1 <unk>
//	char_emb = nn.Embedding(C, CE)                  # optional character features:
//	char_rnn = nn.LSTM(CE, CH, 1, bidirectional=True) # cat(emb(w), h_n[0], h_n[1]) per word
//	rnn = nn.LSTM(E [+ 2·CH], H, L, bidirectional=b) # or nn.GRU, over packed sentences
//	out = nn.Linear(H·dirs, tags)                   # at every token
//
// A Classifier labels a whole sequence of words or characters with the
// same stack, pooled by the last state (cat(h_n[-2], h_n[-1]) when
// bidirectional), the mean or the max over the real positions, then a
// linear layer. Both carry PyTorch's parameter names (their checkpoint
// formats, gocurrent.tagger/1 and gocurrent.classifier/1, are in the
// architecture document) and agree with PyTorch modules of those names
// (testdata/torch_tagger.py, torch_classifier.py), three Adam steps
// included. NewTaggerChars builds a tagger with character features;
// batches then carry each word's characters (loader.CollateConfig.Chars).
//
// # The char-RNN
//
// A CharRNN reads text one character at a time and predicts the next one.
// A character is a token id, its index in a loader.Vocab (loader.Tokenize
// makes one from a corpus: its distinct characters sorted by code point).
// Windows of ids go through three layers, PyTorch's
//
//	emb = nn.Embedding(V, E)           # V: vocabulary, E: CharRNNConfig.Embed
//	rnn = nn.LSTM(E, H, L, dropout=p)  # or nn.GRU; H: Hidden, L: Layers, p: Dropout
//	out = nn.Linear(H, V)              # logits of the next character
//
// and training minimises the softmax cross-entropy of the logits against
// the character that follows each one. The recurrent state (h, and c for
// an LSTM) is carried from one window to the next and detached between
// them: truncated backpropagation through time (train runs it). Sampling
// (train.Sample) feeds each drawn character back in; evaluation
// (train.Evaluate) gives the loss in nats and bits per character.
//
//	m, err := models.NewCharRNN(ctx, d, models.CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 2}, text.Vocab(), 1)
//	...
//	tr, err := train.New(d, m, batches, train.Config{Optimizer: opt, Steps: 1000,
//		Checkpoint: "run.safetensors", Metadata: m.Metadata()})
//
// # Checkpoints
//
// A char-RNN checkpoint is one safetensors file whose F32 tensors carry
// the names and shapes of the PyTorch module above (G = 4 gates for an
// LSTM, in the order i, f, g, o; G = 3 for a GRU, r, z, n; k the layer):
//
//	emb.weight          [V, E]
//	rnn.weight_ih_l{k}  [G·H, E] for k = 0, [G·H, H] above
//	rnn.weight_hh_l{k}  [G·H, H]
//	rnn.bias_ih_l{k}    [G·H]
//	rnn.bias_hh_l{k}    [G·H]
//	out.weight          [V, H]
//	out.bias            [V]
//
// Its __metadata__ (CharRNN.Metadata) holds "format": CharRNNFormat
// ("gocurrent.charrnn/1"), "config": the CharRNNConfig as JSON
// ({"cell":"lstm","embed":64,"hidden":256,"layers":2,"dropout":0}), and
// "vocab": the vocabulary as a JSON array of one-character strings, index
// = token id. A training checkpoint written by train.Trainer adds the
// optimizer's and trainer's state, tensors under an "optim." prefix and a
// "trainer" metadata key; LoadCharRNN reads the model's part and returns
// the checkpoint for train.Trainer.Resume. train.SaveWeights writes the
// model's part alone.
//
// # Models from PyTorch, and to it
//
// LoadCharRNN loads a file PyTorch wrote with these names and metadata, for
// example
//
//	from safetensors.torch import save_file
//	save_file(model.state_dict(), "charrnn.safetensors", metadata={
//	    "format": "gocurrent.charrnn/1",
//	    "config": json.dumps({"cell": "lstm", "embed": 64, "hidden": 256, "layers": 2, "dropout": 0}),
//	    "vocab": json.dumps(vocab),  # the characters, index = token id
//	})
//
// and PyTorch loads ours with safetensors.torch.load_file and
// load_state_dict, after dropping the "optim." tensors of a training
// checkpoint. Ours carry checksums, metadata keys starting with "crc32c."
// that PyTorch ignores; a file without them, as PyTorch writes it, loads
// unchecked. testdata/torch_fixture.py writes such files (without the
// safetensors package) and records PyTorch's losses, gradient norms and
// trained weights, which this package's tests match.
//
// # Errors
//
// NewCharRNN returns an error for an invalid CharRNNConfig (Validate: the
// fields' ranges, and sizes whose parameters overflow or whose layers pass
// rnn.MaxLayers, named) or an empty vocabulary, one wrapping ctx.Err() when
// its ctx is cancelled while it initialises, and one wrapping
// alloc.ErrOutOfMemory when the device cannot hold a layer; what it had
// built is freed. CheckFits refuses a run whose plan does not fit the
// device before anything is allocated, with the planner's advice. A
// checkpoint's config is held to its tensors before a model of it is
// built: one that contradicts them (2^40 layers in a file of two) is
// train.ErrMismatch naming the value and the tensor. LoadCharRNN's errors wrap
// fs.ErrNotExist for a missing file, train.ErrCorrupt for a damaged one
// (whose bytes do not match the checksums it records) and
// train.ErrMismatch for metadata of another format or tensors that do not
// fit the configuration. A checkpoint of another of this package's models
// (or a format it does not know), given to LoadCharRNN, LoadTagger or
// LoadClassifier, says so in one line: "models: x.safetensors is a tagger
// checkpoint (format gocurrent.tagger/1), not a char-RNN one
// (gocurrent.charrnn/1)".
//
// Close frees a model's device memory (its parameters once no share holds
// them, below). Every later call that runs a layer or touches device
// memory returns an error matching rnn.ErrClosed (device.ErrClosed, the
// one sentinel of every package) naming the model and method,
// "models: Classifier.Forward: closed"; the getters of the configuration
// (Config, the vocabularies, Classes, Groups, Metadata, RandomState) keep
// answering, Groups' Params closed; a second Close does nothing. A call
// from a second goroutine while one is inside is rnn.ErrBusy; what a share
// refuses is rnn.ErrShared. Predict checks the ids it is given on the
// host (device.ErrIndex, device.ErrShape) before it queues anything.
//
// # Concurrency
//
// A model is used by one goroutine at a time, as train.Trainer uses it: a
// call that meets another goroutine's (or a Close that does) is refused
// with an error matching rnn.ErrBusy, and changes nothing; nothing races
// on the device. To serve one loaded model to concurrent requests, give
// each goroutine (or each request, from a sync.Pool) a share of it: Share
// returns a model of the same type over the same parameters, no weight
// copied, with buffers of its own, for NoGrad forwards and Predict, which
// uploads a host batch, runs the forward and downloads the logits in one
// call (a Forward's result is the model's buffer until its next call;
// Predict's is the caller's). Shares refuse to train (rnn.ErrShared),
// and see the parameters as they are when their forward runs on the
// device's compute stream: training the model, or loading weights into
// it, while shares run changes their answers from one call to the next.
// The parameters are freed at the last Close of the model and its shares,
// in either order. Two things stay the device's, not the model's: an
// error found while the work runs (device.ErrIndex of an id on the device)
// is reported to whichever goroutine synchronises the stream next, and a
// graph capture (train.Config.Graphs, train.Sample's replays of a model
// that is not a share) records the whole compute stream: on a device that
// serves shares, leave both to a device scope of their own
// (device.NewScope).
package models
