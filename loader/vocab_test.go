package loader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestNewVocabErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chars []string
		want  string // substring of the error
	}{
		{"empty list", nil, "vocabulary is empty"},
		{"empty element", []string{"a", ""}, `element 1 ("") is not exactly one character`},
		{"two characters", []string{"a", "bc"}, `element 1 ("bc") is not exactly one character`},
		{"character and combining mark", []string{"e\u0301"}, "element 0 (\"e\u0301\") is not exactly one character"},
		{"invalid byte", []string{"a", "b", "\xff"}, `element 2 ("\xff") is not valid UTF-8`},
		{"truncated character", []string{"\xe2\x82"}, `element 0 ("\xe2\x82") is not valid UTF-8`},
		{"surrogate", []string{"\xed\xa0\x80"}, `element 0 ("\xed\xa0\x80") is not valid UTF-8`},
		{"valid then garbage", []string{"a\xff"}, `element 0 ("a\xff") is not exactly one character`},
		{"duplicate ASCII", []string{"a", "b", "a"}, `elements 0 and 2 are both "a"`},
		{"duplicate non-ASCII", []string{"é", "😀", "x", "😀"}, `elements 1 and 3 are both "😀"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVocab(tc.chars)
			if err == nil {
				t.Fatalf("got %v, want an error containing %q", v.Strings(), tc.want)
			}
			if !strings.HasPrefix(err.Error(), "loader: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want a loader error containing %q", err, tc.want)
			}
		})
	}
}

func TestVocabRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chars []string
		text  string
	}{
		{"ascii", []string{"\n", " ", "a", "b", "c"}, "abc cab\nba"},
		{"order kept", []string{"z", "a", "m"}, "amz"},
		{"non-ASCII", []string{"é", "a", "中", "😀", "\uFEFF", "\uFFFD", "\U0010FFFF", "\x00", "\x7f"}, "\uFEFFa中é😀\uFFFD\U0010FFFF\x00\x7f"},
		{"single char", []string{"λ"}, "λλλ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVocab(tc.chars)
			if err != nil {
				t.Fatal(err)
			}
			if v.Len() != len(tc.chars) {
				t.Errorf("Len: got %d, want %d", v.Len(), len(tc.chars))
			}
			if got := v.Strings(); !slices.Equal(got, tc.chars) {
				t.Errorf("Strings: got %q, want %q", got, tc.chars)
			}
			for i, c := range tc.chars {
				r := []rune(c)[0]
				if id, ok := v.ID(r); !ok || id != int32(i) {
					t.Errorf("ID(%q): got %d, %v, want %d, true", r, id, ok, i)
				}
				if got := v.Rune(int32(i)); got != r {
					t.Errorf("Rune(%d): got %q, want %q", i, got, r)
				}
			}
			ids, err := v.Encode(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if want := referenceIDs(tc.chars, tc.text, -1); !slices.Equal(ids, want) {
				t.Errorf("Encode(%q): got %v, want %v", tc.text, ids, want)
			}
			if got := v.Decode(ids); got != tc.text {
				t.Errorf("Decode(Encode(%q)): got %q", tc.text, got)
			}
		})
	}
}

func TestVocabMissing(t *testing.T) {
	v, err := NewVocab([]string{"a", "é", "😀"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []rune{'b', 0, 0x7f, 0x80, 'è', 0xFFFF, 0x10000, 0x10FFFF, -1, 0x110000, 1 << 30} {
		if id, ok := v.ID(r); ok {
			t.Errorf("ID(%U): got %d, true, want false", r, id)
		}
	}
	for _, tc := range []struct{ s, want string }{
		{"aéx", `loader: encode: byte 3: character "x" (U+0078) is not in the vocabulary`},
		{"a🚀", `loader: encode: byte 1: character "🚀" (U+1F680) is not in the vocabulary`},
		{"a\xff", "loader: encode: invalid UTF-8 at byte 1"},
	} {
		if ids, err := v.Encode(tc.s); err == nil || err.Error() != tc.want {
			t.Errorf("Encode(%q): got %v, %v, want error %q", tc.s, ids, err, tc.want)
		}
	}
	for _, id := range []int32{-1, 3} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Rune(%d): got no panic, want one", id)
				}
			}()
			v.Rune(id)
		}()
	}
	var zero Vocab
	if _, ok := zero.ID('a'); ok || zero.Len() != 0 {
		t.Errorf("zero Vocab: got a character, want none")
	}
}

// TestVocabLarge covers a vocabulary over the dense table's range: all of
// the Basic Multilingual Plane's non-surrogates in reverse, and astral runes.
func TestVocabLarge(t *testing.T) {
	var chars []string
	for r := rune(0xFFFF); r >= 0; r-- {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		chars = append(chars, string(r))
	}
	for r := rune(0x10000); r <= 0x10FFFF; r += 0x1001 {
		chars = append(chars, string(r))
	}
	v, err := NewVocab(chars)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chars {
		if id, ok := v.ID([]rune(c)[0]); !ok || id != int32(i) {
			t.Fatalf("ID(%U): got %d, %v, want %d, true", []rune(c)[0], id, ok, i)
		}
	}
	if id, ok := v.ID(0x10001); ok {
		t.Errorf("ID(U+10001): got %d, true, want false", id)
	}
}

func ExampleVocab() {
	v, err := NewVocab([]string{"h", "e", "l", "o", "😀"})
	if err != nil {
		panic(err)
	}
	ids, err := v.Encode("hello😀")
	fmt.Println(ids, err)
	fmt.Println(v.Decode([]int32{4, 0, 1}))
	_, err = v.Encode("hi")
	fmt.Println(err)
	// Output:
	// [0 1 2 2 3 4] <nil>
	// 😀he
	// loader: encode: byte 1: character "i" (U+0069) is not in the vocabulary
}
