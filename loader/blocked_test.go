package loader_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/leak"
	"github.com/gocurrent/gocurrent/internal/stall"
	"github.com/gocurrent/gocurrent/loader"
)

// stallLoader is a loader over a stall.Reader, as a test of blocked reads
// sees it: its batches as host copies of their tokens, and Close.
type stallLoader struct {
	r       *stall.Reader
	batches func(ctx context.Context) iter.Seq2[[]int32, error]
	close   func() error
}

// TestBlockedRead: a cancelled ctx, or Close, ends an iteration whose
// producer is blocked reading the data, at once rather than when the read
// returns, with ctx's error or ErrClosed; Close returns; the producer left
// in the read returns when it does, leaving no goroutine behind, and
// touches nothing of the loader's: a later iteration delivers the same
// batches as before. Before, the iteration's end waited for the read, and
// a read that never returned held the consumer (and a training run) for
// ever. For the char-RNN's Loader (a Text over a Corpus) and the
// SeqLoader (a Dataset).
func TestBlockedRead(t *testing.T) {
	d := openDevice(t)
	kinds := []struct {
		name string
		open func(t *testing.T, d device.Device) stallLoader
	}{
		{"Loader", textLoader},
		{"SeqLoader", seqLoader},
	}
	for _, kind := range kinds {
		for _, how := range []string{"cancel", "close"} {
			t.Run(kind.name+"/"+how, func(t *testing.T) {
				l := kind.open(t, d)
				r := l.r
				defer r.Release()
				ref := collectHost(t, l, 6)
				before := leak.Count() // the device's and the loader's copy stream included

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stop := cancel
				var closeErr error
				closed := make(chan struct{})
				if how == "close" {
					stop = func() { closeErr = l.close(); close(closed) }
				}
				ended := make(chan error, 1)
				go func() {
					var last error
					n := 0
					for _, err := range l.batches(ctx) {
						if err != nil {
							last = err
							break
						}
						if n++; n == 2 {
							r.Stall()
							go func() { <-r.Blocked(); stop() }()
						}
					}
					ended <- last
				}()
				last := leak.Await(t, ended, "the iteration, after a "+how+" while its producer was blocked in a read,")
				want := context.Canceled
				if how == "close" {
					want = loader.ErrClosed
					leak.Await(t, closed, "Close, while the producer was blocked in a read,")
					if closeErr != nil {
						t.Errorf("Close: %v", closeErr)
					}
				}
				if !errors.Is(last, want) {
					t.Errorf("the iteration ended with %v, want %v", last, want)
				}
				r.Release()
				if how == "cancel" {
					// The producer left in the read wrote nothing into the
					// ring the next iteration uses.
					if again := collectHost(t, l, 6); !slices.EqualFunc(again, ref, slices.Equal) {
						t.Errorf("after the blocked read returned, the batches differ from before it")
					}
					must(t, l.close())
				}
				leak.Expect(t, before, "after the iteration")
			})
		}
	}
}

// collectHost is the first n batches of l's iteration from the start.
func collectHost(t *testing.T, l stallLoader, n int) [][]int32 {
	t.Helper()
	var out [][]int32
	for b, err := range l.batches(context.Background()) {
		must(t, err)
		if out = append(out, b); len(out) == n {
			break
		}
	}
	if len(out) != n {
		t.Fatalf("%d batches, want %d", len(out), n)
	}
	return out
}

// textLoader is a Loader over a text read from a stall.Reader.
func textLoader(t *testing.T, d device.Device) stallLoader {
	r := stall.New([]byte(randomText(5, 4000)))
	text, err := loader.Tokenize(context.Background(), loader.NewCorpus(r, r.Size(), "stall"), loader.TokenizeConfig{})
	must(t, err)
	l, err := loader.New(d, text, loader.Config{Batch: 2, Seq: 4, Prefetch: 1, Workers: 2})
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return stallLoader{
		r: r,
		batches: func(ctx context.Context) iter.Seq2[[]int32, error] {
			return func(yield func([]int32, error) bool) {
				for b, err := range l.Batches(ctx, loader.Position{}) {
					var ids []int32
					if err == nil {
						ids = make([]int32, b.Seq*b.Rows)
						err = device.DownloadSlice(d, ids, b.Inputs)
					}
					if !yield(ids, err) {
						return
					}
				}
			}
		},
		close: l.Close,
	}
}

// stalledDataset is a tagged dataset read from a stall.Reader.
func stalledDataset(t *testing.T) (*stall.Reader, *loader.Dataset) {
	rnd := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for range 300 {
		for range 1 + rnd.IntN(12) {
			fmt.Fprintf(&b, "w%d\tT%d\n", rnd.IntN(40), rnd.IntN(4))
		}
		b.WriteString("\n")
	}
	r := stall.New([]byte(b.String()))
	data, err := loader.NewDataset(context.Background(), r, r.Size(), "stall.tsv", loader.DatasetConfig{})
	must(t, err)
	return r, data
}

// seqLoader is a SeqLoader over a tagged dataset read from a
// stall.Reader.
func seqLoader(t *testing.T, d device.Device) stallLoader {
	r, data := stalledDataset(t)
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4}, Prefetch: 1})
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return stallLoader{
		r: r,
		batches: func(ctx context.Context) iter.Seq2[[]int32, error] {
			return func(yield func([]int32, error) bool) {
				for b, err := range l.Batches(ctx, loader.Position{}) {
					if !yield(slices.Clone(b.Host.Tokens), err) {
						return
					}
				}
			}
		},
		close: l.Close,
	}
}

// TestLoadBlockedRead: SeqLoader.Load (a warm-up's) blocked reading the
// dataset ends when ctx is cancelled, with ctx's error; its read, once
// it returns, leaves no goroutine behind, and Load works again.
func TestLoadBlockedRead(t *testing.T) {
	d := openDevice(t)
	r, data := stalledDataset(t)
	defer r.Release()
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4}})
	must(t, err)
	defer l.Close()
	before := leak.Count()
	r.Stall()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-r.Blocked(); cancel() }()
	ended := make(chan error, 1)
	go func() {
		_, _, err := l.Load(ctx, l.Largest()[0])
		ended <- err
	}()
	err = leak.Await(t, ended, "Load, cancelled while blocked reading,")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Load: %v, want context.Canceled", err)
	}
	r.Release()
	leak.Expect(t, before, "after the iteration")
	_, release, err := l.Load(context.Background(), l.Largest()[0])
	must(t, err)
	must(t, release())
}

// TestCloseDuringLoad: a Close while SeqLoader.Load is blocked reading
// the dataset ends the Load with an error matching ErrClosed, at once, and
// frees the ring once the Load has left it (before, Close freed it under
// the Load, which then indexed the freed ring); a second Load while one
// runs is ErrBusy.
func TestCloseDuringLoad(t *testing.T) {
	d := openDevice(t)
	r, data := stalledDataset(t)
	defer r.Release()
	l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4}})
	must(t, err)
	r.Stall()
	ended := make(chan error, 1)
	go func() {
		_, _, err := l.Load(context.Background(), l.Largest()[0])
		ended <- err
	}()
	<-r.Blocked()
	if _, _, err := l.Load(context.Background(), l.Largest()[0]); !errors.Is(err, loader.ErrBusy) {
		t.Errorf("Load during a Load = %v, want an error matching loader.ErrBusy", err)
	}
	must(t, l.Close())
	if err := leak.Await(t, ended, "Load, closed while blocked reading,"); !errors.Is(err, loader.ErrClosed) {
		t.Errorf("Load closed while blocked = %v, want an error matching loader.ErrClosed", err)
	}
	if _, _, err := l.Load(context.Background(), l.Largest()[0]); !errors.Is(err, loader.ErrClosed) {
		t.Errorf("Load after Close = %v, want an error matching loader.ErrClosed", err)
	}
}
