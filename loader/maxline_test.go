package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

// longLine is a line of exactly n bytes in format f (its line ending not
// counted) whose tag, or text, is made of 'X's: n must leave room for the
// line's fixed part (at most 40 bytes).
func longLine(f Format, n int) string {
	var pre, post string
	switch f {
	case CoNLLU:
		pre, post = "1\ta\t_\t", "\t_\t_\t_\t_\t_\t_"
	case TSV:
		pre = "a\t"
	case JSONL:
		pre, post = `{"text": "`, `", "label": "b"}`
	}
	return pre + strings.Repeat("X", n-len(pre)-len(post)) + post
}

// TestMaxLine: a line of exactly ReadConfig.MaxLine bytes reads, in every
// format, with either line ending and as the file's last line without
// one; a byte more is a *LineError on its line saying "line longer than
// N bytes", returned again by the next Next (the reader stopped inside
// the line, so what follows it is not a line). 64 is a bound smaller than
// the reader's 64 KiB buffer, 0 the default, 1 MiB, whose lines span
// many buffers.
func TestMaxLine(t *testing.T) {
	first := map[Format]string{ // a short example before the long line
		CoNLLU: "1\tb\t_\tY\t_\t_\t_\t_\t_\t_\n\n",
		TSV:    "b\tY\n\n",
		JSONL:  `{"text": "b", "label": "Y"}` + "\n",
	}
	line := map[Format]int{CoNLLU: 3, TSV: 3, JSONL: 2} // the long line's number
	for _, maxLine := range []int{64, 0} {
		limit := maxLine
		if limit == 0 {
			limit = DefaultMaxLine
		}
		for _, f := range []Format{CoNLLU, TSV, JSONL} {
			for _, end := range []string{"\n", "\r\n", ""} {
				for _, extra := range []int{0, 1} {
					name := fmt.Sprintf("max %d/%s/ending %q/%d bytes", maxLine, f, end, limit+extra)
					t.Run(name, func(t *testing.T) {
						text := first[f] + longLine(f, limit+extra) + end
						x, err := NewExampleReader(strings.NewReader(text), "data", 0, ReadConfig{Format: f, MaxLine: maxLine})
						if err != nil {
							t.Fatal(err)
						}
						if _, err := x.Next(); err != nil {
							t.Fatalf("the first example: %v", err)
						}
						ex, err := x.Next()
						if extra == 0 {
							if err != nil {
								t.Fatalf("a line of %d bytes with MaxLine %d: %v, want it read", limit, maxLine, err)
							}
							got := ex.Text
							if ex.Tags != nil {
								got = ex.Tags[0]
							}
							if n := strings.Count(got, "X"); n != strings.Count(text, "X") {
								t.Errorf("the long line's tag or text has %d X's, want %d", n, strings.Count(text, "X"))
							}
							if _, err := x.Next(); !errors.Is(err, io.EOF) {
								t.Errorf("after the last example: %v, want io.EOF", err)
							}
							return
						}
						var le *LineError
						if !errors.As(err, &le) || !errors.Is(err, ErrMalformed) {
							t.Fatalf("a line of %d bytes with MaxLine %d: %v, want a *LineError", limit+1, maxLine, err)
						}
						if want := fmt.Sprintf("loader: data:%d: line longer than %d bytes", line[f], limit); err.Error() != want {
							t.Errorf("got %q, want %q", err, want)
						}
						if _, again := x.Next(); again != err {
							t.Errorf("Next after the long line: %v, want the same error again", again)
						}
					})
				}
			}
		}
	}
}

// TestMaxLineConfig: a negative MaxLine is an error, and the bound holds
// for OpenDataset's pass and for the examples a Dataset reads back (a
// bound above the default reads a line the default refuses: 1.5 MiB).
func TestMaxLineConfig(t *testing.T) {
	if _, err := NewExampleReader(strings.NewReader(""), "data", 0, ReadConfig{Format: TSV, MaxLine: -1}); err == nil || !strings.Contains(err.Error(), "MaxLine -1") {
		t.Errorf("MaxLine -1: %v, want an error naming it", err)
	}
	ctx := context.Background()
	text := longLine(TSV, 3<<19) + "\n"
	_, err := NewDataset(ctx, strings.NewReader(text), int64(len(text)), "big.tsv", DatasetConfig{})
	if want := fmt.Sprintf("loader: big.tsv:1: line longer than %d bytes", DefaultMaxLine); err == nil || err.Error() != want {
		t.Errorf("a line of 1.5 MiB, the default bound: %v, want %q", err, want)
	}
	d, err := NewDataset(ctx, strings.NewReader(text), int64(len(text)), "big.tsv", DatasetConfig{ReadConfig: ReadConfig{MaxLine: 2 << 20}})
	if err != nil {
		t.Fatalf("a line of 1.5 MiB, MaxLine 2 MiB: %v", err)
	}
	ex, err := d.Example(0)
	if err != nil || len(ex.Tags) != 1 || len(ex.Tags[0]) != 3<<19-2 {
		t.Errorf("reading it back: %d tags, %v; want one of %d bytes", len(ex.Tags), err, 3<<19-2)
	}
}

// endlessLine produces n bytes of one TSV line, "a\tXXX...", made as they
// are read, and counts what was read.
type endlessLine struct {
	n, read int64
}

func (r *endlessLine) Read(p []byte) (int, error) {
	if r.read == r.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n-r.read)]
	for i := range p {
		p[i] = 'X'
		if r.read+int64(i) == 1 {
			p[i] = '\t'
		}
	}
	if r.read == 0 && len(p) > 0 {
		p[0] = 'a'
	}
	r.read += int64(len(p))
	return len(p), nil
}

// TestMaxLineBoundedMemory: a 64 MiB line, generated as it is read, fails
// with the default bound having read little more than the bound (1 MiB
// and the 64 KiB buffer) and allocated less than 8 MiB, where the reader
// used to gather the whole line (at least 64 MiB, and the doubling
// appends of its growth on top: 4.7 GB for a line of 1 GB).
func TestMaxLineBoundedMemory(t *testing.T) {
	src := &endlessLine{n: 64 << 20}
	x, err := NewExampleReader(src, "endless.tsv", 0, ReadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = x.Next()
	runtime.ReadMemStats(&after)
	if want := fmt.Sprintf("loader: endless.tsv:1: line longer than %d bytes", DefaultMaxLine); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if limit := int64(DefaultMaxLine + 2<<16); src.read > limit {
		t.Errorf("read %d bytes of the line, want at most %d (the bound and two buffers)", src.read, limit)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("allocated %d bytes reading it, want under 8 MiB", grew)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 8<<20 {
		t.Errorf("the heap in use grew by %d bytes, want under 8 MiB", grew)
	}
}
