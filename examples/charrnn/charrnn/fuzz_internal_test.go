package charrnn

import (
	"errors"
	"strings"
	"testing"
)

// No command line makes parsing and checking panic, and every error it
// gives is a usage error, which Report prints without panicking either.
// The target runs only parseCommandLine, which does no work: a valid
// command line is parsed, not run.
func FuzzCommandLine(f *testing.F) {
	for _, args := range []string{
		"train -accum 0",
		"train -batch 0 -seq 0",
		"train -sample -1 -val-tokens -1",
		"train -temperature NaN -prime x",
		"train -plot x.png -checkpoint y -force",
		"train -init a -resume b",
		"train -schedule cosine -epochs 2",
		"sample -n -1 -top-k -1 -temperature Inf",
		"eval -batch 0 -seq 1 -device cuda:7",
		"bench -steps 0 -n 0 -cell gru",
		"help",
		"frobnicate -x",
		"train -json -resume",
		"sample -prime -json",
	} {
		f.Add(strings.ReplaceAll(args, " ", "\x00"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		_, err := parseCommandLine(args, Env{})
		if err != nil && !errors.Is(err, ErrUsage) {
			t.Errorf("%q: error %v, want one wrapping ErrUsage", args, err)
		}
		if err != nil {
			Report(Env{}, args, err, 2)
		}
	})
}
