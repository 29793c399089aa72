package loader_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/closedtest"
	"github.com/gocurrent/gocurrent/loader"
)

// TestOneErrClosed checks that the three packages a training process
// stacks (loader over device over alloc) share one sentinel for a use after
// Close, so one errors.Is matches whichever layer noticed it.
func TestOneErrClosed(t *testing.T) {
	wrapped := []struct {
		name string
		err  error
	}{{"alloc", alloc.ErrClosed}, {"device", device.ErrClosed}, {"loader", loader.ErrClosed}}
	for _, a := range wrapped {
		for _, b := range wrapped {
			if !errors.Is(a.err, b.err) {
				t.Errorf("errors.Is(%s.ErrClosed, %s.ErrClosed) = false, want true", a.name, b.name)
			}
		}
	}
}

// TestClosedLoaders closes each of the package's types with a Close and
// calls every exported method (the table must name them all): what reads
// the data or the device returns an error matching ErrClosed naming the
// method, the getters still answer, nothing panics, and a second Close
// returns nil.
func TestClosedLoaders(t *testing.T) {
	d := openDevice(t)
	dir := t.TempDir()
	corpusPath := filepath.Join(dir, "text.txt")
	must(t, os.WriteFile(corpusPath, []byte(randomText(1, 4000)), 0o644))
	var tsv strings.Builder
	for i := range 30 {
		fmt.Fprintf(&tsv, "w%d\tA\nx%d\tB\n\n", i%7, i%5)
	}
	dataPath := filepath.Join(dir, "tags.tsv")
	must(t, os.WriteFile(dataPath, []byte(tsv.String()), 0o644))
	closed := func(f func() error) closedtest.Call { return closedtest.Call{Closed: true, F: f} }
	getter := func(f func() error) closedtest.Call { return closedtest.Call{F: f} }
	noPanic := func(f func()) closedtest.Call { return getter(func() error { f(); return nil }) }
	firstBatch := func(seq iter.Seq2[loader.SeqBatch, error]) error {
		for _, err := range seq {
			return err
		}
		return errors.New("no batch and no error")
	}

	t.Run("Corpus", func(t *testing.T) {
		c, err := loader.Open(corpusPath)
		must(t, err)
		size := c.Size()
		must(t, c.Close())
		closedtest.Check(t, "Corpus", c, loader.ErrClosed, map[string]closedtest.Call{
			"ReadAt": closed(func() error { _, err := c.ReadAt(make([]byte, 8), 0); return err }),
			"Size":   getter(func() error { return same(c.Size(), size, "Size") }),
			"Where":  noPanic(func() { c.Where(3) }),
			// What the walk left out is known without the files.
			"Skipped": getter(func() error { return same(len(c.Skipped()), 0, "len(Skipped)") }),
			"Close":   getter(c.Close),
		})
	})

	t.Run("Dataset", func(t *testing.T) {
		data, err := loader.OpenDataset(context.Background(), dataPath, loader.DatasetConfig{})
		must(t, err)
		n := data.Len()
		must(t, data.Close())
		closedtest.Check(t, "Dataset", data, loader.ErrClosed, map[string]closedtest.Call{
			"Example":     closed(func() error { _, err := data.Example(0); return err }),
			"Len":         getter(func() error { return same(data.Len(), n, "Len") }),
			"Tokens":      getter(func() error { return same(data.Tokens(), int64(2*n), "Tokens") }),
			"Length":      getter(func() error { return same(data.Length(0), 2, "Length(0)") }),
			"LongestWord": getter(func() error { return same(data.LongestWord(), 2, "LongestWord") }),
			"Close":       getter(data.Close),
		})
	})

	t.Run("Loader", func(t *testing.T) {
		l, err := loader.New(d, tokenize(t, randomText(2, 3000)), loader.Config{Batch: 2, Seq: 8})
		must(t, err)
		per := l.PerEpoch()
		must(t, l.Close())
		closedtest.Check(t, "Loader", l, loader.ErrClosed, map[string]closedtest.Call{
			"Batches": closed(func() error {
				for _, err := range l.Batches(context.Background(), loader.Position{}) {
					return err
				}
				return errors.New("no batch and no error")
			}),
			"PerEpoch": getter(func() error { return same(l.PerEpoch(), per, "PerEpoch") }),
			"Config":   getter(func() error { return same(l.Config().Seq, 8, "Config().Seq") }),
			"Stats":    noPanic(func() { l.Stats() }),
			"Close":    getter(l.Close),
		})
	})

	t.Run("SeqLoader", func(t *testing.T) {
		data, err := loader.OpenDataset(context.Background(), dataPath, loader.DatasetConfig{})
		must(t, err)
		defer data.Close()
		l, err := loader.NewSeqLoader(d, data, loader.SeqConfig{Bucket: loader.BucketConfig{Batch: 4}, Epochs: 1})
		must(t, err)
		per := l.PerEpoch(0)
		must(t, l.Close())
		closedtest.Check(t, "SeqLoader", l, loader.ErrClosed, map[string]closedtest.Call{
			"Batches": closed(func() error { return firstBatch(l.Batches(context.Background(), loader.Position{})) }),
			"Load": closed(func() error {
				_, _, err := l.Load(context.Background(), []int32{0, 1})
				return err
			}),
			"PerEpoch":  getter(func() error { return same(l.PerEpoch(0), per, "PerEpoch(0)") }),
			"StepStart": noPanic(func() { l.StepStart(loader.Position{}) }),
			"Config":    getter(func() error { return same(l.Config().Bucket.Batch, 4, "Config().Bucket.Batch") }),
			"Dataset":   getter(func() error { return same(l.Dataset(), data, "Dataset") }),
			"Padding":   noPanic(func() { l.Padding(0) }),
			"Largest":   noPanic(func() { l.Largest() }),
			"Close":     getter(l.Close),
		})
	})
}

// TestOneIterationAtATime: a second iteration while one runs (Batches,
// or a SeqLoader's Load) is refused with an error matching ErrBusy, and
// the first goes on.
func TestOneIterationAtATime(t *testing.T) {
	d := openDevice(t)
	l := newLoader(t, d, tokenize(t, randomText(3, 3000)), loader.Config{Batch: 2, Seq: 8})
	n := 0
	for _, err := range l.Batches(context.Background(), loader.Position{}) {
		must(t, err)
		if n == 0 {
			for _, err := range l.Batches(context.Background(), loader.Position{}) {
				if !errors.Is(err, loader.ErrBusy) {
					t.Errorf("Batches inside Batches = %v, want an error matching loader.ErrBusy", err)
				}
				break
			}
		}
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("the first iteration delivered %d batches, want 3", n)
	}
}

func same[T comparable](got, want T, what string) error {
	if got != want {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}
