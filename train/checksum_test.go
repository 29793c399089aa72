package train_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/train"
)

// flipRun is a small training run whose checkpoint the flip tests damage,
// and what loads the checkpoint back: a model of its shape and a trainer
// of its loader cut.
type flipRun struct {
	d     device.Device
	model lmConfig
	data  loader.Config
	text  *loader.Text
	meta  map[string]string
}

// write runs the trainer two steps and returns the checkpoint it wrote.
func (r flipRun) write(t *testing.T) (path string, b []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "run.safetensors")
	m := newLM(t, r.d, r.model)
	tr := newTrainer(t, r.d, m, newLoader(t, r.d, r.text, r.data), train.Config{Steps: 2, Checkpoint: path, Metadata: r.meta})
	_, err := tr.Run(context.Background())
	check(t, err)
	b, err = os.ReadFile(path)
	check(t, err)
	return path, b
}

// load is everything a caller does with a checkpoint: read it, load its
// weights into a model of the run's shape and resume a trainer of the
// run's cut from it. A panic is returned as an error, for the tests to
// report.
func (r flipRun) load(t *testing.T, read func() (*train.Checkpoint, error)) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	ck, err := read()
	if err != nil {
		return err
	}
	into := r.model
	into.seed += 100
	m := newLM(t, r.d, into)
	if err := ck.LoadWeights(r.d, m.Groups()); err != nil {
		return err
	}
	tr := newTrainer(t, r.d, m, newLoader(t, r.d, r.text, r.data), train.Config{Steps: 4})
	return tr.Resume(ck)
}

// header is a safetensors file's header: its length, the JSON and each
// tensor's data offsets.
type header struct {
	n       int
	json    []byte
	offsets map[string][2]int
}

func parseHeader(t *testing.T, b []byte) header {
	t.Helper()
	h := header{n: int(binary.LittleEndian.Uint64(b)), offsets: map[string][2]int{}}
	h.json = b[8 : 8+h.n]
	var raw map[string]json.RawMessage
	check(t, json.Unmarshal(h.json, &raw))
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DataOffsets [2]int `json:"data_offsets"`
		}
		check(t, json.Unmarshal(v, &e))
		h.offsets[name] = e.DataOffsets
	}
	return h
}

// at is the position in the file of byte skip of the header's first
// occurrence of s after the first occurrence of from ("" for the start).
func (h header) at(t *testing.T, from, s string, skip int) int {
	t.Helper()
	start := bytes.Index(h.json, []byte(from))
	i := bytes.Index(h.json[max(start, 0):], []byte(s))
	if start < 0 || i < 0 {
		t.Fatalf("no %q after %q in the header %s", s, from, h.json)
	}
	return 8 + start + i + skip
}

// TestChecksumFlips: one flipped bit anywhere in a checkpoint the trainer
// wrote, in each class of position, is caught by the load (an error
// wrapping ErrCorrupt that names what is damaged), never a panic and
// never a silent load. Before the checksums, 47 to 49 of 50 random flips
// loaded and resumed without a word (issue 46, item 7); only those that
// made a NaN were caught.
func TestChecksumFlips(t *testing.T) {
	d := testdevice.Open(t)
	r := flipRun{d: d, model: lmConfig{vocab: 10, embed: 5, hidden: 8, layers: 1, dtype: device.Float32, seed: 1},
		data: loader.Config{Batch: 4, Seq: 8}, text: text(t, 2000, 10, 1),
		// What a model's metadata holds (models.CharRNN's keys), so that
		// flips in it are checked: values nothing in train reads.
		meta: map[string]string{"format": "gocurrent.charrnn/1", "config": `{"cell":"lstm","embed":5,"hidden":8,"layers":1}`,
			"vocab": `["a","b","c","d","e","f","g","h","i","j"]`}}
	path, good := r.write(t)
	if err := r.load(t, func() (*train.Checkpoint, error) { return train.ReadCheckpoint(path) }); err != nil {
		t.Fatalf("the undamaged checkpoint: %v", err)
	}
	h := parseHeader(t, good)
	type flip struct {
		name string
		at   int
		bit  uint
		says string // what the error names
	}
	flips := []flip{
		// The header's length: one more byte, 8 more (the first 8 data
		// bytes read as JSON), 256 more, and past any file.
		{"header length bit 0", 0, 0, "header"},
		{"header length bit 3", 0, 3, "header"},
		{"header length bit 8", 1, 0, "header"},
		{"header length bit 63", 7, 7, "header length"},
		// The JSON's structure and the tensors' entries, which the
		// structural checks catch.
		{"opening brace", 8, 1, "header"},
		{"tensor name", h.at(t, "", `"out.bias":{`, 5), 0, `"crc32c.out.bias" names no tensor`}, // bias → cias
		{"tensor name to another's", h.at(t, "", `"rnn.weight_hh_l0":{`, 12), 0, "starts at"},   // hh → ih: two entries of one name
		{"dtype field name case", h.at(t, "", `"dtype"`, 1), 5, `"Dtype"`},
		{"dtype", h.at(t, "", `"F32"`, 2), 1, `"F12"`},                                                             // 3 → 1
		{"shape digit", h.at(t, `"emb.weight":{`, `"shape":[10,`, 10), 0, `"emb.weight": 200 bytes for F32[11 5]`}, // 10 → 11
		{"data offset digit", h.at(t, `"out.bias":{`, `"data_offsets":[`, 16), 0, "out.bias"},
		// Metadata values nothing in train reads: caught by the metadata's
		// checksum alone.
		{"vocabulary character", h.at(t, `"vocab":`, `\"b\"`, 2), 0, "metadata"}, // b → c
		{"config digit", h.at(t, `"config":`, `hidden\":8`, 9), 0, "metadata"},   // 8 → 9
		{"format character", h.at(t, `"format":`, `charrnn`, 0), 0, "metadata"},  // c → b
		{"metadata key", h.at(t, "", `"vocab":`, 1), 5, "metadata"},              // vocab → Vocab
		// The trainer's record, which Resume reads.
		{"trainer step", h.at(t, `"trainer":`, `\"step\":2`, 9), 0, "metadata"},
		// The checksums themselves: their values, their keys' names.
		{"metadata checksum digit", h.at(t, "", `"crc32c.__metadata__":"`, 23), 0, "metadata"},
		{"tensor checksum digit", h.at(t, "", `"crc32c.out.bias":"`, 26), 0, `"out.bias"`},
		{"checksum key prefix", h.at(t, "", `"crc32c.emb.weight"`, 2), 0, "metadata"},                          // crc32c → csc32c: one key more
		{"checksum key tensor name", h.at(t, "", `"crc32c.emb.weight"`, 8), 0, `"crc32c.dmb.weight" names no`}, // emb → dmb
		{"metadata checksum key", h.at(t, "", `"crc32c.__metadata__"`, 10), 0, "metadata"},
	}
	// A hexadecimal letter of a checksum made upper case: the same number
	// if read without regard to case.
	var meta map[string]string
	check(t, json.Unmarshal(parseMeta(t, h.json), &meta))
	lettered := false
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if v := meta[k]; strings.HasPrefix(k, "crc32c.") && strings.ContainsAny(v, "abcdef") && !lettered {
			flips = append(flips, flip{"checksum letter case", h.at(t, "", `"`+k+`":"`, len(k)+4+strings.IndexAny(v, "abcdef")), 5, "8 lowercase hexadecimal digits"})
			lettered = true
		}
	}
	if !lettered {
		t.Fatalf("no checksum of the file holds a letter: %v", meta)
	}
	// Padding after the JSON, where there is some.
	if h.json[h.n-1] == ' ' {
		flips = append(flips, flip{"padding", 8 + h.n - 1, 0, "header"})
	}
	// Every tensor's first, middle and last byte.
	for _, name := range slices.Sorted(maps.Keys(h.offsets)) {
		o := h.offsets[name]
		for i, at := range []int{o[0], (o[0] + o[1]) / 2, o[1] - 1} {
			flips = append(flips, flip{fmt.Sprintf("%s byte %d", name, at-o[0]), 8 + h.n + at, uint(3 * i), fmt.Sprintf("%q", name)})
		}
	}
	if len(h.offsets) < 10 {
		t.Fatalf("%d tensors, want the model's 7, the optimizer's and the carried state's", len(h.offsets))
	}
	for _, f := range flips {
		b := bytes.Clone(good)
		b[f.at] ^= 1 << f.bit
		damaged := filepath.Join(t.TempDir(), "damaged.safetensors")
		check(t, os.WriteFile(damaged, b, 0o644))
		err := r.load(t, func() (*train.Checkpoint, error) { return train.ReadCheckpoint(damaged) })
		if !errors.Is(err, train.ErrCorrupt) || !strings.Contains(err.Error(), f.says) {
			t.Errorf("%s (byte %d, bit %d: %q): got %v, want ErrCorrupt saying %s", f.name, f.at, f.bit, around(good, f.at), err, f.says)
		}
	}
}

// parseMeta is the raw JSON of a header's metadata.
func parseMeta(t *testing.T, js []byte) []byte {
	t.Helper()
	var raw map[string]json.RawMessage
	check(t, json.Unmarshal(js, &raw))
	return raw["__metadata__"]
}

// around is the bytes around position at, for a failure's message.
func around(b []byte, at int) []byte { return b[max(at-12, 0):min(at+12, len(b))] }

// TestChecksumEveryByte flips a bit of every byte of a tiny checkpoint the
// trainer wrote, in turn, bit i%8 of byte i so that each of the 8 falls in
// every part of the file: every flip is caught by the load, an error
// wrapping ErrCorrupt, never a panic. One bit a byte, not 8: the 2,876
// bytes' 23,008 flips took 3.8 s here (2 shared cores), all caught, and
// many times that under the race detector, which CI runs; 2,876 take an
// eighth. (The flips are read from memory: writing each to a file would
// test the file system, not the checks.)
func TestChecksumEveryByte(t *testing.T) {
	d := testdevice.Open(t)
	r := flipRun{d: d, model: lmConfig{vocab: 3, embed: 2, hidden: 2, layers: 1, dtype: device.Float32, seed: 1},
		data: loader.Config{Batch: 1, Seq: 2}, text: text(t, 200, 3, 1),
		meta: map[string]string{"vocab": `["a","b","c"]`}}
	path, good := r.write(t)
	read := func(b []byte) func() (*train.Checkpoint, error) {
		return func() (*train.Checkpoint, error) { return train.ReadCheckpointBytes(path, b) }
	}
	if err := r.load(t, read(good)); err != nil {
		t.Fatalf("the undamaged checkpoint: %v", err)
	}
	start := time.Now()
	failed := 0
	for at := range good {
		b := bytes.Clone(good)
		bit := at % 8
		b[at] ^= 1 << bit
		if err := r.load(t, read(b)); !errors.Is(err, train.ErrCorrupt) {
			if failed++; failed <= 10 {
				t.Errorf("byte %d (%q), bit %d: got %v, want ErrCorrupt", at, around(good, at), bit, err)
			}
		}
	}
	if failed > 10 {
		t.Errorf("and %d more", failed-10)
	}
	t.Logf("%d flips of a %d-byte checkpoint in %v", len(good), len(good), time.Since(start))
}
