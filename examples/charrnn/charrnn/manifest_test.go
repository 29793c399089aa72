package charrnn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
)

// TestManifests checks that the Kubernetes manifests in ../k8s run
// command lines this program accepts: their train flags parse and pass
// every check before the device opens (run here with -device cuda:7, a
// GPU this machine lacks, and the checkpoint in a temporary directory:
// the error is opening it, not a usage error), under the launcher's variables
// each sets (mpirun's for the MPIJob, torchrun's for the PyTorchJob).
func TestManifests(t *testing.T) {
	for _, c := range []struct {
		file string
		env  map[string]string
	}{
		{"mpijob.yaml", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}},
		{"pytorchjob.yaml", map[string]string{"RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "charrnn-gpu-master-0", "MASTER_PORT": "23456"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("..", "k8s", c.file))
			if err != nil {
				t.Fatal(err)
			}
			args := manifestArgs(t, string(text))
			dir := t.TempDir()
			for i, a := range args {
				args[i] = strings.ReplaceAll(a, "/checkpoints", dir)
			}
			env := testEnv(t, nil, nil)
			env.Getenv = func(k string) string { return c.env[k] }
			err = charrnn.Run(context.Background(), append(args, "-device", "cuda:7"), env)
			if err == nil || errors.Is(err, charrnn.ErrUsage) {
				t.Fatalf("%v: got %v, want the device cuda:7 failing to open, and no usage error", args, err)
			}
		})
	}
}

// manifestArgs is the charrnn command line of a manifest: the words after
// /usr/local/bin/charrnn, in a YAML list one per line or in a flow list.
func manifestArgs(t *testing.T, text string) []string {
	t.Helper()
	if m := regexp.MustCompile(`"/usr/local/bin/charrnn",([^\]]*)\]`).FindStringSubmatch(text); m != nil {
		var out []string
		for _, w := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
			out = append(out, w[1])
		}
		return out
	}
	_, after, ok := strings.Cut(text, "- /usr/local/bin/charrnn\n")
	if !ok {
		t.Fatal("no charrnn command line in the manifest")
	}
	var out []string
	for _, line := range strings.Split(after, "\n") {
		w, ok := strings.CutPrefix(strings.TrimSpace(line), "- ")
		if !ok {
			break
		}
		out = append(out, strings.Trim(w, `"`))
	}
	return out
}
