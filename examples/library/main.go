// Command library is the README's example of gocurrent as a library: a
// character-level LSTM trained on a text file, on the first GPU or else
// the CPU, its checkpoint written every 100 steps and when it stops.
//
//	go run ./examples/library input.txt
package main

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: library TEXT (a file or a directory of text files)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1], "run.safetensors", 300); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path, checkpoint string, steps int64) error {
	d, err := devices.Open("auto", devices.Config{}) // the first GPU, else the CPU
	if err != nil {
		return err
	}
	defer d.Close()
	corpus, err := loader.Open(path) // streamed, never held in memory
	if err != nil {
		return err
	}
	defer corpus.Close()
	text, err := loader.Tokenize(ctx, corpus, loader.TokenizeConfig{})
	if err != nil {
		return err
	}
	batches, err := loader.New(d, text, loader.Config{Batch: 32, Seq: 64})
	if err != nil {
		return err
	}
	defer batches.Close()
	model, err := models.NewCharRNN(ctx, d, models.CharRNNConfig{Cell: "lstm", Embed: 64, Hidden: 256, Layers: 2}, text.Vocab(), 1)
	if err != nil {
		return err
	}
	defer model.Close()
	opt, err := train.NewOptimizer(train.Adam, 2e-3)
	if err != nil {
		return err
	}
	tr, err := train.New(d, model, batches, train.Config{
		Optimizer: opt, Steps: steps, ClipNorm: 5,
		Checkpoint: checkpoint, CheckpointEvery: 100, Metadata: model.Metadata(),
		OnStep: func(p train.Progress) {
			log.Printf("step %d loss %.3f %.0f tokens/s", p.Step, p.Loss, p.TokensPerSecond)
		},
	})
	if err != nil {
		return err
	}
	defer tr.Close()
	sum, err := tr.Run(ctx) // Ctrl-C: the run stops at a step boundary and saves
	if err != nil {
		return err
	}
	log.Printf("%d steps in %v; models.LoadCharRNN(ctx, d, %q) loads the model back", sum.Steps, sum.Elapsed, checkpoint)
	return nil
}
