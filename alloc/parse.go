package alloc

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

const bytesPerMiB = 1 << 20

// knownSettings lists the keys ParseConfig reads, for the unknown-key error.
const knownSettings = "backend, expandable_segments, garbage_collection_threshold, max_non_split_rounding_mb, " +
	"max_split_size_mb, per_process_memory_fraction, pinned_num_register_threads, " +
	"pinned_use_background_threads, pinned_use_cuda_host_register, release_lock_on_cudamalloc, " +
	"roundup_power2_divisions"

// ParseConfig reads a Config from a PYTORCH_CUDA_ALLOC_CONF-style string of
// comma-separated key:value settings, such as
//
//	max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]
//
// and validates it. Whitespace around keys, values and list entries is
// ignored, and so is one trailing comma (as in PyTorch). The empty string is
// the zero Config. The keys, named after PyTorch's, are:
//
//   - max_split_size_mb: MaxSplitSize, a whole number of MiB, at least 20.
//   - max_non_split_rounding_mb: MaxNonSplitRounding, a whole number of
//     MiB, at least 1.
//   - roundup_power2_divisions: RoundupPower2Divisions, either one number
//     for all intervals or a list such as [256:1,512:2,1024:4,>:8]. A list
//     key is a power-of-two size in MiB and selects the interval that starts
//     there (1 selects the first, which takes all sizes below 2 MiB; 32768
//     and above select the last); keys must increase. The first entry also
//     sets every interval below its own, ">" sets every interval after the
//     last listed one (PyTorch's parser starts it at the last listed one),
//     and unlisted intervals stay 0. Every number of divisions is 0 or a
//     power of two.
//   - garbage_collection_threshold: GarbageCollectionThreshold, in (0, 1);
//     it needs per_process_memory_fraction.
//   - per_process_memory_fraction: MemoryFraction, in [0, 1]; 0 means none.
//   - pinned_use_cuda_host_register: PinnedUseHostRegister, True or False.
//   - pinned_num_register_threads: PinnedNumRegisterThreads, a power of two
//     up to 128.
//
// Booleans are exactly True or False, as in PyTorch. PyTorch's remaining
// keys are accepted only at the value gocurrent implements: backend:native,
// expandable_segments:False, release_lock_on_cudamalloc:False and
// pinned_use_background_threads:False; any other value is an error, as are
// unknown keys, a key given twice and malformed syntax. MemoryLimit and
// TraceEntries have no key and are left 0.
func ParseConfig(s string) (Config, error) {
	var c Config
	seen := make(map[string]bool)
	for rest := s; strings.TrimSpace(rest) != ""; {
		key, value, next, err := nextSetting(rest, s)
		if err != nil {
			return Config{}, err
		}
		if seen[key] {
			return Config{}, fmt.Errorf("alloc: allocator setting %q is given twice in %q", key, s)
		}
		seen[key] = true
		if err := c.set(key, value); err != nil {
			return Config{}, err
		}
		rest = next
	}
	// Validate reports this too, but in terms of fields; a string has only
	// one way to set a limit.
	if c.GarbageCollectionThreshold != 0 && c.MemoryFraction == 0 {
		return Config{}, fmt.Errorf("alloc: garbage_collection_threshold:%v needs per_process_memory_fraction: the threshold is a fraction of the memory limit", c.GarbageCollectionThreshold)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// nextSetting splits the first key:value setting off s, the rest of the
// whole string; rest is what follows its comma. A value that starts with
// "[" runs to the first "]".
func nextSetting(s, whole string) (key, value, rest string, err error) {
	i := strings.IndexAny(s, ":,[]")
	if i < 0 || s[i] != ':' {
		text := s
		if j := strings.IndexByte(s, ','); j >= 0 {
			text = s[:j]
		}
		if text = strings.TrimSpace(text); text == "" {
			return "", "", "", fmt.Errorf("alloc: empty allocator setting (a leading comma or two in a row) in %q", whole)
		}
		return "", "", "", fmt.Errorf("alloc: malformed allocator setting %q; want key:value", text)
	}
	key = strings.TrimSpace(s[:i])
	v := strings.TrimLeftFunc(s[i+1:], unicode.IsSpace)
	if key == "" {
		text, _, _ := strings.Cut(s, ",")
		return "", "", "", fmt.Errorf("alloc: allocator setting %q has an empty key", strings.TrimSpace(text))
	}
	if !strings.HasPrefix(v, "[") {
		value, rest, _ = strings.Cut(v, ",")
		return key, strings.TrimSpace(value), rest, nil
	}
	j := strings.IndexByte(v, ']')
	if j < 0 {
		return "", "", "", fmt.Errorf("alloc: %s value %q has an unterminated \"[\"", key, v)
	}
	value = v[:j+1]
	after := strings.TrimLeftFunc(v[j+1:], unicode.IsSpace)
	switch {
	case after == "":
		return key, value, "", nil
	case after[0] == ',':
		return key, value, after[1:], nil
	default:
		junk, _, _ := strings.Cut(after, ",")
		return "", "", "", fmt.Errorf("alloc: %s value %q is followed by %q; want a comma after \"]\"", key, value, strings.TrimSpace(junk))
	}
}

// set applies one setting to c.
func (c *Config) set(key, value string) error {
	if !slices.Contains(strings.Split(knownSettings, ", "), key) {
		return fmt.Errorf("alloc: unknown allocator setting %q; the known settings are %s", key, knownSettings)
	}
	if value == "" {
		return fmt.Errorf("alloc: %s has no value", key)
	}
	switch key {
	case "max_split_size_mb":
		n, err := parseMiB(key, value, LargeBuffer/bytesPerMiB)
		c.MaxSplitSize = n
		return err
	case "max_non_split_rounding_mb":
		n, err := parseMiB(key, value, 1)
		c.MaxNonSplitRounding = n
		return err
	case "roundup_power2_divisions":
		d, err := parseRoundupDivisions(value)
		c.RoundupPower2Divisions = d
		return err
	case "garbage_collection_threshold":
		f, err := parseFraction(key, value)
		if err == nil && !(f > 0 && f < 1) {
			err = fmt.Errorf("alloc: %s:%s is outside (0, 1)", key, value)
		}
		c.GarbageCollectionThreshold = f
		return err
	case "per_process_memory_fraction":
		f, err := parseFraction(key, value)
		if err == nil && !(f >= 0 && f <= 1) {
			err = fmt.Errorf("alloc: %s:%s is outside [0, 1]", key, value)
		}
		if f == 0 {
			f = 0 // not -0
		}
		c.MemoryFraction = f
		return err
	case "pinned_use_cuda_host_register":
		b, err := parseBool(key, value)
		c.PinnedUseHostRegister = b
		return err
	case "pinned_num_register_threads":
		n, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("alloc: %s value %q is not an integer", key, value)
		}
		if n <= 0 || n&(n-1) != 0 || n > maxPinnedRegisterThreads {
			return fmt.Errorf("alloc: %s:%d is not a power of two up to %d", key, n, maxPinnedRegisterThreads)
		}
		c.PinnedNumRegisterThreads = n
		return nil
	case "expandable_segments":
		b, err := parseBool(key, value)
		if err == nil && b {
			err = fmt.Errorf("alloc: %s:True is not supported by gocurrent: expandable segments need CUDA virtual memory management (cuMemCreate, cuMemMap), which the allocator does not use; to limit fragmentation set max_split_size_mb or roundup_power2_divisions instead", key)
		}
		return err
	case "backend":
		switch value {
		case "native":
			return nil
		case "cudaMallocAsync":
			return fmt.Errorf("alloc: %s:%s is not supported by gocurrent; the only backend is native, the caching allocator", key, value)
		default:
			return fmt.Errorf("alloc: unknown %s %q; the only backend is native", key, value)
		}
	case "release_lock_on_cudamalloc":
		b, err := parseBool(key, value)
		if err == nil && b {
			err = fmt.Errorf("alloc: %s:True is not supported by gocurrent: the allocator holds its lock while it asks the Source for memory", key)
		}
		return err
	case "pinned_use_background_threads":
		b, err := parseBool(key, value)
		if err == nil && b {
			err = fmt.Errorf("alloc: %s:True is not supported by gocurrent: the pinned host cache polls no events in the background", key)
		}
		return err
	}
	panic("alloc: setting " + key + " is in knownSettings but not handled")
}

// parseMiB reads a whole number of MiB, at least minimum, and returns it in
// bytes.
func parseMiB(key, value string, minimum int64) (int64, error) {
	// Out of int64's range, ParseInt returns ErrRange with n at the bound
	// of the sign, which the range checks below then report.
	n, err := strconv.ParseInt(value, 10, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("alloc: %s value %q is not a whole number of MiB", key, value)
	case n < minimum:
		return 0, fmt.Errorf("alloc: %s:%s is below the minimum of %d (MiB)", key, value, minimum)
	case n > math.MaxInt64/bytesPerMiB:
		return 0, fmt.Errorf("alloc: %s:%s is too large; the most is %d (MiB)", key, value, int64(math.MaxInt64/bytesPerMiB))
	}
	return n * bytesPerMiB, nil
}

// parseFraction reads a number; the caller checks its range.
func parseFraction(key, value string) (float64, error) {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return 0, fmt.Errorf("alloc: %s value %q is not a number", key, value)
	}
	return f, nil
}

// parseBool reads PyTorch's booleans, which are exactly True and False.
func parseBool(key, value string) (bool, error) {
	switch value {
	case "True":
		return true, nil
	case "False":
		return false, nil
	}
	return false, fmt.Errorf("alloc: %s value %q is not a boolean; want True or False", key, value)
}

// parseRoundupDivisions reads roundup_power2_divisions: one number for all
// intervals, or a bracketed list of size:divisions entries (see
// ParseConfig).
func parseRoundupDivisions(value string) ([roundupIntervals]int, error) {
	const key = "roundup_power2_divisions"
	var d [roundupIntervals]int
	if !strings.HasPrefix(value, "[") {
		n, err := parseDivisions(value)
		for i := range d {
			d[i] = n
		}
		return d, err
	}
	// nextSetting hands over a value that starts with "[" and ends with "]".
	body := value[1 : len(value)-1]
	if strings.TrimSpace(body) == "" {
		return d, nil // "[]": nothing set, as in PyTorch
	}
	entries := strings.Split(body, ",")
	if len(entries) > 1 && strings.TrimSpace(entries[len(entries)-1]) == "" {
		entries = entries[:len(entries)-1] // one trailing comma, as in PyTorch
	}
	last, lastSize := -1, ""
	for k, e := range entries {
		size, divs, ok := strings.Cut(e, ":")
		size, divs = strings.TrimSpace(size), strings.TrimSpace(divs)
		if !ok || size == "" || divs == "" {
			return d, fmt.Errorf("alloc: %s entry %q is not of the form size:divisions", key, strings.TrimSpace(e))
		}
		n, err := parseDivisions(divs)
		if err != nil {
			return d, err
		}
		if size == ">" {
			if k != len(entries)-1 {
				return d, fmt.Errorf("alloc: %s entry \">:%s\" is not the last; \">\" means all remaining intervals", key, divs)
			}
			// ">" sets the intervals after the last listed one: all remaining
			// intervals, as PyTorch documents. PyTorch's parser starts at the
			// last listed interval itself and so overwrites it: in its own
			// example [256:1,512:2,1024:4,>:8] the 1024:4 has no effect there.
			// Config.String writes lists that mean the same under both rules.
			for i := last + 1; i < roundupIntervals; i++ {
				d[i] = n
			}
			continue
		}
		mb, err := strconv.ParseInt(size, 10, 64)
		if err != nil || mb <= 0 || mb&(mb-1) != 0 {
			return d, fmt.Errorf("alloc: %s interval %q is not a power-of-two size in MiB", key, size)
		}
		i := min(bits.Len64(uint64(mb))-1, roundupIntervals-1)
		if i <= last {
			return d, fmt.Errorf("alloc: %s interval %s MiB does not come after %s MiB; intervals must increase (%d MiB and up are all the last interval)",
				key, size, lastSize, 1<<(roundupIntervals-1))
		}
		if last < 0 {
			for j := range i {
				d[j] = n
			}
		}
		d[i] = n
		last, lastSize = i, size
	}
	return d, nil
}

// parseDivisions reads a number of divisions: 0 or a power of two.
func parseDivisions(value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 || n&(n-1) != 0 {
		return 0, fmt.Errorf("alloc: roundup_power2_divisions value %q is not 0 or a power of two", value)
	}
	return n, nil
}

// String formats c as the ParseConfig string that yields it: the settings
// that differ from the zero Config, in a fixed order. ParseConfig(c.String())
// returns c for every valid Config whose MemoryLimit and TraceEntries are 0
// (they have no key and are left out) and whose MaxSplitSize and
// MaxNonSplitRounding are whole MiB (others are written rounded up to whole
// MiB); every Config ParseConfig returns is one.
func (c Config) String() string {
	var parts []string
	add := func(key, value string) { parts = append(parts, key+":"+value) }
	if c.MaxSplitSize != 0 {
		add("max_split_size_mb", strconv.FormatInt(ceilMiB(c.MaxSplitSize), 10))
	}
	if c.MaxNonSplitRounding != 0 {
		add("max_non_split_rounding_mb", strconv.FormatInt(ceilMiB(c.MaxNonSplitRounding), 10))
	}
	if r := formatRoundupDivisions(&c.RoundupPower2Divisions); r != "" {
		add("roundup_power2_divisions", r)
	}
	if c.GarbageCollectionThreshold != 0 {
		add("garbage_collection_threshold", strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if c.MemoryFraction != 0 {
		add("per_process_memory_fraction", strconv.FormatFloat(c.MemoryFraction, 'g', -1, 64))
	}
	if c.PinnedUseHostRegister {
		add("pinned_use_cuda_host_register", "True")
	}
	if c.PinnedNumRegisterThreads != 0 {
		add("pinned_num_register_threads", strconv.Itoa(c.PinnedNumRegisterThreads))
	}
	return strings.Join(parts, ",")
}

func ceilMiB(n int64) int64 {
	q := n / bytesPerMiB
	if n%bytesPerMiB > 0 {
		q++
	}
	return q
}

// formatRoundupDivisions writes d as one number when all intervals are
// equal ("" when that is 0), and otherwise as a list: the first entry is the
// last interval of the leading run (it also sets the ones below it), then
// every non-zero interval after it, and a trailing run of one non-zero value
// is its first interval followed by ">". Because that first interval already
// holds the ">" value, the list means the same under PyTorch's ">" rule,
// which also overwrites the last listed interval.
func formatRoundupDivisions(d *[roundupIntervals]int) string {
	head := 0 // the leading run is d[0..head]
	for head+1 < roundupIntervals && d[head+1] == d[0] {
		head++
	}
	if head == roundupIntervals-1 {
		if d[0] == 0 {
			return ""
		}
		return strconv.Itoa(d[0])
	}
	tail := roundupIntervals - 1 // the trailing run is d[tail..], tail > head
	for d[tail-1] == d[roundupIntervals-1] {
		tail--
	}
	useRest := d[roundupIntervals-1] != 0 && tail < roundupIntervals-1

	var b strings.Builder
	entry := func(i int) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", 1<<i, d[i])
	}
	entry(head)
	for i := head + 1; i < roundupIntervals && !(useRest && i > tail); i++ {
		if d[i] != 0 {
			entry(i)
		}
	}
	if useRest {
		fmt.Fprintf(&b, ",>:%d", d[roundupIntervals-1])
	}
	return "[" + b.String() + "]"
}
