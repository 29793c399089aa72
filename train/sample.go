package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// SampleConfig configures Sample.
type SampleConfig struct {
	// N is the number of tokens to generate.
	N int
	// Temperature divides the logits before the softmax; 0 picks the most
	// likely token every time (argmax).
	Temperature float64
	// TopK, when > 0, draws only among the K most likely tokens.
	TopK int
	// Prime is the text the state is warmed up on; the first token drawn
	// follows its last. It must hold at least one token.
	Prime []int32
	// Seed seeds the draws: one seed, one sample.
	Seed uint64
}

// primeChunk bounds the window the prime is fed in, so priming a long text
// takes memory independent of its length.
const primeChunk = 256

// Sample generates cfg.N tokens from m without gradients, one at a time
// with batch 1, calling emit with each as it is drawn: memory does not grow
// with N. It stops early with emit's error or ctx's.
func Sample(ctx context.Context, d device.Device, m Model, cfg SampleConfig, emit func(id int32) error) (err error) {
	classes := m.Classes()
	switch {
	case cfg.N < 0:
		return fmt.Errorf("train: Sample: N = %d, want >= 0", cfg.N)
	case len(cfg.Prime) == 0:
		return errors.New("train: Sample: no prime token to start from")
	case !(cfg.Temperature >= 0) || math.IsInf(cfg.Temperature, 0):
		return fmt.Errorf("train: Sample: temperature %v, want >= 0", cfg.Temperature)
	case cfg.TopK < 0:
		return fmt.Errorf("train: Sample: TopK = %d, want >= 0", cfg.TopK)
	}
	for _, id := range cfg.Prime {
		if id < 0 || int(id) >= classes {
			return fmt.Errorf("train: Sample: prime token %d outside the vocabulary [0, %d): %w", id, classes, device.ErrIndex)
		}
	}
	groups := m.Groups()
	if len(groups) == 0 {
		return errors.New("train: Sample: the model has no parameters")
	}
	dt := groups[0].Params.DType()
	st, err := m.NewState(1)
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	ids, err := d.Alloc(primeChunk*4, device.Batches)
	if err != nil {
		if st != nil {
			err = errors.Join(err, st.Free())
		}
		return fmt.Errorf("train: Sample: %w", err)
	}
	defer func() {
		err = errors.Join(err, d.Free(ids))
		if st != nil {
			err = errors.Join(err, st.Free())
		}
	}()

	// The logits of the last prime token, then of each drawn one.
	var logits device.Buffer
	row := int64(classes) * dt.Size()
	for start := 0; start < len(cfg.Prime); start += primeChunk {
		chunk := cfg.Prime[start:min(start+primeChunk, len(cfg.Prime))]
		if err := device.UploadSlice(d, ids.Slice(0, int64(len(chunk))*4), chunk); err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		out, err := m.Forward(rnn.NoGrad, ids, len(chunk), 1, st)
		if err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		logits = out.Slice(int64(len(chunk)-1)*row, row)
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	probs := make([]float64, classes)
	host32 := make([]float32, classes)
	order := make([]int32, classes)
	one := []int32{0}
	for i := range cfg.N {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("train: Sample: stopped after %d tokens: %w", i, err)
		}
		if cfg.Temperature > 0 {
			if err := d.Kernels().Softmax(device.Softmax{DType: dt, N: 1, Classes: classes, Logits: logits, Probs: logits, Temperature: cfg.Temperature}); err != nil {
				return fmt.Errorf("train: Sample: %w", err)
			}
		}
		if err := download(d, dt, probs, host32, logits); err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		var next int32
		if cfg.Temperature == 0 {
			next = argmax(probs)
		} else {
			next = draw(r, probs, cfg.TopK, order)
		}
		if err := emit(next); err != nil {
			return err
		}
		if i == cfg.N-1 {
			break
		}
		one[0] = next
		if err := device.UploadSlice(d, ids.Slice(0, 4), one); err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		if logits, err = m.Forward(rnn.NoGrad, ids, 1, 1, st); err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
	}
	return nil
}

// download reads len(dst) elements of dt from src into dst.
func download(d device.Device, dt device.DType, dst []float64, scratch []float32, src device.Buffer) error {
	if dt == device.Float64 {
		return device.DownloadSlice(d, dst, src)
	}
	if err := device.DownloadSlice(d, scratch, src); err != nil {
		return err
	}
	for i, v := range scratch {
		dst[i] = float64(v)
	}
	return nil
}

// argmax is the index of the largest value, the first among equals; NaNs
// never win.
func argmax(v []float64) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] || math.IsNaN(v[best]) {
			best = i
		}
	}
	return int32(best)
}

// draw picks an index with probability proportional to p, among the topK
// largest when topK > 0 (order is scratch of len(p)).
func draw(r *rand.Rand, p []float64, topK int, order []int32) int32 {
	for i := range order {
		order[i] = int32(i)
	}
	cand := order
	if topK > 0 && topK < len(p) {
		slices.SortStableFunc(order, func(a, b int32) int {
			switch {
			case p[a] > p[b]:
				return -1
			case p[a] < p[b]:
				return 1
			}
			return 0
		})
		cand = order[:topK]
	}
	total := 0.0
	for _, i := range cand {
		total += p[i]
	}
	u := r.Float64() * total
	for _, i := range cand {
		if u -= p[i]; u < 0 {
			return i
		}
	}
	// Rounding left u a hair above zero: the last candidate that can be
	// drawn.
	for _, i := range slices.Backward(cand) {
		if p[i] > 0 {
			return i
		}
	}
	return cand[0]
}
