package models

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/meta"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// TestEveryLoadAllocationFails saves each model (the char-RNN, the tagger
// with character features, the classifier), then loads it on the meta
// device with each of the load's allocations failing in turn: every load
// fails with the out-of-memory error, nothing panics, nothing is left
// allocated.
func TestEveryLoadAllocationFails(t *testing.T) {
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat", "sat"})
	mustNil(t, err)
	vocab, err := loader.NewVocab([]string{"a", "c", "e", "h", "s", "t"})
	mustNil(t, err)
	chars, err := loader.NewWords([]string{"<pad>", "<unk>", "a", "c", "e", "h", "s", "t"})
	mustNil(t, err)
	labels, err := loader.NewLabels([]string{"DET", "NOUN", "VERB"})
	mustNil(t, err)
	type model interface {
		Groups() []train.Group
		Metadata() map[string]string
		Close() error
	}
	cases := []struct {
		name  string
		build func(d device.Device) (model, error)
		load  func(d device.Device, path string) (model, error)
	}{
		{"charrnn", func(d device.Device) (model, error) {
			return NewCharRNN(context.Background(), d, CharRNNConfig{Cell: "gru", Embed: 4, Hidden: 6, Layers: 2}, vocab, 1)
		}, func(d device.Device, path string) (model, error) {
			m, _, err := LoadCharRNN(context.Background(), d, path)
			if m == nil {
				return nil, err
			}
			return m, err
		}},
		{"tagger", func(d device.Device) (model, error) {
			return NewTaggerChars(context.Background(), d, TaggerConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 2, Bidirectional: true, CharEmbed: 3, CharHidden: 4}, words, chars, labels, 1)
		}, func(d device.Device, path string) (model, error) {
			m, _, err := LoadTagger(context.Background(), d, path)
			if m == nil {
				return nil, err
			}
			return m, err
		}},
		{"classifier", func(d device.Device) (model, error) {
			return NewClassifier(context.Background(), d, ClassifierConfig{Cell: "lstm", Embed: 4, Hidden: 6, Layers: 1, Pool: PoolMax}, words, labels, 1)
		}, func(d device.Device, path string) (model, error) {
			m, _, err := LoadClassifier(context.Background(), d, path)
			if m == nil {
				return nil, err
			}
			return m, err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.name+".safetensors")
			d, err := meta.Open(meta.Config{})
			mustNil(t, err)
			m, err := c.build(d)
			mustNil(t, err)
			mustNil(t, train.SaveWeights(path, d, m.Groups(), m.Metadata()))
			mustNil(t, m.Close())
			before := d.Allocs()
			loaded, err := c.load(d, path)
			mustNil(t, err)
			mustNil(t, loaded.Close())
			n := d.Allocs() - before
			mustNil(t, d.Close())
			if n < 2 {
				t.Fatalf("loading made %d allocations", n)
			}
			for k := 1; k <= n; k++ {
				d, err := meta.Open(meta.Config{})
				mustNil(t, err)
				d.FailAlloc(k)
				err = func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panic: %v", r)
						}
					}()
					m, err := c.load(d, path)
					if err == nil {
						err = errors.Join(errors.New("the load succeeded"), m.Close())
					}
					return err
				}()
				if !errors.Is(err, alloc.ErrOutOfMemory) {
					t.Errorf("allocation %d of %d failed: the load returned %v, want the out-of-memory error", k, n, err)
				}
				if left := d.MemStats().AllocatedBytes[alloc.AllPools].Current; left != 0 {
					t.Errorf("allocation %d of %d failed: %d bytes left allocated", k, n, left)
				}
				mustNil(t, d.Close())
			}
		})
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
