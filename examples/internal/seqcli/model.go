package seqcli

import (
	"context"
	"errors"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// model is a tagger or a classifier, as the commands use them.
type model interface {
	train.SeqModel
	Metadata() map[string]string
	Close() error
	// vocabs are the vocabularies a dataset is read in: words,
	// characters (nil: the data's own) and labels.
	vocabs() (words, chars *loader.Words, labels *loader.Labels)
	// labels are the tags or labels.
	labels() *loader.Labels
	// usesChars says batches must carry each word's characters.
	usesChars() bool
	// describe names the model's shape in spec, for the planner, with
	// the recomputation it trains with (not recorded in the model).
	describe(spec *models.MemorySpec, recompute int)
	SetRecompute(k int) error
}

type tagger struct{ *models.Tagger }

func (m tagger) vocabs() (*loader.Words, *loader.Words, *loader.Labels) {
	return m.Words(), m.Chars(), m.Tags()
}
func (m tagger) labels() *loader.Labels { return m.Tags() }
func (m tagger) usesChars() bool        { return m.Chars() != nil }
func (m tagger) describe(spec *models.MemorySpec, recompute int) {
	cfg := m.Config()
	cfg.Recompute = recompute
	spec.Tagger, spec.Classifier = &cfg, nil
}

type classifier struct{ *models.Classifier }

func (m classifier) vocabs() (*loader.Words, *loader.Words, *loader.Labels) {
	if m.Config().Input == "chars" {
		return nil, m.Vocab(), m.Labels()
	}
	return m.Vocab(), nil, m.Labels()
}
func (m classifier) labels() *loader.Labels { return m.Labels() }
func (m classifier) usesChars() bool        { return false }
func (m classifier) describe(spec *models.MemorySpec, recompute int) {
	cfg := m.Config()
	cfg.Recompute = recompute
	spec.Tagger, spec.Classifier = nil, &cfg
}

// taggerConfig is the tagger f describes.
func (f ModelFlags) taggerConfig() models.TaggerConfig {
	return models.TaggerConfig{Cell: f.Cell, Embed: f.Embed, Hidden: f.Hidden, Layers: f.Layers,
		Bidirectional: f.Bidirectional, Dropout: f.Dropout, CharEmbed: f.CharEmbed, CharHidden: f.CharHidden, Recompute: f.Recompute}
}

// classifierConfig is the classifier f describes.
func (f ModelFlags) classifierConfig() models.ClassifierConfig {
	return models.ClassifierConfig{Cell: f.Cell, Embed: f.Embed, Hidden: f.Hidden, Layers: f.Layers,
		Bidirectional: f.Bidirectional, Dropout: f.Dropout, Pool: f.Pool, Input: f.Input, Recompute: f.Recompute}
}

// describe names task's model of shape f in spec, for the planner.
func (f ModelFlags) describe(task Task, spec *models.MemorySpec) {
	if task == Tagging {
		cfg := f.taggerConfig()
		spec.Tagger, spec.Classifier = &cfg, nil
		return
	}
	cfg := f.classifierConfig()
	spec.Tagger, spec.Classifier = nil, &cfg
}

// newModel builds the task's model over data's vocabularies.
func newModel(ctx context.Context, task Task, d device.Device, f ModelFlags, data *loader.Dataset, seed uint64) (model, error) {
	if task == Tagging {
		var chars *loader.Words
		if f.CharEmbed > 0 {
			chars = data.Chars
		}
		m, err := models.NewTaggerChars(ctx, d, f.taggerConfig(), data.Words, chars, data.Labels, seed)
		if err != nil {
			return nil, err
		}
		return tagger{m}, nil
	}
	vocab := data.Words
	if f.Input == "chars" {
		vocab = data.Chars
	}
	m, err := models.NewClassifier(ctx, d, f.classifierConfig(), vocab, data.Labels, seed)
	if err != nil {
		return nil, err
	}
	return classifier{m}, nil
}

// loadModel builds the task's model a checkpoint holds.
func loadModel(ctx context.Context, task Task, d device.Device, ck *train.Checkpoint) (model, error) {
	if task == Tagging {
		m, err := models.TaggerFromCheckpoint(ctx, d, ck)
		if err != nil {
			return nil, err
		}
		return tagger{m}, nil
	}
	m, err := models.ClassifierFromCheckpoint(ctx, d, ck)
	if err != nil {
		return nil, err
	}
	return classifier{m}, nil
}

// openModel reads the checkpoint at path (before opening the device, so a
// bad file costs nothing), opens the device spec names and builds the
// model on it; closeAll frees both.
func openModel(ctx context.Context, task Task, path, spec string, env Env) (d device.Device, m model, closeAll func() error, err error) {
	ck, err := train.ReadCheckpoint(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if d, err = openDevice(spec, env.CUDA); err != nil {
		return nil, nil, nil, err
	}
	if m, err = loadModel(ctx, task, d, ck); err != nil {
		return nil, nil, nil, errors.Join(err, d.Close())
	}
	return d, m, func() error { return errors.Join(m.Close(), d.Close()) }, nil
}

// newLoader is a loader of data's batches for m.
func newLoader(d device.Device, data *loader.Dataset, cfg loader.SeqConfig, m model) (*loader.SeqLoader, error) {
	cfg.Chars = m.usesChars()
	return loader.NewSeqLoader(d, data, cfg)
}
