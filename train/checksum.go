package train

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// The checksums of a checkpoint (docs/ARCHITECTURE.md, "Checkpoint:
// safetensors, PyTorch names"). A file this package writes records in its
// __metadata__ the CRC-32C (Castagnoli) of every tensor's data bytes under
// "crc32c.<tensor name>", and of the rest of the metadata under
// "crc32c.__metadata__", each as 8 lowercase hexadecimal digits. The
// metadata's sum is over its keys that do not start with "crc32c.", in
// byte order, each key and then its value preceded by its length in bytes
// as an 8-byte little-endian number: a serialization another writer (a
// Python script) reproduces without Go's JSON escaping.
//
// One key per tensor, not one key holding them all, so that no single
// flipped bit makes a file look as though it had no checksums: damage to
// one key's name leaves the others, which then miss a tensor's sum or
// hold one for no tensor. A file without any such key (PyTorch's, or one
// this package wrote before it recorded them) is read as it always was.

// checksumPrefix starts every checksum key of the metadata.
const checksumPrefix = "crc32c."

// metadataChecksum is the key of the metadata's own checksum; no tensor
// can be named "__metadata__", the safetensors header's own key.
const metadataChecksum = checksumPrefix + "__metadata__"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// formatSum is a checksum as the metadata records it.
func formatSum(sum uint32) string { return fmt.Sprintf("%08x", sum) }

// parseSum reads a recorded checksum: exactly 8 lowercase hexadecimal
// digits, so that a flipped case bit ('a' to 'A') is damage, not the same
// number.
func parseSum(s string) (uint32, bool) {
	if len(s) != 8 {
		return 0, false
	}
	var sum uint32
	for i := range len(s) {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			sum = sum<<4 | uint32(c-'0')
		case 'a' <= c && c <= 'f':
			sum = sum<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return sum, true
}

// sumMetadata is the checksum of meta's keys and values, those of the
// checksums excepted.
func sumMetadata(meta map[string]string) uint32 {
	var sum uint32
	var n [8]byte
	field := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		sum = crc32.Update(sum, castagnoli, n[:])
		sum = crc32.Update(sum, castagnoli, []byte(s))
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if !strings.HasPrefix(k, checksumPrefix) {
			field(k)
			field(meta[k])
		}
	}
	return sum
}

// checksummed returns f's metadata with the checksums of its tensors and
// of the metadata added: what encode writes. A key of f's own with the
// checksums' prefix is an error, for the file would not read back.
func (f *tensorFile) checksummed() (map[string]string, error) {
	for k := range f.meta {
		if strings.HasPrefix(k, checksumPrefix) {
			return nil, fmt.Errorf("train: metadata key %q: keys starting with %q hold the checkpoint's checksums", k, checksumPrefix)
		}
	}
	meta, err := asDecoded(f.meta)
	if err != nil {
		return nil, err
	}
	meta[metadataChecksum] = formatSum(sumMetadata(meta))
	for name, t := range f.tensors {
		meta[checksumPrefix+name] = formatSum(crc32.Checksum(t.data, castagnoli))
	}
	return meta, nil
}

// asDecoded is a copy of meta as a reader will decode it from the JSON
// header: JSON holds only valid UTF-8, and encoding/json writes each
// invalid byte of a string as U+FFFD, so the metadata's checksum is taken
// over what the file will hold, not what the caller passed.
func asDecoded(meta map[string]string) (map[string]string, error) {
	valid := true
	for k, v := range meta {
		valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
	}
	if valid {
		out := make(map[string]string, len(meta)+1)
		maps.Copy(out, meta)
		return out, nil
	}
	js, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint metadata: %w", err)
	}
	out := map[string]string{}
	if err := json.Unmarshal(js, &out); err != nil {
		return nil, fmt.Errorf("train: checkpoint metadata: %w", err)
	}
	return out, nil
}

// verifyChecksums checks a decoded file's checksums, if it records any,
// and takes them out of its metadata: they are the file's, not the
// writer's metadata (Checkpoint.Metadata returns what the writer passed).
// Every error wraps ErrCorrupt and names the tensor, or "metadata", whose
// bytes do not match.
func (f *tensorFile) verifyChecksums() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	sums := map[string]string{}
	for k, v := range f.meta {
		if strings.HasPrefix(k, checksumPrefix) {
			sums[k] = v
		}
	}
	if len(sums) == 0 {
		return nil
	}
	recorded, ok := sums[metadataChecksum]
	if !ok {
		return bad("metadata: no checksum %q, though the file records %d other checksums", metadataChecksum, len(sums))
	}
	want, ok := parseSum(recorded)
	if !ok {
		return bad("metadata: checksum %q is not 8 lowercase hexadecimal digits", recorded)
	}
	if got := sumMetadata(f.meta); got != want {
		return bad("metadata: its CRC-32C is %s, the file records %s", formatSum(got), recorded)
	}
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		if _, ok := f.tensors[strings.TrimPrefix(k, checksumPrefix)]; !ok && k != metadataChecksum {
			return bad("metadata: checksum %q names no tensor of the file", k)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.tensors)) {
		recorded, ok := sums[checksumPrefix+name]
		if !ok {
			return bad("tensor %q: no checksum %q, though the file records others", name, checksumPrefix+name)
		}
		want, ok := parseSum(recorded)
		if !ok {
			return bad("tensor %q: checksum %q is not 8 lowercase hexadecimal digits", name, recorded)
		}
		t := f.tensors[name]
		if got := crc32.Checksum(t.data, castagnoli); got != want {
			return bad("tensor %q: the CRC-32C of its %d bytes is %s, the file records %s", name, len(t.data), formatSum(got), recorded)
		}
	}
	for k := range sums {
		delete(f.meta, k)
	}
	return nil
}
