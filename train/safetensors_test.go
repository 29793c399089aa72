package train

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sampleFile() *tensorFile {
	f32 := make([]byte, 4*6)
	for i := range f32 {
		f32[i] = byte(i)
	}
	return &tensorFile{
		meta: map[string]string{"format": "gocurrent.charrnn/1", "config": `{"cell":"lstm"}`},
		tensors: map[string]tensorData{
			"rnn.weight_ih_l0": {dtype: "F32", shape: []int{2, 3}, data: f32},
			"optim.step":       {dtype: "I64", shape: []int{}, data: []byte{7, 0, 0, 0, 0, 0, 0, 0}},
			"empty":            {dtype: "F32", shape: []int{0, 4}, data: []byte{}},
		},
	}
}

func encoded(t *testing.T, f *tensorFile) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.encode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sameFile(a, b *tensorFile) bool {
	if len(a.meta) != len(b.meta) || len(a.tensors) != len(b.tensors) {
		return false
	}
	for k, v := range a.meta {
		if b.meta[k] != v {
			return false
		}
	}
	for k, t := range a.tensors {
		u, ok := b.tensors[k]
		if !ok || t.dtype != u.dtype || !slices.Equal(t.shape, u.shape) || !bytes.Equal(t.data, u.data) {
			return false
		}
	}
	return true
}

func TestSafetensorsRoundTrip(t *testing.T) {
	b := encoded(t, sampleFile())
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d, want a multiple of 8 (aligned data)", n)
	}
	got, err := decodeTensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFile(got, sampleFile()) {
		t.Errorf("decoded %+v, want %+v", got, sampleFile())
	}
}

// TestSafetensorsCorrupt: every kind of damage is an ErrCorrupt that says
// what is wrong.
func TestSafetensorsCorrupt(t *testing.T) {
	good := encoded(t, sampleFile())
	n := binary.LittleEndian.Uint64(good)
	header := func(js string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
		return append(append(b, js...), make([]byte, data)...)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"truncated data", good[:len(good)-1], "outside the 31 data bytes"},
		{"truncated header", good[:8+n/2], "header length"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<62), "header length"},
		{"not an object", header(`[1,2]   `, 0), "not a JSON object"},
		{"bad JSON", header(`{"a":`, 0), "header"},
		{"unknown dtype", header(`{"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}}`, 4), `unknown dtype "F31"`},
		{"size mismatch", header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "4 bytes for F32[2], want 8"},
		{"negative shape", header(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "bad shape"},
		{"offsets outside", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 4), "outside the 4 data bytes"},
		{"overlap", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4), "without gaps or overlaps"},
		{"gap", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "starts at byte 4"},
		{"trailing bytes", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "cover 4 of the 8 data bytes"},
		{"metadata not strings", header(`{"__metadata__":{"a":1}}`, 0), "__metadata__"},
		{"unknown field", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4), "unknown field"},
	} {
		_, err := decodeTensors(c.b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrCorrupt saying %q", c.name, err, c.want)
		}
	}
}

// TestWriteFile: a successful write replaces the file; a failed one
// leaves the old file and no temporary file behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.safetensors")
	if err := WriteFile(path, sampleFile().encode); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	boom := errors.New("disk full")
	err := WriteFile(path, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("failed write: %v, want the writer's error", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
		t.Errorf("a failed write changed the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory after a failed write, want 1 (no temporary file left)", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "ck"), sampleFile().encode); err == nil {
		t.Errorf("writing into a missing directory succeeded")
	}
}

// FuzzDecodeTensors: any bytes decode to an error or to a file that
// encodes and decodes back to itself; nothing panics.
func FuzzDecodeTensors(f *testing.F) {
	var b bytes.Buffer
	sampleFile().encode(&b)
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint64(nil, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeTensors(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var again bytes.Buffer
		if err := got.encode(&again); err != nil {
			t.Fatalf("re-encoding a decoded file: %v", err)
		}
		back, err := decodeTensors(again.Bytes())
		if err != nil || !sameFile(back, got) {
			t.Fatalf("round trip of a decoded file: %v", err)
		}
	})
}
