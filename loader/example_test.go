package loader_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/loader"
)

// Two micro-batches per step over a short text: the loop body receives
// device batches in order, and Next is where a checkpoint would resume.
func Example() {
	if err := streams(); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// vocabulary of 29 characters, 61 tokens
	// step 0 group 0 reset true: "the ", next {Epoch:0 Batch:1}
	// step 0 group 1 reset true: " the", next {Epoch:0 Batch:2}
	// step 1 group 0 reset false: "quic", next {Epoch:0 Batch:3}
	// step 1 group 1 reset false: " laz", next {Epoch:0 Batch:4}
	// step 2 group 0 reset false: "k br", next {Epoch:0 Batch:5}
	// step 2 group 1 reset false: "y do", next {Epoch:1 Batch:0}
}

func streams() (err error) {
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	const s = "the quick brown fox jumps over the lazy dog, again and again."
	corpus := loader.NewCorpus(strings.NewReader(s), int64(len(s)), "example")
	text, err := loader.Tokenize(context.Background(), corpus, loader.TokenizeConfig{})
	if err != nil {
		return err
	}
	fmt.Printf("vocabulary of %d characters, %d tokens\n", text.Vocab().Len(), text.Len())
	l, err := loader.New(d, text, loader.Config{Batch: 2, Seq: 4, Accum: 2, Epochs: 1})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	for b, err := range l.Batches(context.Background(), loader.Position{}) {
		if err != nil {
			return err
		}
		// Inputs are [Seq, Rows], time-major: row 0 is every Rows-th id.
		ids := make([]int32, b.Seq*b.Rows)
		if err := device.DownloadSlice(d, ids, b.Inputs); err != nil {
			return err
		}
		row0 := make([]int32, b.Seq)
		for t := range b.Seq {
			row0[t] = ids[t*b.Rows]
		}
		fmt.Printf("step %d group %d reset %v: %q, next %+v\n", b.Step, b.Group, b.Reset, text.Vocab().Decode(row0), b.Next)
	}
	return nil
}
