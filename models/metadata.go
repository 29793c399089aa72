package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/train"
)

// metaPart is one JSON value of a checkpoint's metadata and where to
// decode it.
type metaPart struct {
	key string
	v   any
}

// mismatch is an error wrapping train.ErrMismatch about ck's path.
func mismatch(ck *train.Checkpoint, format string, args ...any) error {
	return fmt.Errorf("models: %s: %w: %s", ck.Path(), train.ErrMismatch, fmt.Sprintf(format, args...))
}

// built is the error of building the model a checkpoint describes: a
// failure of the device (out of memory, a closed device) passes as it is,
// anything else the constructor refused (a config, a vocabulary) is the
// file's, an error wrapping train.ErrMismatch.
func built(ck *train.Checkpoint, err error) error {
	for _, dev := range []error{alloc.ErrOutOfMemory, device.ErrClosed, device.ErrUnavailable} {
		if errors.Is(err, dev) {
			return fmt.Errorf("models: %s: %w", ck.Path(), err)
		}
	}
	return mismatch(ck, "%v", err)
}

// decodeMetadata checks that ck's metadata holds "format" equal to format
// and every part's key, and decodes each part's JSON; name is the kind of
// model, for the message about missing keys. Its errors wrap
// train.ErrMismatch.
func decodeMetadata(ck *train.Checkpoint, name, format string, parts ...metaPart) error {
	meta := ck.Metadata()
	keys := []string{`"format"`}
	var missing []string
	if _, ok := meta["format"]; !ok {
		missing = append(missing, `"format"`)
	}
	for _, p := range parts {
		keys = append(keys, strconv.Quote(p.key))
		if _, ok := meta[p.key]; !ok {
			missing = append(missing, strconv.Quote(p.key))
		}
	}
	if len(missing) > 0 {
		return mismatch(ck, "no %s metadata: a %s checkpoint holds %s (format %q)", strings.Join(missing, ", "), name, strings.Join(keys, ", "), format)
	}
	if f := meta["format"]; f != format {
		return mismatch(ck, "format %q, want %q", f, format)
	}
	for _, p := range parts {
		if err := json.Unmarshal([]byte(meta[p.key]), p.v); err != nil {
			return mismatch(ck, "%s metadata: %v", p.key, err)
		}
	}
	return nil
}
