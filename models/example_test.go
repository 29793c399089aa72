package models_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// Training a small char-RNN: the vocabulary comes from the text, the last
// tenth of which is held out to validate on. (It runs on the CPU whatever
// GOCURRENT_TEST_DEVICE says: an Example is documentation, and its output
// is fixed; the tests run on the test device. A program would pass
// "auto".)
func Example() {
	ctx := context.Background()
	d, err := devices.Open("cpu", devices.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	corpus, err := loader.Open("testdata/corpus.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer corpus.Close()
	text, err := loader.Tokenize(ctx, corpus, loader.TokenizeConfig{})
	if err != nil {
		log.Fatal(err)
	}
	trainText, valText, err := text.Split(0.1)
	if err != nil {
		log.Fatal(err)
	}

	m, err := models.NewCharRNN(context.Background(), d, models.CharRNNConfig{Cell: "lstm", Embed: 16, Hidden: 64, Layers: 1}, text.Vocab(), 1)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	data, err := loader.New(d, trainText, loader.Config{Batch: 16, Seq: 32})
	if err != nil {
		log.Fatal(err)
	}
	defer data.Close()
	val, err := loader.New(d, valText, loader.Config{Batch: 4, Seq: 32})
	if err != nil {
		log.Fatal(err)
	}
	defer val.Close()

	before, err := train.Evaluate(ctx, d, m, val)
	if err != nil {
		log.Fatal(err)
	}
	opt, err := train.NewOptimizer(train.Adam, 1e-2)
	if err != nil {
		log.Fatal(err)
	}
	// Metadata goes into the checkpoints the trainer writes (with
	// Config.Checkpoint set; none here), so that LoadCharRNN can rebuild
	// the model from them.
	tr, err := train.New(d, m, data, train.Config{Optimizer: opt, Steps: 30, ClipNorm: 5, Metadata: m.Metadata()})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(ctx); err != nil {
		log.Fatal(err)
	}
	after, err := train.Evaluate(ctx, d, m, val)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("vocabulary: %d characters\n", m.Vocab().Len())
	fmt.Println("validation loss went down:", after.Loss < before.Loss)
	// Output:
	// vocabulary: 40 characters
	// validation loss went down: true
}

// Loading a checkpoint PyTorch wrote (testdata/torch_fixture.py): the
// model's shape and vocabulary come from its metadata, its tensors carry
// PyTorch's names.
func ExampleLoadCharRNN() {
	d, err := devices.Open("cpu", devices.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	m, ck, err := models.LoadCharRNN(context.Background(), d, "testdata/torch_gru.safetensors")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Printf("%+v, vocabulary of %d, resumable: %v\n", m.Config(), m.Classes(), ck.Resumable())
	for _, g := range m.Groups() {
		for p := range g.Params.All() {
			fmt.Println(g.Name+"."+p.Name, p.Shape)
		}
	}
	// Output:
	// {Cell:gru Embed:8 Hidden:16 Layers:2 Dropout:0 Recompute:0 NoBranches:false WaveWindows:0}, vocabulary of 40, resumable: false
	// emb.weight [40 8]
	// rnn.weight_ih_l0 [48 8]
	// rnn.weight_hh_l0 [48 16]
	// rnn.bias_ih_l0 [48]
	// rnn.bias_hh_l0 [48]
	// rnn.weight_ih_l1 [48 16]
	// rnn.weight_hh_l1 [48 16]
	// rnn.bias_ih_l1 [48]
	// rnn.bias_hh_l1 [48]
	// out.weight [40 16]
	// out.bias [40]
}
