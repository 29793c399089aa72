//go:build linux

package loader_test

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gocurrent/gocurrent/loader"
)

// writeCorpus writes mb MiB of text (English-like words with some
// multi-byte characters) to a file in dir.
func writeCorpus(b *testing.B, dir string, mb int) string {
	b.Helper()
	path := filepath.Join(dir, fmt.Sprintf("corpus-%dmb.txt", mb))
	f, err := os.Create(path)
	must(b, err)
	w := bufio.NewWriterSize(f, 1<<20)
	words := []string{"the ", "recurrent ", "network ", "learns ", "über ", "naïve ", "→ ", "data\n", "of ", "a "}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < mb<<20; {
		k, _ := w.WriteString(words[r.IntN(len(words))])
		n += k
	}
	must(b, w.Flush())
	must(b, f.Close())
	return path
}

// BenchmarkLoad measures tokens per second from a file on disk to device
// batches on the test device (the CPU unless GOCURRENT_TEST_DEVICE names another) (char-RNN shapes: batch 32, sequence 64), the
// consumer doing nothing but take the batches.
func BenchmarkLoad(b *testing.B) {
	d := openDevice(b)
	path := writeCorpus(b, b.TempDir(), 8)
	c, err := loader.Open(path)
	must(b, err)
	defer c.Close()
	text, err := loader.Tokenize(context.Background(), c, loader.TokenizeConfig{})
	must(b, err)
	l, err := loader.New(d, text, loader.Config{Batch: 32, Seq: 64})
	must(b, err)
	defer l.Close()
	next, stop := iterPull(l)
	defer stop()
	b.ReportAllocs()
	for b.Loop() {
		_, err, _ := next()
		must(b, err)
	}
	b.ReportMetric(float64(b.N*32*64)/b.Elapsed().Seconds(), "tokens/s")
	st := l.Stats()
	b.ReportMetric(float64(st.Wait.Nanoseconds())/float64(b.Elapsed().Nanoseconds()), "wait-fraction")
}

// BenchmarkPeakRSS tokenizes a corpus of the named size and loads 3,000
// batches spread over all of it, then reports the process's peak resident
// memory. Run each size in its own process (peak RSS never goes down):
//
//	go test -run '^$' -bench 'PeakRSS/30MB' -benchtime 1x ./loader/
//	go test -run '^$' -bench 'PeakRSS/300MB' -benchtime 1x ./loader/
func BenchmarkPeakRSS(b *testing.B) {
	for _, mb := range []int{30, 300} {
		b.Run(strconv.Itoa(mb)+"MB", func(b *testing.B) {
			d := openDevice(b)
			path := writeCorpus(b, b.TempDir(), mb)
			for b.Loop() {
				c, err := loader.Open(path)
				must(b, err)
				text, err := loader.Tokenize(context.Background(), c, loader.TokenizeConfig{})
				must(b, err)
				// Streams of 32·4 cursors cover the corpus; 3,000 batches
				// read from all of them.
				l, err := loader.New(d, text, loader.Config{Batch: 32, Seq: 64, Accum: 4})
				must(b, err)
				n := 0
				for _, err := range l.Batches(context.Background(), loader.Position{}) {
					must(b, err)
					if n++; n == 3000 {
						break
					}
				}
				must(b, l.Close())
				must(b, c.Close())
			}
			var ru syscall.Rusage
			must(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
			b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MB") // Maxrss is in KiB on Linux
		})
	}
}

// iterPull runs an endless iteration as a pull iterator.
func iterPull(l *loader.Loader) (func() (loader.Batch, error, bool), func()) {
	return iter.Pull2(l.Batches(context.Background(), loader.Position{}))
}
