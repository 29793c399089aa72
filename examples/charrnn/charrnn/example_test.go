package charrnn_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// Training a small LSTM with the library directly: the vocabulary comes
// from the text, the last tenth of which is held out to validate on.
// (It runs on the CPU whatever GOCURRENT_TEST_DEVICE says: an Example is
// documentation, and its output is fixed; the tests run on the test
// device.)
func Example() {
	ctx := context.Background()
	d, err := charrnn.OpenDevice("cpu", cuda.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	corpus, err := loader.Open("../testdata/corpus.txt")
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

	m, err := charrnn.NewModel(d, charrnn.Config{Cell: "lstm", Embed: 16, Hidden: 64, Layers: 1}, text.Vocab(), 1)
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
	tr, err := train.New(d, m, data, train.Config{Optimizer: opt, Steps: 30, ClipNorm: 5})
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
