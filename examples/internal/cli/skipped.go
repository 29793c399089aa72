package cli

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gocurrent/gocurrent/loader"
)

// skippedNames is how many names of each reason SkippedMessage lists.
const skippedNames = 3

// SkippedMessage says which files of a directory the corpus left out as
// not text (loader.Corpus.Skipped), for the warning of a command or the
// log of the service: "" for no file, otherwise, for example,
// "skipped 3 files of data that are not text: 2 binary (a.png, b.o), 1
// checkpoint (charrnn.safetensors)".
func SkippedMessage(data string, skipped []loader.SkippedFile) string {
	if len(skipped) == 0 {
		return ""
	}
	var reasons []loader.SkipReason
	names := map[loader.SkipReason][]string{}
	for _, f := range skipped {
		if names[f.Reason] == nil {
			reasons = append(reasons, f.Reason)
		}
		name := f.Path
		if rel, err := filepath.Rel(data, f.Path); err == nil {
			name = rel
		}
		names[f.Reason] = append(names[f.Reason], name)
	}
	slices.Sort(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		n := names[r]
		shown := strings.Join(n[:min(len(n), skippedNames)], ", ")
		if len(n) > skippedNames {
			shown += ", ..."
		}
		parts[i] = fmt.Sprintf("%d %s (%s)", len(n), r, shown)
	}
	files := "files of %s that are"
	if len(skipped) == 1 {
		files = "file of %s that is"
	}
	where := data
	if where == "" {
		where = "the default corpus"
	}
	return fmt.Sprintf("skipped %d "+files+" not text: %s", len(skipped), where, strings.Join(parts, ", "))
}
