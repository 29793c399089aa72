package nn_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/nn"
	"github.com/gocurrent/gocurrent/rnn"
)

// A GRU classifier over float sequences of different lengths, composed
// from modules: its logits, a loss, and the gradients of every parameter
// in one Backward of the chain.
func ExampleSequential() {
	ctx := context.Background()
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	gru, err := nn.NewGRU(ctx, d, nn.RecurrentConfig{Config: rnn.Config{Input: 4, Hidden: 8, Seed: 1}})
	if err != nil {
		log.Fatal(err)
	}
	last, err := nn.NewPool(d, nn.PoolLast)
	if err != nil {
		log.Fatal(err)
	}
	head, err := nn.NewLinear(ctx, d, rnn.LinearConfig{In: 8, Out: 3, Seed: 2})
	if err != nil {
		log.Fatal(err)
	}
	model, err := nn.NewSequential(nn.Named("gru", gru), last, nn.Named("head", head))
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()

	// Two sequences of 5 and 3 steps of 4 features, time-major.
	values := make([]float64, 5*2*4)
	for i := range values {
		values[i] = float64(i%7) / 7
	}
	x, err := nn.Upload(d, device.Float32, values, 5, 2, 4)
	if err != nil {
		log.Fatal(err)
	}
	x.Lengths = []int32{5, 3}
	labels, err := nn.UploadIDs(d, []int32{2, 0}, 2)
	if err != nil {
		log.Fatal(err)
	}

	logits, err := model.Forward(nn.Train, x)
	if err != nil {
		log.Fatal(err)
	}
	loss, err := nn.NewCrossEntropy(d, nn.CrossEntropyConfig{Classes: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer loss.Close()
	if err := loss.Forward(nn.Train, logits, labels); err != nil {
		log.Fatal(err)
	}
	dLogits, err := loss.Backward()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := model.Backward(dLogits); err != nil {
		log.Fatal(err)
	}
	fmt.Println("logits:", logits)
	for _, g := range model.Groups() {
		for p := range g.Params.All() {
			fmt.Println(g.Name+"."+p.Name, p.Shape)
		}
	}
	// Output:
	// logits: float32[2 3]
	// gru.weight_ih_l0 [24 4]
	// gru.weight_hh_l0 [24 8]
	// gru.bias_ih_l0 [24]
	// gru.bias_hh_l0 [24]
	// head.weight [3 8]
	// head.bias [3]
}
