//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/internal/testdevice"
	"github.com/gocurrent/gocurrent/loader"
	"github.com/gocurrent/gocurrent/models"
	"github.com/gocurrent/gocurrent/train"
)

// TestMain runs the command itself when the test binary is started as a
// child by TestSignals, so the test needs no go build.
func TestMain(m *testing.M) {
	if os.Getenv("CHARRNN_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestSignals: SIGTERM and SIGHUP, like SIGINT, let training finish its
// step, save the checkpoint and exit with 128 + the signal's number.
// Before, SIGTERM and SIGHUP killed the process and nothing was saved.
func TestSignals(t *testing.T) {
	corpus, err := filepath.Abs("../../models/testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "run.safetensors")
			cmd := exec.Command(os.Args[0], "train", "-data", corpus, "-device", "cpu", "-embed", "8", "-hidden", "16",
				"-layers", "1", "-batch", "2", "-seq", "8", "-steps", "1000000", "-val-frac", "0", "-log-every", "1",
				"-sample", "0", "-json", "-checkpoint", ckpt)
			cmd.Env = append(os.Environ(), "CHARRNN_TEST_MAIN=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(out)
			for lines.Scan() { // the first step is taken
				if strings.Contains(lines.Text(), `"event":"step"`) {
					break
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var done string
			for lines.Scan() {
				if strings.Contains(lines.Text(), `"event":"done"`) {
					done = lines.Text()
				}
			}
			timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
			defer timer.Stop()
			err = cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) {
				t.Errorf("after %v the command ended with %v, want exit status %d", sig, err, 128+int(sig))
			}
			if !strings.Contains(done, `"stopped":true`) {
				t.Errorf("after %v no done event with stopped true (got %q)", sig, done)
			}
			if _, err := train.ReadCheckpoint(ckpt); err != nil {
				t.Errorf("after %v no checkpoint: %v", sig, err)
			}
		})
	}
}

// TestErrorExit: a bad flag exits with status 2, another failure with 1,
// and each message carries one "charrnn: " prefix (an error the package
// had prefixed itself used to read "charrnn: charrnn: ...").
func TestErrorExit(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte("outside the vocabulary: é"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"train", "-accum", "0"}, 2, "-accum 0"},
		{[]string{"eval", "-device", "cpu", "-checkpoint", "../../models/testdata/torch_lstm.safetensors", "-data", text}, 1, "-unknown"},
	} {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), "CHARRNN_TEST_MAIN=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.status {
			t.Errorf("%v ended with %v, want exit status %d", c.args, err, c.status)
		}
		if msg := stderr.String(); !strings.HasPrefix(msg, "charrnn: ") || strings.Contains(msg, "charrnn: charrnn:") || !strings.Contains(msg, c.says) {
			t.Errorf("%v: stderr %q, want one charrnn: prefix and %q", c.args, msg, c.says)
		}
	}
}

// TestOtherModelExit: sample given a tagger's checkpoint says so in one
// line and exits with status 1; it used to print a paragraph about the
// metadata a file PyTorch wrote must add (issue 46, item 9).
func TestOtherModelExit(t *testing.T) {
	d := testdevice.Open(t)
	words, err := loader.NewWords([]string{"<pad>", "<unk>", "the", "cat"})
	if err != nil {
		t.Fatal(err)
	}
	tags, err := loader.NewLabels([]string{"DET", "NOUN"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewTagger(context.Background(), d, models.TaggerConfig{Cell: "lstm", Embed: 3, Hidden: 4, Layers: 1}, words, tags, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	path := filepath.Join(t.TempDir(), "tagger.safetensors")
	if err := train.SaveWeights(path, d, m.Groups(), m.Metadata()); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "sample", "-device", "cpu", "-checkpoint", path)
	cmd.Env = append(os.Environ(), "CHARRNN_TEST_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("sample of a tagger checkpoint ended with %v, want exit status 1", err)
	}
	want := "charrnn: models: " + path + " is a tagger checkpoint (format gocurrent.tagger/1), not a char-RNN one (gocurrent.charrnn/1)\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stderr %q, stdout %q; want stderr %q and nothing on stdout", stderr.String(), stdout.String(), want)
	}
}

// TestJSONErrorExit: with -json the command's error is one JSON object on
// stdout, with the exit status, and stderr stays empty.
func TestJSONErrorExit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "train", "-accum", "0", "-json")
	cmd.Env = append(os.Environ(), "CHARRNN_TEST_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("ended with %v, want exit status 2", err)
	}
	var ev struct {
		Event      string `json:"event"`
		Error      string `json:"error"`
		ExitStatus int    `json:"exit_status"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &ev); err != nil || ev.Event != "error" || ev.ExitStatus != 2 ||
		!strings.Contains(ev.Error, "-accum 0") || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("stdout %q (%v), want one error event with exit_status 2 naming -accum 0", stdout.String(), err)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing with -json", stderr.String())
	}
}
