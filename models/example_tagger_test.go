package models_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/rnn"
)

// A tagger with character features reads batches that carry their words'
// characters (the loader's Chars), in the dataset's character vocabulary;
// its checkpoint tensors carry PyTorch's names.
func ExampleNewTaggerChars() {
	ctx := context.Background()
	d, err := devices.Open("cpu", devices.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	dir, err := os.MkdirTemp("", "tagger")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "train.tsv")
	if err := os.WriteFile(path, []byte("the\tDET\ncats\tNOUN\nsat\tVERB\n\na\tDET\ndog\tNOUN\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	data, err := loader.OpenDataset(ctx, path, loader.DatasetConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer data.Close()

	cfg := models.TaggerConfig{Cell: "lstm", Embed: 8, Hidden: 16, Layers: 1, Bidirectional: true, CharEmbed: 4, CharHidden: 8}
	m, err := models.NewTaggerChars(context.Background(), d, cfg, data.Words, data.Chars, data.Labels, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 2}, Epochs: 1,
		CollateConfig: loader.CollateConfig{Chars: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	for b, err := range l.Batches(ctx, loader.Position{}) {
		if err != nil {
			log.Fatal(err)
		}
		if _, err := m.ForwardBatch(rnn.NoGrad, b); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d sentences, %d words of up to %d characters: logits [%d, %d]\n",
			b.Host.Rows, b.Host.Real, b.Host.WordLen, b.Host.Seq*b.Host.Rows, m.Classes())
	}
	for _, g := range m.Groups() {
		for p := range g.Params.All() {
			if g.Name == "char_emb" || g.Name == "char_rnn" && !strings.HasSuffix(p.Name, "_reverse") {
				fmt.Println(g.Name+"."+p.Name, p.Shape)
			}
		}
	}
	fmt.Printf("characters: %q\n", m.Chars().Items())
	// Output:
	// 2 sentences, 5 words of up to 4 characters: logits [6, 3]
	// char_emb.weight [11 4]
	// char_rnn.weight_ih_l0 [32 4]
	// char_rnn.weight_hh_l0 [32 8]
	// char_rnn.bias_ih_l0 [32]
	// char_rnn.bias_hh_l0 [32]
	// characters: ["<pad>" "<unk>" "a" "t" "s" "c" "d" "e" "g" "h" "o"]
}
