package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPTXUpToDate fails when a kernel source changed and its PTX was not
// regenerated (go generate ./cuda, which needs nvcc), or when a source has
// no PTX or a PTX no source: each generated file records the SHA-256 of
// every file that went into it.
func TestPTXUpToDate(t *testing.T) {
	sources, err := filepath.Glob("kernels/*.cu")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no kernel sources: %v", err)
	}
	headers, _ := filepath.Glob("kernels/*.cuh")
	line := regexp.MustCompile(`(?m)^// source (\S+) sha256 ([0-9a-f]{64})$`)
	for _, src := range sources {
		base := strings.TrimSuffix(filepath.Base(src), ".cu")
		for _, a := range ptxArchs {
			name := "kernels/" + base + "." + a.name + ".ptx"
			ptx, err := ptxFiles.ReadFile(name)
			if err != nil {
				t.Errorf("%s has no %s: run go generate ./cuda", src, name)
				continue
			}
			recorded := map[string]string{}
			for _, m := range line.FindAllStringSubmatch(string(ptx), -1) {
				recorded[m[1]] = m[2]
			}
			for _, in := range append([]string{src}, headers...) {
				b, err := os.ReadFile(in)
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.Sum256(b)
				if got, want := recorded[filepath.Base(in)], hex.EncodeToString(h[:]); got != want {
					t.Errorf("%s records %s as sha256 %q, the file is %s: run go generate ./cuda", name, in, got, want)
				}
			}
			if !strings.Contains(string(ptx), ".target sm_"+strings.TrimPrefix(a.name, "compute_")) {
				t.Errorf("%s does not target %s", name, a.name)
			}
		}
	}
	all, _ := ptxFiles.ReadDir("kernels")
	for _, e := range all {
		base := strings.SplitN(e.Name(), ".", 2)[0]
		if _, err := os.Stat("kernels/" + base + ".cu"); err != nil {
			t.Errorf("embedded %s has no source kernels/%s.cu", e.Name(), base)
		}
	}
}

// TestPTXHasEveryKernel checks that each PTX architecture declares every
// kernel the launcher looks up, once.
func TestPTXHasEveryKernel(t *testing.T) {
	var want []string
	for k := range numKernels {
		want = append(want, "gc_"+kernelNames[k]+"_f32", "gc_"+kernelNames[k]+"_f64")
	}
	want = append(want, "gc_check_ids", "gc_fill_i32", "gc_advance", "gc_guarded_copy")
	for _, a := range ptxArchs {
		_, _, images, err := ptxFor(a.cc)
		if err != nil {
			t.Fatal(err)
		}
		all := string(joinImages(images))
		for _, name := range want {
			n := len(regexp.MustCompile(`\.entry\s+`+name+`\s*\(`).FindAllString(all, -1))
			if n != 1 {
				t.Errorf("%s: kernel %s is declared %d times, want once", a.name, name, n)
			}
		}
	}
	if _, _, _, err := ptxFor(75); err == nil {
		t.Error("ptxFor(7.5) found PTX; the kernels are built for compute_80 and later")
	}
}

func joinImages(images [][]byte) []byte {
	var all []byte
	for _, b := range images {
		all = append(all, b...)
	}
	return all
}
