package train

import (
	"errors"
	"strings"
	"testing"
)

// TestRecordSizes: a trainer record whose loader sizes overflow or pass
// the loaders' maxima (a forged one, whose checksums a forger recomputes) is
// ErrMismatch from Record, naming them, before a caller builds a loader of
// them (issue 46: -resume of a record of batch 2^40 × accum 2^24 divided
// by zero).
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		loader, says string
	}{
		{`{"mode": "streams", "batch": 1099511627776, "seq": 64, "accum": 16777216}`, "Batch × Accum = 1099511627776 × 16777216 overflows"},
		{`{"mode": "streams", "batch": 32, "seq": 9223372036854775807, "accum": 1}`, "Seq = 9223372036854775807"},
		{`{"mode": "streams", "batch": 32, "seq": 64, "accum": 1048576}`, "Accum = 1048576, want at most 65536"},
		{`{"mode": "sequences", "batch": 4611686018427387904, "accum": 4}`, "Batch × Accum"},
		{`{"mode": "streams", "batch": -3, "seq": 64, "accum": 1}`, "batch -3"},
	} {
		ck := &Checkpoint{path: "forged.safetensors", file: &tensorFile{meta: map[string]string{
			trainerKey: `{"version": 1, "step": 3, "loader": ` + c.loader + `}`}}}
		_, err := ck.Record()
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: Record = %v, want ErrMismatch saying %q", c.loader, err, c.says)
		}
	}
	ok := &Checkpoint{path: "ok.safetensors", file: &tensorFile{meta: map[string]string{
		trainerKey: `{"version": 1, "step": 3, "loader": {"mode": "streams", "batch": 32, "seq": 64, "accum": 2}}`}}}
	if _, err := ok.Record(); err != nil {
		t.Errorf("a record of batch 32, seq 64, accum 2: %v", err)
	}
}
