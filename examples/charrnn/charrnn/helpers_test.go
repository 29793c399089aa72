// The tests run on the device internal/testdevice names (the CPU by
// default, the CUDA device with GOCURRENT_TEST_DEVICE=cuda): the commands
// get -device testdevice.Spec and Env.CUDA = testdevice.CUDAConfig, so one
// test binary checks the command line on either. Device memory is read
// only through the commands' output and the checkpoints they write. What
// is exact on one device (a resumed run's checkpoint, a sample for a seed)
// is held exact; what compares different arithmetic (PyTorch's, another
// grouping of the same sums) derives its tolerance from float32 rounding
// (charrnntest.RoundingBound). Output that names the device is compared
// with the test device's name. The model itself (PyTorch's checkpoints,
// training steps against PyTorch's) is tested in package models.

package charrnn_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/gocurrent/gocurrent/devices"
	"github.com/gocurrent/gocurrent/examples/charrnn/charrnn"
	"github.com/gocurrent/gocurrent/internal/charrnntest"
	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// fixtures are the files models/testdata/torch_fixture.py writes, which
// the models package tests the model itself against.
const fixtures = charrnntest.Fixtures("../../../models/testdata")

// corpusPath is the fixtures' corpus: 5,949 ASCII characters, 40 distinct.
var corpusPath = fixtures.Corpus()

// testEnv is an Env writing to stdout and stderr with the test device's
// CUDA configuration (its driver and cuBLAS), as main fills it from the
// environment. (A zero Env's nil writers are not enough for Train, Sample,
// Eval and Bench called directly: only Run replaces them with io.Discard.)
func testEnv(t testing.TB, stdout, stderr io.Writer) charrnn.Env {
	t.Helper()
	return charrnn.Env{Stdout: stdout, Stderr: stderr, CUDA: testdevice.CUDAConfig(t)}
}

// run runs the command line args with testEnv and returns its stdout and
// stderr. The command line names its device: -device testdevice.Spec(t).
func run(t testing.TB, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = charrnn.Run(ctx, args, testEnv(t, &o, &e))
	return o.String(), e.String(), err
}

// deviceName is the test device's Name, which the commands print ("cpu",
// "cuda:0").
func deviceName(t testing.TB) string {
	t.Helper()
	d, err := devices.Open(testdevice.Spec(t), devices.Config{CUDA: testdevice.CUDAConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Name()
}

// smallTrain is a train command line on the test device for a model small
// enough to train on the fixture corpus in well under a second a step on
// the CPU; extra flags follow it and override it (the flag package keeps
// the last value).
func smallTrain(t testing.TB, ckpt string, extra ...string) []string {
	t.Helper()
	return append([]string{"train", "-data", corpusPath, "-device", testdevice.Spec(t), "-cell", "lstm",
		"-embed", "16", "-hidden", "32", "-layers", "2", "-seq", "16",
		"-val-frac", "0", "-sample", "0", "-checkpoint", ckpt}, extra...)
}

// saveWeights loads the checkpoint from and writes its weights alone to
// to, with the model's metadata changed by meta (a "" value deletes a key).
func saveWeights(t *testing.T, from, to string, meta map[string]string) {
	t.Helper()
	d := testdevice.Open(t)
	m, _, err := models.LoadCharRNN(context.Background(), d, from)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	md := m.Metadata()
	for k, v := range meta {
		if v == "" {
			delete(md, k)
		} else {
			md[k] = v
		}
	}
	if err := train.SaveWeights(to, d, m.Groups(), md); err != nil {
		t.Fatal(err)
	}
}
