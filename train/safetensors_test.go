package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
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

// headerMeta is the __metadata__ a safetensors file b holds.
func headerMeta(t *testing.T, b []byte) map[string]string {
	t.Helper()
	n := binary.LittleEndian.Uint64(b)
	var header struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	return header.Meta
}

// TestChecksumsRecorded: an encoded file's metadata holds the checksums
// as docs/ARCHITECTURE.md says, computed here from that text alone; they
// are checked and taken out when it is read, and the same file without
// them (as PyTorch writes it) reads the same.
func TestChecksumsRecorded(t *testing.T) {
	// The CRC-32C check value: the checksum of "123456789" is e3069283
	// (RFC 3720, appendix B.4; the CRC catalogue's CRC-32/ISCSI).
	table := crc32.MakeTable(crc32.Castagnoli)
	if got := fmt.Sprintf("%08x", crc32.Checksum([]byte("123456789"), table)); got != "e3069283" {
		t.Fatalf("CRC-32C of 123456789: %s, want e3069283", got)
	}
	f := sampleFile()
	b := encoded(t, f)
	meta := headerMeta(t, b)
	want := maps.Clone(f.meta)
	for name, tn := range f.tensors {
		want["crc32c."+name] = fmt.Sprintf("%08x", crc32.Checksum(tn.data, table))
	}
	// The metadata's sum: each key not starting with "crc32c." in byte
	// order, then its value, each preceded by its length as 8 bytes,
	// little-endian.
	var canon []byte
	for _, k := range slices.Sorted(maps.Keys(f.meta)) {
		canon = binary.LittleEndian.AppendUint64(canon, uint64(len(k)))
		canon = append(canon, k...)
		canon = binary.LittleEndian.AppendUint64(canon, uint64(len(f.meta[k])))
		canon = append(canon, f.meta[k]...)
	}
	want["crc32c.__metadata__"] = fmt.Sprintf("%08x", crc32.Checksum(canon, table))
	if !maps.Equal(meta, want) {
		t.Errorf("metadata %v, want %v", meta, want)
	}
	got, err := decodeTensors(b)
	if err != nil || !sameFile(got, sampleFile()) {
		t.Errorf("decoded %+v (%v), want %+v without the checksums", got, err, sampleFile())
	}
	// Without checksums: the metadata as written before them.
	plain := &tensorFile{meta: maps.Clone(f.meta), tensors: f.tensors}
	header := map[string]any{"__metadata__": plain.meta}
	var off int64
	for _, name := range slices.Sorted(maps.Keys(f.tensors)) {
		tn := f.tensors[name]
		header[name] = headerEntry{tn.dtype, tn.shape, [2]int64{off, off + int64(len(tn.data))}}
		off += int64(len(tn.data))
	}
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	raw := append(binary.LittleEndian.AppendUint64(nil, uint64(len(js))), js...)
	for _, name := range slices.Sorted(maps.Keys(f.tensors)) {
		raw = append(raw, f.tensors[name].data...)
	}
	if got, err := decodeTensors(raw); err != nil || !sameFile(got, sampleFile()) {
		t.Errorf("the file without checksums decoded to %+v (%v), want %+v", got, err, sampleFile())
	}
}

// TestChecksumsMetadataKeys: metadata of the caller's that would read back
// as checksums is refused when written, and metadata that is not valid
// UTF-8 (JSON holds it as U+FFFD) reads back: the checksum is over what
// the file holds.
func TestChecksumsMetadataKeys(t *testing.T) {
	f := sampleFile()
	f.meta["crc32c.rnn.weight_ih_l0"] = "00000000"
	if err := f.encode(io.Discard); err == nil || !strings.Contains(err.Error(), `"crc32c.rnn.weight_ih_l0"`) {
		t.Errorf("encoding metadata with a checksum key of the caller's: %v, want an error naming it", err)
	}
	f = sampleFile()
	f.meta["note\xff"] = "caf\xe9"
	got, err := decodeTensors(encoded(t, f))
	if err != nil {
		t.Fatalf("metadata not valid UTF-8: %v", err)
	}
	if got.meta["note\uFFFD"] != "caf\uFFFD" {
		t.Errorf("metadata not valid UTF-8 read back as %q, want note\uFFFD: caf\uFFFD", got.meta)
	}
}
