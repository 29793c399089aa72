package seqcli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gocurrent/gocurrent/examples/internal/godata"
)

// checkpoint is the checkpoint train writes by default, which eval and
// predict read by default.
func (t Task) checkpoint() string {
	if t == Classification {
		return "classifier.safetensors"
	}
	return "tagger.safetensors"
}

// defaultData writes (once) and returns the default data of task: Go
// tokens of the standard library tagged with their syntactic role, or
// functions of it labelled with the part of the library they come from
// (package godata), derived from GOROOT/src.
func defaultData(ctx context.Context, task Task, env Env) (dataFiles, error) {
	dir := env.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return dataFiles{}, fmt.Errorf("no cache directory for the default data (%v); pass -data", err)
		}
		dir = filepath.Join(base, "gocurrent")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dataFiles{}, fmt.Errorf("the default data's directory: %w; pass -data", err)
	}
	kind := godata.Tagging
	if task == Classification {
		kind = godata.Classification
	}
	files, err := godata.Write(ctx, env.GOROOT, dir, kind)
	if err != nil {
		return dataFiles{}, err
	}
	return dataFiles{train: files.Train.Path, val: files.Validation.Path, isDefault: true}, nil
}
