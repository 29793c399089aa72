package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
	"github.com/gocurrent/gocurrent/train"
)

// metaPart is one JSON value of a checkpoint's metadata and where to
// decode it.
type metaPart struct {
	key string
	v   any
}

// mismatch is an error wrapping train.ErrMismatch about ck's path.
func mismatch(ck *train.Checkpoint, format string, args ...any) error {
	return fmt.Errorf("models: %s: %w: %s", ck.Path(), train.ErrMismatch, fmt.Sprintf(format, args...))
}

// built is the error of building the model a checkpoint describes: a
// failure of the device (out of memory, a closed device) passes as it is,
// anything else the constructor refused (a config, a vocabulary) is the
// file's, an error wrapping train.ErrMismatch.
func built(ck *train.Checkpoint, err error) error {
	for _, dev := range []error{alloc.ErrOutOfMemory, device.ErrClosed, device.ErrUnavailable} {
		if errors.Is(err, dev) {
			return fmt.Errorf("models: %s: %w", ck.Path(), err)
		}
	}
	return mismatch(ck, "%v", err)
}

// kinds names the model each format of this package's checkpoints holds.
var kinds = map[string]string{CharRNNFormat: "char-RNN", TaggerFormat: "tagger", ClassifierFormat: "classifier"}

// formatError is the error of a checkpoint of another format than the
// loader's: one line that says what the file is, for a command that was
// given another command's checkpoint, rather than a list of the metadata
// keys it lacks, which reads as though it were PyTorch's.
type formatError struct {
	path, format, want string
}

func (e *formatError) Error() string {
	if kind, ok := kinds[e.format]; ok {
		return fmt.Sprintf("models: %s is a %s checkpoint (format %s), not a %s one (%s)", e.path, kind, e.format, kinds[e.want], e.want)
	}
	return fmt.Sprintf("models: %s is a checkpoint of format %q, not a %s one (%s)", e.path, e.format, kinds[e.want], e.want)
}

// Unwrap makes the error match train.ErrMismatch: the file is whole, and
// of another model.
func (e *formatError) Unwrap() error { return train.ErrMismatch }

// checkFormat is the error of ck's metadata naming a format other than
// want; a file without a format (PyTorch's state dict alone) passes, for
// the message about the keys it lacks.
func checkFormat(ck *train.Checkpoint, meta map[string]string, want string) error {
	if f, ok := meta["format"]; ok && f != want {
		return &formatError{path: ck.Path(), format: f, want: want}
	}
	return nil
}

// decodeMetadata checks that ck's metadata holds "format" equal to format
// and every part's key, and decodes each part's JSON; name is the kind of
// model, for the message about missing keys. Its errors wrap
// train.ErrMismatch.
func decodeMetadata(ck *train.Checkpoint, name, format string, parts ...metaPart) error {
	meta := ck.Metadata()
	if err := checkFormat(ck, meta, format); err != nil {
		return err
	}
	keys := []string{`"format"`}
	var missing []string
	if _, ok := meta["format"]; !ok {
		missing = append(missing, `"format"`)
	}
	for _, p := range parts {
		keys = append(keys, strconv.Quote(p.key))
		if _, ok := meta[p.key]; !ok {
			missing = append(missing, strconv.Quote(p.key))
		}
	}
	if len(missing) > 0 {
		return mismatch(ck, "no %s metadata: a %s checkpoint holds %s (format %q)", strings.Join(missing, ", "), name, strings.Join(keys, ", "), format)
	}
	for _, p := range parts {
		if err := json.Unmarshal([]byte(meta[p.key]), p.v); err != nil {
			return mismatch(ck, "%s metadata: %v", p.key, err)
		}
	}
	return nil
}

// tensorShape is a tensor a configuration read from a checkpoint implies,
// with the shape it implies.
type tensorShape struct {
	name  string
	shape []int
}

// stackTensors are the tensors of the recurrent stack group of cell with
// c (rnn's names, PyTorch's) that fix its shape: the first and the top
// layer's weights in every direction. The count of layers is checked by
// checkShapes: the top layer's are there, the next one's are not.
func stackTensors(group, cell string, c rnn.Config) []tensorShape {
	gates, dirs := rnn.LSTMGates, 1
	if cell == "gru" {
		gates = rnn.GRUGates
	}
	if c.Bidirectional {
		dirs = 2
	}
	layers := max(c.Layers, 1)
	var out []tensorShape
	for _, l := range []int{0, layers - 1} {
		in := c.Input
		if l > 0 {
			in = dirs * c.Hidden
		}
		for d := range dirs {
			sfx := ""
			if d == 1 {
				sfx = "_reverse"
			}
			out = append(out,
				tensorShape{fmt.Sprintf("%s.weight_ih_l%d%s", group, l, sfx), []int{gates * c.Hidden, in}},
				tensorShape{fmt.Sprintf("%s.weight_hh_l%d%s", group, l, sfx), []int{gates * c.Hidden, c.Hidden}})
		}
		if layers == 1 {
			break
		}
	}
	return out
}

// checkShapes holds a configuration read from ck's metadata to the
// tensors the file holds before a model of it is built (after its
// Validate, which bounds the products): each tensor want names has the
// shape the configuration implies, and each stack (its group, and the
// configuration's layers) holds its top layer and no layer above it. A
// contradiction is an error wrapping train.ErrMismatch that names the
// configuration's value and the tensor: a config of 2^40 layers in a file
// of two is refused in microseconds, not allocated.
func checkShapes(ck *train.Checkpoint, stacks map[string]int, want []tensorShape) error {
	for _, t := range want {
		got, ok := ck.Shape(t.name)
		switch {
		case !ok:
			return mismatch(ck, "the config implies a tensor %q of shape %v; the file holds none", t.name, t.shape)
		case !slices.Equal(got, t.shape):
			return mismatch(ck, "the config implies tensor %q of shape %v; the file's is %v", t.name, t.shape, got)
		}
	}
	for _, group := range slices.Sorted(maps.Keys(stacks)) {
		layers := stacks[group]
		if _, ok := ck.Shape(fmt.Sprintf("%s.weight_ih_l%d", group, layers)); ok {
			return mismatch(ck, "the config says %d layers; the file holds %s.weight_ih_l%d, of a deeper stack", layers, group, layers)
		}
	}
	return nil
}
