package alloc_test

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// Strings from PyTorch's test/test_cuda.py @ 000e43cd
// (test_allocator_settings and its neighbours), as listed in
// docs/research/allocator.md §5 item 3. PyTorch accepts the first and
// rejects the others.
const (
	pytorchAccepted = "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"
	// Our Validate refuses a GC threshold without a memory limit, which
	// PyTorch silently ignores (pytorch issue #106660), so the accepted
	// string gets a fraction.
	pytorchAcceptedWithLimit = pytorchAccepted + ",per_process_memory_fraction:0.9"
)

var pytorchRejected = []string{
	"foo:1,bar:2",
	"garbage_collection_threshold:1.2",
	"max_split_size_mb:2",
	"release_lock_on_cudamalloc:none",
	"pinned_num_register_threads:1024",
}

// The example list from PyTorch's docs/source/notes/cuda.rst @ 68e217b9.
const pytorchDocsList = "[256:1,512:2,1024:4,>:8]"

func TestParseConfigAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want alloc.Config
	}{
		{"empty", "", alloc.Config{}},
		{"blank", " \t ", alloc.Config{}},
		{
			name: "pytorch test string",
			in:   pytorchAcceptedWithLimit,
			want: alloc.Config{
				// Interval i holds sizes in [2^i, 2^(i+1)) MiB, so a list key
				// of 2^k MiB selects interval k: 64 -> 6, 128 -> 7, 256 -> 8,
				// 512 -> 9, 1024 -> 10. The first entry, 64:8, also fills
				// intervals 0-5 with 8; ">:1" fills 11-15.
				RoundupPower2Divisions:     [16]int{8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 1, 1, 1, 1, 1, 1},
				GarbageCollectionThreshold: 0.5,
				MemoryFraction:             0.9,
			},
		},
		{
			name: "pytorch docs list",
			in:   "roundup_power2_divisions:" + pytorchDocsList,
			// 256 -> interval 8, which with 0-7 gets 1; 512 -> 9 gets 2;
			// 1024 -> 10 gets 4; ">:8" fills 11-15. (PyTorch's own parser
			// starts ">" at interval 10 and so sets it to 8, not 4.)
			want: alloc.Config{RoundupPower2Divisions: [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}},
		},
		{
			name: "list keys clamp to the first and last interval",
			in:   "roundup_power2_divisions:[1:2,65536:4]",
			// 1 = 2^0 -> interval 0; 65536 = 2^16 -> 16, clamped to 15.
			want: alloc.Config{RoundupPower2Divisions: [16]int{0: 2, 15: 4}},
		},
		{
			name: "rest only",
			in:   "roundup_power2_divisions:[>:2]",
			want: alloc.Config{RoundupPower2Divisions: [16]int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		},
		{"empty list", "roundup_power2_divisions:[]", alloc.Config{}},
		{
			name: "trailing comma in list",
			in:   "roundup_power2_divisions:[2:4,]",
			want: alloc.Config{RoundupPower2Divisions: [16]int{4, 4}},
		},
		{
			name: "single number",
			in:   "roundup_power2_divisions:4",
			want: alloc.Config{RoundupPower2Divisions: [16]int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
		},
		{"single zero", "roundup_power2_divisions:0", alloc.Config{}},
		// 20 MiB is PyTorch's minimum (kLargeBuffer / kMB).
		{"split minimum", "max_split_size_mb:20", alloc.Config{MaxSplitSize: 20 * mib}},
		{"split", "max_split_size_mb:128", alloc.Config{MaxSplitSize: 128 * mib}},
		{"non-split rounding minimum", "max_non_split_rounding_mb:1", alloc.Config{MaxNonSplitRounding: 1 * mib}},
		{
			name: "whitespace and trailing comma",
			in:   "  max_split_size_mb : 40 , roundup_power2_divisions : [ 64 : 8 , > : 2 ] , ",
			want: alloc.Config{
				MaxSplitSize:           40 * mib,
				RoundupPower2Divisions: [16]int{8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2},
			},
		},
		{"fraction one", "per_process_memory_fraction:1", alloc.Config{MemoryFraction: 1}},
		{"fraction zero means none", "per_process_memory_fraction:0", alloc.Config{}},
		{
			name: "gc threshold with fraction",
			in:   "per_process_memory_fraction:0.75,garbage_collection_threshold:0.6",
			want: alloc.Config{GarbageCollectionThreshold: 0.6, MemoryFraction: 0.75},
		},
		{
			name: "unsupported features off",
			in:   "backend:native,expandable_segments:False,release_lock_on_cudamalloc:False,pinned_use_background_threads:False,pinned_use_cuda_host_register:False",
			want: alloc.Config{},
		},
		{
			// 8 threads: "a good value" per PyTorch's notes/cuda.rst.
			name: "pinned",
			in:   "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
			want: alloc.Config{PinnedUseHostRegister: true, PinnedNumRegisterThreads: 8},
		},
		{"pinned threads minimum", "pinned_num_register_threads:1", alloc.Config{PinnedNumRegisterThreads: 1}},
		// 128 is PyTorch's pinned_max_register_threads.
		{"pinned threads maximum", "pinned_num_register_threads:128", alloc.Config{PinnedNumRegisterThreads: 128}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := alloc.ParseConfig(tt.in)
			if err != nil {
				t.Fatalf("ParseConfig(%q): got error %v, want none", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseConfig(%q):\ngot  %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		// PyTorch's rejections.
		{"pytorch unknown keys", pytorchRejected[0], []string{`unknown allocator setting "foo"`, "max_split_size_mb", "roundup_power2_divisions"}},
		{"pytorch gc threshold", pytorchRejected[1], []string{"garbage_collection_threshold", "1.2", "(0, 1)"}},
		{"pytorch split too small", pytorchRejected[2], []string{"max_split_size_mb", "2", "minimum of 20"}},
		{"pytorch lock not boolean", pytorchRejected[3], []string{"release_lock_on_cudamalloc", `"none"`, "not a boolean"}},
		{"pytorch too many threads", pytorchRejected[4], []string{"pinned_num_register_threads", "1024", "128"}},

		// Sizes.
		{"split not a number", "max_split_size_mb:abc", []string{"max_split_size_mb", `"abc"`}},
		{"split fractional", "max_split_size_mb:20.5", []string{"max_split_size_mb", `"20.5"`}},
		{"split just below", "max_split_size_mb:19", []string{"max_split_size_mb:19", "minimum of 20"}},
		{"split negative", "max_split_size_mb:-20", []string{"max_split_size_mb:-20", "minimum"}},
		{"split beyond int64", "max_split_size_mb:99999999999999999999", []string{"max_split_size_mb", "too large"}},
		{"split below int64", "max_split_size_mb:-99999999999999999999", []string{"max_split_size_mb", "minimum"}},
		// 2^43 MiB is 2^63 bytes, one past the largest int64.
		{"split bytes overflow", "max_split_size_mb:8796093022208", []string{"max_split_size_mb", "too large", "8796093022207"}},
		{"non-split rounding zero", "max_non_split_rounding_mb:0", []string{"max_non_split_rounding_mb:0", "minimum of 1"}},
		{"no value", "max_split_size_mb:", []string{"max_split_size_mb", "no value"}},
		{"twice", "max_split_size_mb:20, max_split_size_mb:40", []string{`"max_split_size_mb" is given twice`}},

		// Fractions.
		{"gc zero", "garbage_collection_threshold:0,per_process_memory_fraction:0.5", []string{"garbage_collection_threshold:0", "(0, 1)"}},
		{"gc one", "garbage_collection_threshold:1,per_process_memory_fraction:0.5", []string{"garbage_collection_threshold:1", "(0, 1)"}},
		{"gc NaN", "garbage_collection_threshold:NaN,per_process_memory_fraction:0.5", []string{"garbage_collection_threshold:NaN"}},
		{"gc not a number", "garbage_collection_threshold:half", []string{"garbage_collection_threshold", `"half"`, "not a number"}},
		{"gc without fraction", "garbage_collection_threshold:0.5", []string{"garbage_collection_threshold", "per_process_memory_fraction"}},
		{"fraction above one", "per_process_memory_fraction:1.5", []string{"per_process_memory_fraction:1.5", "[0, 1]"}},
		{"fraction negative", "per_process_memory_fraction:-0.1", []string{"per_process_memory_fraction:-0.1", "[0, 1]"}},

		// Unsupported features and booleans.
		{"expandable segments", "expandable_segments:True", []string{"expandable_segments", "not supported", "virtual memory", "max_split_size_mb", "roundup_power2_divisions"}},
		{"lowercase boolean", "expandable_segments:true", []string{"expandable_segments", `"true"`, "True or False"}},
		{"async backend", "backend:cudaMallocAsync", []string{"backend:cudaMallocAsync", "not supported"}},
		{"unknown backend", "backend:foo", []string{"backend", `"foo"`, "native"}},
		{"release lock", "release_lock_on_cudamalloc:True", []string{"release_lock_on_cudamalloc", "not supported", "lock"}},
		{"background threads", "pinned_use_background_threads:True", []string{"pinned_use_background_threads", "not supported"}},
		{"host register not boolean", "pinned_use_cuda_host_register:1", []string{"pinned_use_cuda_host_register", `"1"`, "not a boolean"}},
		{"threads zero", "pinned_num_register_threads:0", []string{"pinned_num_register_threads:0", "power of two"}},
		{"threads not power of two", "pinned_num_register_threads:3", []string{"pinned_num_register_threads:3", "power of two"}},
		{"threads not a number", "pinned_num_register_threads:x", []string{"pinned_num_register_threads", `"x"`}},

		// roundup_power2_divisions.
		{"divisions not power of two", "roundup_power2_divisions:3", []string{"roundup_power2_divisions", `"3"`}},
		{"divisions negative", "roundup_power2_divisions:-2", []string{"roundup_power2_divisions", `"-2"`}},
		{"list value not power of two", "roundup_power2_divisions:[64:3]", []string{"roundup_power2_divisions", `"3"`}},
		{"list key not power of two", "roundup_power2_divisions:[63:2]", []string{"roundup_power2_divisions", `"63"`, "power-of-two"}},
		{"list key zero", "roundup_power2_divisions:[0:2]", []string{"roundup_power2_divisions", `"0"`}},
		{"list keys decrease", "roundup_power2_divisions:[128:2,64:4]", []string{"roundup_power2_divisions", "64 MiB does not come after 128 MiB"}},
		{"list keys repeat", "roundup_power2_divisions:[64:2,64:4]", []string{"roundup_power2_divisions", "64 MiB does not come after 64 MiB"}},
		{"list keys share last interval", "roundup_power2_divisions:[32768:2,65536:4]", []string{"roundup_power2_divisions", "65536 MiB does not come after 32768 MiB"}},
		{"rest not last", "roundup_power2_divisions:[>:2,64:4]", []string{"roundup_power2_divisions", `">:2"`, "not the last"}},
		{"list entry without colon", "roundup_power2_divisions:[64]", []string{"roundup_power2_divisions", `"64"`, "size:divisions"}},
		{"list empty entry", "roundup_power2_divisions:[64:8,,128:2]", []string{"roundup_power2_divisions", `entry ""`}},
		{"list only comma", "roundup_power2_divisions:[,]", []string{"roundup_power2_divisions", `entry ""`}},
		{"unterminated list", "roundup_power2_divisions:[64:8,128:2", []string{"roundup_power2_divisions", `"[64:8,128:2"`, `unterminated "["`}},
		{"junk after list", "roundup_power2_divisions:[64:8] x,max_split_size_mb:20", []string{"roundup_power2_divisions", `"x"`}},
		{"bracket after list", "roundup_power2_divisions:[64:8]]", []string{"roundup_power2_divisions", `"]"`}},

		// Syntax.
		{"missing colon", "max_split_size_mb", []string{`malformed allocator setting "max_split_size_mb"`}},
		{"space instead of colon", "max_split_size_mb 20,backend:native", []string{`"max_split_size_mb 20"`, "key:value"}},
		{"bracket in key", "max_split[:20", []string{`"max_split[:20"`}},
		{"empty key", " :20", []string{`":20"`, "empty key"}},
		{"leading comma", ",max_split_size_mb:20", []string{"empty allocator setting"}},
		{"two commas", "max_split_size_mb:20,,backend:native", []string{"empty allocator setting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := alloc.ParseConfig(tt.in)
			if err == nil {
				t.Fatalf("ParseConfig(%q): got %+v and no error, want an error", tt.in, got)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "alloc: ") {
				t.Errorf("ParseConfig(%q): got error %q, want the prefix \"alloc: \"", tt.in, msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("ParseConfig(%q): got error %q, want it to contain %q", tt.in, msg, w)
				}
			}
			if got != (alloc.Config{}) {
				t.Errorf("ParseConfig(%q): got %+v with the error, want the zero Config", tt.in, got)
			}
		})
	}
}

func TestConfigString(t *testing.T) {
	tests := []struct {
		name string
		c    alloc.Config
		want string
	}{
		{"zero", alloc.Config{}, ""},
		{
			name: "pytorch test string",
			c: alloc.Config{
				RoundupPower2Divisions:     [16]int{8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 1, 1, 1, 1, 1, 1},
				GarbageCollectionThreshold: 0.5,
				MemoryFraction:             0.9,
			},
			// The list comes out as PyTorch's own: it ends with the first
			// interval of the trailing run, then ">".
			want: "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1],garbage_collection_threshold:0.5,per_process_memory_fraction:0.9",
		},
		{
			name: "pytorch docs list",
			c:    alloc.Config{RoundupPower2Divisions: [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}},
			// 2048:8 keeps 1024:4 in force under PyTorch's ">" rule too.
			want: "roundup_power2_divisions:[256:1,512:2,1024:4,2048:8,>:8]",
		},
		{
			name: "every field with a key",
			c: alloc.Config{
				MaxSplitSize:               40 * mib,
				MaxNonSplitRounding:        64 * mib,
				RoundupPower2Divisions:     [16]int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4},
				GarbageCollectionThreshold: 0.8,
				MemoryFraction:             1,
				PinnedUseHostRegister:      true,
				PinnedNumRegisterThreads:   8,
			},
			want: "max_split_size_mb:40,max_non_split_rounding_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.8," +
				"per_process_memory_fraction:1,pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
		},
		{
			name: "leading zeros",
			c:    alloc.Config{RoundupPower2Divisions: [16]int{0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
			want: "roundup_power2_divisions:[4:0,8:4,>:4]",
		},
		{
			name: "first interval only",
			c:    alloc.Config{RoundupPower2Divisions: [16]int{0: 2}},
			want: "roundup_power2_divisions:[1:2]",
		},
		{
			name: "last interval only",
			c:    alloc.Config{RoundupPower2Divisions: [16]int{15: 8}},
			want: "roundup_power2_divisions:[16384:0,32768:8]",
		},
		{
			name: "gaps",
			c:    alloc.Config{RoundupPower2Divisions: [16]int{1, 1, 0, 4, 0, 0, 16, 0, 0, 0, 0, 0, 0, 2, 2, 2}},
			want: "roundup_power2_divisions:[2:1,8:4,64:16,8192:2,>:2]",
		},
		{
			name: "smallest fraction",
			c:    alloc.Config{GarbageCollectionThreshold: 1e-300, MemoryFraction: 0.1},
			want: "garbage_collection_threshold:1e-300,per_process_memory_fraction:0.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Validate(); err != nil {
				t.Fatalf("test config is invalid: %v", err)
			}
			s := tt.c.String()
			if s != tt.want {
				t.Errorf("String():\ngot  %s\nwant %s", s, tt.want)
			}
			back, err := alloc.ParseConfig(s)
			if err != nil {
				t.Fatalf("ParseConfig(%q): got error %v, want none", s, err)
			}
			if back != tt.c {
				t.Errorf("ParseConfig(%q):\ngot  %+v\nwant %+v", s, back, tt.c)
			}
		})
	}
}

// TestConfigStringWithoutKeys covers what the string cannot express: sizes
// that are not whole MiB, and the fields that have no key.
func TestConfigStringWithoutKeys(t *testing.T) {
	c := alloc.Config{
		MaxSplitSize:        20*mib + 1,
		MaxNonSplitRounding: 512,
		MemoryLimit:         1 << 30,
		TraceEntries:        100,
	}
	const want = "max_split_size_mb:21,max_non_split_rounding_mb:1"
	if got := c.String(); got != want {
		t.Errorf("String(): got %q, want %q", got, want)
	}
}

// TestConfigStringRoundupRoundTrip formats many division arrays, made of runs
// as real settings are, and checks that ParseConfig reads each back, and
// that PyTorch's reading of the same list (which starts ">" at the last
// listed interval rather than after it) agrees.
func TestConfigStringRoundupRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same arrays every run
	values := []int{0, 1, 2, 8}
	for range 20000 {
		var c alloc.Config
		d := &c.RoundupPower2Divisions
		for i := range d {
			if i > 0 && rng.IntN(3) > 0 {
				d[i] = d[i-1]
			} else {
				d[i] = values[rng.IntN(len(values))]
			}
		}
		s := c.String()
		back, err := alloc.ParseConfig(s)
		if err != nil {
			t.Fatalf("ParseConfig(%q) for %v: got error %v, want none", s, *d, err)
		}
		if back != c {
			t.Fatalf("ParseConfig(%q): got %v, want %v", s, back.RoundupPower2Divisions, *d)
		}
		if list, ok := strings.CutPrefix(s, "roundup_power2_divisions:["); ok {
			if got := pytorchRoundupList(t, strings.TrimSuffix(list, "]")); got != *d {
				t.Fatalf("PyTorch's reading of %q: got %v, want %v", s, got, *d)
			}
		}
	}
}

// pytorchRoundupList applies the entries of a roundup_power2_divisions list
// the way PyTorch's parseRoundUpPower2Divisions does
// (c10/core/AllocatorConfig.cpp @ 065861fb): the first entry also fills the
// intervals below it, and ">" fills from the last listed interval on.
func pytorchRoundupList(t *testing.T, list string) [16]int {
	t.Helper()
	var d [16]int
	first, last := true, 0
	for _, e := range strings.Split(list, ",") {
		key, value, _ := strings.Cut(e, ":")
		n, err := strconv.Atoi(value)
		if err != nil {
			t.Fatalf("list %q: entry %q: %v", list, e, err)
		}
		if key == ">" {
			for i := last; i < len(d); i++ {
				d[i] = n
			}
			continue
		}
		size, err := strconv.ParseUint(key, 10, 64)
		if err != nil {
			t.Fatalf("list %q: entry %q: %v", list, e, err)
		}
		i := min(bits.Len64(size)-1, len(d)-1)
		if first {
			for j := range i {
				d[j] = n
			}
			first = false
		}
		d[i] = n
		last = i
	}
	return d
}

func FuzzParseConfig(f *testing.F) {
	f.Add("")
	f.Add(pytorchAccepted)
	f.Add(pytorchAcceptedWithLimit)
	f.Add("roundup_power2_divisions:" + pytorchDocsList)
	for _, s := range pytorchRejected {
		f.Add(s)
	}
	f.Add("max_split_size_mb:abc")
	f.Add("  max_split_size_mb : 40 , roundup_power2_divisions : [ 64 : 8 , > : 2 ] , ")
	f.Add("max_non_split_rounding_mb:1,pinned_use_cuda_host_register:True,pinned_num_register_threads:8")
	f.Add("backend:native,expandable_segments:False,release_lock_on_cudamalloc:False,pinned_use_background_threads:False")
	f.Add("expandable_segments:True")
	f.Add("roundup_power2_divisions:[1:2,65536:4]")
	f.Add("roundup_power2_divisions:[64:8")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := alloc.ParseConfig(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "alloc: ") {
				t.Errorf("ParseConfig(%q): got error %q, want the prefix \"alloc: \"", s, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig(%q) = %+v, which fails Validate: %v", s, c, err)
		}
		canon := c.String()
		back, err := alloc.ParseConfig(canon)
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %+v; ParseConfig of its String %q: got error %v, want none", s, c, canon, err)
		}
		if back != c {
			t.Fatalf("ParseConfig(%q) = %+v; ParseConfig of its String %q: got %+v", s, c, canon, back)
		}
		if again := back.String(); again != canon {
			t.Fatalf("String is not stable: got %q, want %q", again, canon)
		}
	})
}

func ExampleParseConfig() {
	// The list is the example from PyTorch's notes on
	// PYTORCH_CUDA_ALLOC_CONF.
	c, err := alloc.ParseConfig("max_split_size_mb:128, roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.MaxSplitSize>>20, "MiB")
	fmt.Println(c.RoundupPower2Divisions)
	fmt.Println(c)

	_, err = alloc.ParseConfig("max_split_size_mb:2")
	fmt.Println(err)
	// Output:
	// 128 MiB
	// [1 1 1 1 1 1 1 1 1 2 4 8 8 8 8 8]
	// max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,2048:8,>:8]
	// alloc: max_split_size_mb:2 is below the minimum of 20 (MiB)
}
