package loader

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readExamples reads every example of text in format f.
func readExamples(t testing.TB, text string, cfg ReadConfig) ([]Example, error) {
	t.Helper()
	x, err := NewExampleReader(strings.NewReader(text), "data", 0, cfg)
	if err != nil {
		return nil, err
	}
	var out []Example
	for {
		ex, err := x.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ex)
	}
}

// conllu is a hand-written CoNLL-U file in the format's corner cases: a
// document and sentence comments, a multiword token (1-2) whose words
// follow, an empty node (2.1) between words, CRLF line endings on one
// sentence, several blank lines, and no blank line after the last
// sentence.
const conllu = "# newdoc id = d1\n" +
	"# sent_id = 1\n" +
	"# text = Vámonos al mar.\n" +
	"1-2\tVámonos\t_\t_\t_\t_\t_\t_\t_\t_\n" +
	"1\tVamos\tir\tVERB\tV\t_\t0\troot\t_\t_\n" +
	"2\tnos\tnosotros\tPRON\tP\t_\t1\tobj\t_\t_\n" +
	"2.1\tir\tir\tVERB\tV\t_\t_\t_\t1:conj\t_\n" +
	"3\tal\tal\tADP\tSP\t_\t4\tcase\t_\t_\n" +
	"4\tmar\tmar\tNOUN\tNC\t_\t1\tobl\t_\tSpaceAfter=No\n" +
	"5\t.\t.\tPUNCT\tFp\t_\t1\tpunct\t_\t_\n" +
	"\n\n" +
	"# sent_id = 2\r\n" +
	"1\tSí\tsí\tINTJ\tI\t_\t0\troot\t_\t_\r\n" +
	"\r\n" +
	"1\tfin\tfin\tNOUN\tNC\t_\t0\troot\t_\t_\n"

func TestReadCoNLLU(t *testing.T) {
	got, err := readExamples(t, conllu, ReadConfig{Format: CoNLLU})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Tokens: []string{"Vamos", "nos", "al", "mar", "."}, Tags: []string{"VERB", "PRON", "ADP", "NOUN", "PUNCT"}, Line: 4},
		{Tokens: []string{"Sí"}, Tags: []string{"INTJ"}, Line: 14},
		{Tokens: []string{"fin"}, Tags: []string{"NOUN"}, Line: 16},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	got, err = readExamples(t, conllu, ReadConfig{Format: CoNLLU, Column: "xpos"})
	if err != nil {
		t.Fatal(err)
	}
	if tags := got[0].Tags; !reflect.DeepEqual(tags, []string{"V", "P", "SP", "NC", "Fp"}) {
		t.Errorf("-column xpos: tags %v", tags)
	}
}

func TestReadTSVAndJSONL(t *testing.T) {
	tsv := "The\tDET\ncat\tNOUN\r\n\n\nsat\tVERB\n"
	got, err := readExamples(t, tsv, ReadConfig{Format: TSV})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Tokens: []string{"The", "cat"}, Tags: []string{"DET", "NOUN"}, Line: 1},
		{Tokens: []string{"sat"}, Tags: []string{"VERB"}, Line: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tsv: got %+v\nwant %+v", got, want)
	}
	jsonl := `{"tokens": ["a", "b"], "tags": ["X", "Y"]}` + "\n\n" +
		`{"text": "fmt.Println(x)", "label": "fmt"}` + "\n" +
		`{"tokens": ["go", "vet"], "label": "cmd"}`
	got, err = readExamples(t, jsonl, ReadConfig{Format: JSONL})
	if err != nil {
		t.Fatal(err)
	}
	want = []Example{
		{Tokens: []string{"a", "b"}, Tags: []string{"X", "Y"}, Line: 1},
		{Text: "fmt.Println(x)", Label: "fmt", Line: 3},
		{Tokens: []string{"go", "vet"}, Label: "cmd", Line: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("jsonl: got %+v\nwant %+v", got, want)
	}
}

// Malformed input is a *LineError naming the file, the line and the
// reason, matching ErrMalformed.
func TestMalformedLabelledData(t *testing.T) {
	row := func(id, form, upos string) string { return id + "\t" + form + "\t_\t" + upos + "\t_\t_\t_\t_\t_\t_\n" }
	for _, c := range []struct {
		name   string
		format Format
		text   string
		line   int
		says   string
	}{
		{"conllu/fields", CoNLLU, row("1", "a", "X") + "2\tb\tX\n", 2, "3 fields, want 10"},
		{"conllu/id gap", CoNLLU, row("1", "a", "X") + row("3", "b", "X"), 2, `word ID "3", want 2`},
		{"conllu/id not a number", CoNLLU, row("one", "a", "X"), 1, `word ID "one", want 1`},
		{"conllu/multiword", CoNLLU, row("2-3", "ab", "_"), 1, `multiword token ID "2-3", want 1-N`},
		{"conllu/empty node", CoNLLU, row("1", "a", "X") + row("3.1", "e", "X"), 2, `empty node ID "3.1", want 1.N`},
		{"conllu/empty upos", CoNLLU, row("1", "a", ""), 1, "an empty UPOS"},
		{"conllu/comment inside", CoNLLU, row("1", "a", "X") + "# late\n", 2, "a comment line inside a sentence"},
		{"conllu/only a multiword", CoNLLU, row("1-2", "ab", "_") + "\n", 1, "a sentence of no words"},
		{"conllu/only a multiword, at the end", CoNLLU, "\n" + row("1-1", "a", "_"), 2, "a sentence of no words"},
		{"conllu/utf8", CoNLLU, row("1", "a\xff", "X"), 1, "invalid UTF-8"},
		{"tsv/fields", TSV, "a\tX\nb\n", 2, "1 fields, want 2"},
		{"tsv/empty tag", TSV, "a\t\n", 1, "an empty token or tag"},
		{"jsonl/syntax", JSONL, `{"tokens": ["a"], "tags": ["X"]}` + "\n{\"tokens\": [\n", 2, "unexpected EOF"},
		{"jsonl/lengths", JSONL, `{"tokens": ["a", "b"], "tags": ["X"]}`, 1, "2 tokens and 1 tags"},
		{"jsonl/shape", JSONL, `{"text": "a", "tags": ["X"]}`, 1, `want {"tokens"`},
		{"jsonl/unknown field", JSONL, `{"tokens": ["a"], "tags": ["X"], "id": 3}`, 1, `unknown field "id"`},
		{"jsonl/two values", JSONL, `{"text": "a", "label": "b"} {}`, 1, "more than one JSON value"},
		{"jsonl/empty text", JSONL, `{"text": "", "label": "b"}`, 1, "an empty sequence"},
		{"jsonl/empty label", JSONL, `{"text": "a", "label": ""}`, 1, "an empty label"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readExamples(t, c.text, ReadConfig{Format: c.format})
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want a *LineError", err)
			}
			if le.File != "data" || le.Line != c.line || !strings.Contains(le.Reason, c.says) {
				t.Errorf("error %q (line %d), want line %d saying %q", err, le.Line, c.line, c.says)
			}
		})
	}
}

func TestReadConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  ReadConfig
		says string
	}{
		{"data.txt", ReadConfig{}, "no format given"},
		{"data", ReadConfig{Format: "csv"}, `format "csv"`},
		{"data", ReadConfig{Format: CoNLLU, Column: "lemma"}, `column "lemma"`},
	} {
		if _, err := NewExampleReader(strings.NewReader(""), c.name, 0, c.cfg); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s %+v: %v, want an error saying %q", c.name, c.cfg, err, c.says)
		}
	}
	if FormatOf("a/b.CoNLLU") != CoNLLU || FormatOf("x.jsonl") != JSONL || FormatOf("x.tsv") != TSV || FormatOf("x.csv") != "" {
		t.Error("FormatOf does not read the extensions")
	}
}

// Vocabularies: words by count (ties in byte order) after the reserved
// ids, a minimum count, unseen words unknown; labels in byte order; and
// what Items returns makes the same vocabulary again.
func TestVocabularies(t *testing.T) {
	c := Counts{"the": 3, "cat": 1, "a": 3, "sat": 2}
	w := c.Words(2)
	if got := w.Items(); !reflect.DeepEqual(got, []string{"<pad>", "<unk>", "a", "the", "sat"}) {
		t.Errorf("Words(2) = %v", got)
	}
	if w.ID("the") != 3 || w.ID("cat") != UnknownID || w.ID("<pad>") != UnknownID || w.ID("never") != UnknownID {
		t.Errorf("ids: the %d, cat %d, <pad> %d, never %d", w.ID("the"), w.ID("cat"), w.ID("<pad>"), w.ID("never"))
	}
	again, err := NewWords(w.Items())
	if err != nil || !reflect.DeepEqual(again.Items(), w.Items()) {
		t.Errorf("NewWords(Items()) = %v, %v", again, err)
	}
	for _, bad := range [][]string{nil, {"a", "b"}, {"<pad>", "<unk>", "x", "x"}} {
		if _, err := NewWords(bad); err == nil {
			t.Errorf("NewWords(%q): no error", bad)
		}
	}
	l, err := Counts{"NOUN": 5, "ADJ": 1}.Labels()
	if err != nil || !reflect.DeepEqual(l.Items(), []string{"ADJ", "NOUN"}) {
		t.Fatalf("Labels = %v, %v", l, err)
	}
	if id, ok := l.ID("NOUN"); !ok || id != 1 {
		t.Errorf("ID(NOUN) = %d, %v", id, ok)
	}
	if _, ok := l.ID("VERB"); ok {
		t.Error("ID(VERB) found")
	}
}

// A Dataset indexes the file in one pass: example i read back from its
// offset is the i-th example of a sequential read, with the same line;
// its vocabularies are the data's (or the given ones, a tag outside which
// is an error naming the line).
func TestDataset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.conllu")
	if err := os.WriteFile(path, []byte(conllu), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := OpenDataset(ctx, path, DatasetConfig{MinCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var seq []Example
	if err := ReadExamples(ctx, path, ReadConfig{}, func(ex Example) error { seq = append(seq, ex); return nil }); err != nil {
		t.Fatal(err)
	}
	if d.Len() != len(seq) || d.Len() != 3 || !d.Tagging || d.Tokens() != 7 {
		t.Fatalf("dataset of %d examples (tagging %v, %d tokens), want 3 tagged of 7 tokens", d.Len(), d.Tagging, d.Tokens())
	}
	for _, i := range []int{2, 0, 1} {
		ex, err := d.Example(i)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ex, seq[i]) || d.Length(i) != len(seq[i].Tokens) {
			t.Errorf("example %d: %+v (length %d), want %+v", i, ex, d.Length(i), seq[i])
		}
	}
	if _, err := d.Example(3); err == nil {
		t.Error("Example(3) of 3: no error")
	}
	if got := d.Labels.Items(); !reflect.DeepEqual(got, []string{"ADP", "INTJ", "NOUN", "PRON", "PUNCT", "VERB"}) {
		t.Errorf("labels %v", got)
	}
	// "á" is only in the multiword token "Vámonos", which is not a word.
	if d.Words.Len() != 2+7 || d.Words.ID("mar") == UnknownID || d.Chars.ID("í") == UnknownID || d.Chars.ID("á") != UnknownID {
		t.Errorf("words %v, chars %v", d.Words.Items(), d.Chars.Items())
	}

	given, _ := NewLabels([]string{"NOUN", "VERB"})
	if _, err := OpenDataset(ctx, path, DatasetConfig{Labels: given}); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `train.conllu:4: tag or label "PRON" is not one of the 2 given`) {
		t.Errorf("a tag outside the given labels: %v", err)
	}
	mixed := filepath.Join(t.TempDir(), "mixed.jsonl")
	os.WriteFile(mixed, []byte(`{"tokens": ["a"], "tags": ["X"]}`+"\n"+`{"text": "b", "label": "Y"}`+"\n"), 0o644)
	if _, err := OpenDataset(ctx, mixed, DatasetConfig{}); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "mixed.jsonl:2: a tagged sequence and a labelled one") {
		t.Errorf("a file mixing tagging and labels: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.tsv")
	os.WriteFile(empty, []byte("\n\n"), 0o644)
	if _, err := OpenDataset(ctx, empty, DatasetConfig{}); !errors.Is(err, ErrEmpty) {
		t.Errorf("an empty file: %v, want ErrEmpty", err)
	}
}

// No input makes the readers panic, and every failure is a *LineError.
func FuzzLabelledData(f *testing.F) {
	f.Add(conllu, 0)
	f.Add("The\tDET\ncat\tNOUN\n\nsat\tVERB\n", 1)
	f.Add(`{"tokens": ["a"], "tags": ["X"]}`+"\n"+`{"text": "é", "label": "Y"}`, 2)
	f.Fuzz(func(t *testing.T, text string, format int) {
		formats := []Format{CoNLLU, TSV, JSONL}
		got, err := readExamples(t, text, ReadConfig{Format: formats[(format%3+3)%3]})
		var le *LineError
		if err != nil && !errors.As(err, &le) {
			t.Fatalf("error %v is not a *LineError", err)
		}
		for _, ex := range got {
			if len(ex.Tokens) == 0 && ex.Text == "" || ex.Tags != nil && len(ex.Tags) != len(ex.Tokens) || ex.Line < 1 {
				t.Fatalf("example %+v: no tokens, a tag count unlike the token count, or no line", ex)
			}
		}
	})
}

// TestNewDataset indexes data held in memory: the format comes from the
// name's extension, examples are read back from the reader, and an error
// names the name given.
func TestNewDataset(t *testing.T) {
	ctx := context.Background()
	text := `{"tokens": ["a", "b"], "tags": ["X", "Y"]}` + "\n" + `{"tokens": ["c"], "tags": ["X"]}` + "\n"
	d, err := NewDataset(ctx, strings.NewReader(text), int64(len(text)), "mem.jsonl", DatasetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 || d.Tokens() != 3 || !d.Tagging || d.Labels.Len() != 2 {
		t.Errorf("%d examples, %d tokens, tagging %v, %d tags; want 2, 3, true, 2", d.Len(), d.Tokens(), d.Tagging, d.Labels.Len())
	}
	ex, err := d.Example(1)
	if err != nil || !reflect.DeepEqual(ex.Tokens, []string{"c"}) {
		t.Errorf("example 1 = %+v, %v; want tokens [c]", ex, err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	bad := "{\"tokens\": [\"a\"]}\n"
	if _, err := NewDataset(ctx, strings.NewReader(bad), int64(len(bad)), "mem.jsonl", DatasetConfig{}); err == nil || !strings.Contains(err.Error(), "mem.jsonl") {
		t.Errorf("an example without tags or label: %v, want an error naming mem.jsonl", err)
	}
	if _, err := NewDataset(ctx, strings.NewReader(text), int64(len(text)), "mem.bin", DatasetConfig{}); err == nil {
		t.Error("no format and an unknown extension: no error")
	}
}
