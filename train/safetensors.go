package train

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// The safetensors layout: an 8-byte little-endian header length N, N bytes
// of a JSON object mapping tensor names to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets into the data that follows) and
// an optional "__metadata__" object of strings, then the tensor data,
// every byte of it belonging to exactly one tensor. The files this package
// writes add checksums to the metadata (checksum.go).

// maxHeader bounds the JSON header a reader accepts, as the reference
// implementation does (100 MiB), so a corrupt length cannot make it
// allocate without limit.
const maxHeader = 100 << 20

// ErrCorrupt is wrapped by every error about a checkpoint file's bytes:
// a file that is not safetensors, or one whose tensors or metadata do not
// match the checksums it records.
var ErrCorrupt = errors.New("train: corrupt checkpoint")

// tensorFile is the content of a safetensors file.
type tensorFile struct {
	meta    map[string]string
	tensors map[string]tensorData
}

// tensorData is one tensor: its safetensors dtype ("F32", "F64", "I32",
// "I64", "U8"), shape and little-endian bytes.
type tensorData struct {
	dtype string
	shape []int
	data  []byte
}

var dtypeSize = map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}

type headerEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// encode writes f in safetensors form, tensors in name order, the header
// padded with spaces to a multiple of 8 bytes so tensor data is aligned,
// and the metadata holding the checksums of the tensors and of itself.
func (f *tensorFile) encode(w io.Writer) error {
	names := make([]string, 0, len(f.tensors))
	for n := range f.tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	meta, err := f.checksummed()
	if err != nil {
		return err
	}
	header := map[string]any{"__metadata__": meta}
	var off int64
	for _, n := range names {
		if n == "__metadata__" {
			return fmt.Errorf("train: tensor name %q is the safetensors header's key of the metadata", n)
		}
		t := f.tensors[n]
		if err := t.check(n); err != nil {
			return err
		}
		header[n] = headerEntry{DType: t.dtype, Shape: t.shape, DataOffsets: [2]int64{off, off + int64(len(t.data))}}
		off += int64(len(t.data))
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("train: checkpoint header: %w", err)
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, bytes.Repeat([]byte{' '}, pad)...)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for _, name := range names {
		if _, err := w.Write(f.tensors[name].data); err != nil {
			return err
		}
	}
	return nil
}

// check reports whether t's bytes match its dtype and shape.
func (t tensorData) check(name string) error {
	size, ok := dtypeSize[t.dtype]
	if !ok {
		return fmt.Errorf("train: tensor %q: unknown dtype %q", name, t.dtype)
	}
	n := int64(size)
	for _, d := range t.shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/int64(d)) {
			return fmt.Errorf("train: tensor %q: bad shape %v", name, t.shape)
		}
		n *= int64(d)
	}
	if n != int64(len(t.data)) {
		return fmt.Errorf("train: tensor %q: %d bytes for %s%v, want %d", name, len(t.data), t.dtype, t.shape, n)
	}
	return nil
}

// decodeTensors parses a whole safetensors file. Every inconsistency is an
// error wrapping ErrCorrupt that says what is wrong; nothing panics.
func decodeTensors(b []byte) (*tensorFile, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(b) < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, bad("header length %d, but the file has %d bytes after it (limit %d)", n, len(b)-8, maxHeader)
	}
	js, data := b[8:8+n], b[8+n:]
	if len(bytes.TrimSpace(js)) == 0 || bytes.TrimSpace(js)[0] != '{' {
		return nil, bad("the header is not a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, bad("header: %v", err)
	}
	f := &tensorFile{tensors: map[string]tensorData{}}
	type span struct {
		name       string
		begin, end int64
	}
	var spans []span
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &f.meta); err != nil {
				return nil, bad("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		e, err := decodeEntry(v)
		if err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(data)) {
			return nil, bad("tensor %q: data offsets [%d, %d] outside the %d data bytes", name, begin, end, len(data))
		}
		t := tensorData{dtype: e.DType, shape: e.Shape, data: data[begin:end]}
		if t.shape == nil {
			t.shape = []int{}
		}
		if err := t.check(name); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrCorrupt, strings.TrimPrefix(err.Error(), "train: "))
		}
		f.tensors[name] = t
		spans = append(spans, span{name, begin, end})
	}
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	var at int64
	for _, s := range spans {
		if s.begin != at {
			return nil, bad("tensor %q starts at byte %d of the data, want %d (tensors must cover the data without gaps or overlaps)", s.name, s.begin, at)
		}
		at = s.end
	}
	if at != int64(len(data)) {
		return nil, bad("the tensors cover %d of the %d data bytes", at, len(data))
	}
	if err := f.verifyChecksums(); err != nil {
		return nil, err
	}
	return f, nil
}

// decodeEntry decodes a tensor's header entry. Its field names must be
// spelled exactly (encoding/json alone matches them ignoring case, so a
// flipped case bit in "dtype" would pass unseen) and its data offsets
// must be two numbers.
func decodeEntry(v json.RawMessage) (headerEntry, error) {
	var e headerEntry
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(v, &fields); err != nil {
		return e, err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		var err error
		switch k {
		case "dtype":
			err = json.Unmarshal(fields[k], &e.DType)
		case "shape":
			err = json.Unmarshal(fields[k], &e.Shape)
		case "data_offsets":
			var offsets []int64
			if err = json.Unmarshal(fields[k], &offsets); err == nil && len(offsets) != 2 {
				err = fmt.Errorf("%d data offsets, want 2", len(offsets))
			}
			if err == nil {
				e.DataOffsets = [2]int64(offsets)
			}
		default:
			return e, fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return e, fmt.Errorf("%s: %w", k, err)
		}
	}
	return e, nil
}
