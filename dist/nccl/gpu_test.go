package nccl

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
)

// TestGPU runs NCCL for real on the first GPU, as one rank: a
// communicator of size 1 (ncclCommInitRank with nranks 1), whose
// all-reduces leave the values as they are and whose broadcast from rank
// 0 too, through the same bindings, streams and watchdog as a job of
// many. GOCURRENT_CUDA_DRIVER, GOCURRENT_CUBLAS and GOCURRENT_NCCL give
// the libraries' paths where the dynamic loader does not find them
// (.ci/gpu-run sets them from PyTorch's). Where there is no GPU or no
// NCCL it skips saying why, except under GOCURRENT_REQUIRE_GPU=1 (set by
// .ci/gpu-run): then that is a failure, and so is the CUDA emulator
// standing in for the GPU. Over the emulator (.ci/gpu-run dist with
// GOCURRENT_GPU_RUN_EMULATED=1) it runs on the emulated NCCL.
func TestGPU(t *testing.T) {
	require := false
	if v, err := strconv.ParseBool(os.Getenv("GOCURRENT_REQUIRE_GPU")); err == nil {
		require = v
	}
	skip := func(why string, err error) {
		if require {
			t.Fatalf("GOCURRENT_REQUIRE_GPU=1 and %s: %v", why, err)
		}
		t.Skipf("%s: %v", why, err)
	}
	d, err := cuda.Open(cuda.Config{DriverLibrary: os.Getenv("GOCURRENT_CUDA_DRIVER"), BLASLibrary: os.Getenv("GOCURRENT_CUBLAS")})
	if errors.Is(err, device.ErrUnavailable) {
		skip("no usable GPU", err)
	}
	if err != nil {
		t.Fatalf("cuda.Open: %v", err)
	}
	defer d.Close()
	if require && cudaemu.IsEmulator(d.Info().Name) {
		t.Fatalf("GOCURRENT_REQUIRE_GPU=1 and the device is %q, not a GPU", d.Info().Name)
	}
	cfg := dist.Config{NCCLLibrary: os.Getenv("GOCURRENT_NCCL"), Timeout: time.Minute}
	v, path, err := Version(cfg)
	if errors.Is(err, dist.ErrUnavailable) {
		skip("no NCCL", err)
	}
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	t.Logf("nccl: version %d (%s) from %s, on %s", v, versionString(v), path, d.Info().Name)
	id, err := NewUniqueID(cfg)
	if err != nil {
		t.Fatalf("NewUniqueID: %v", err)
	}
	c, err := Open(d, 0, 1, id, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, dt := range []device.DType{device.Float32, device.Float64} {
		want := encode(dt, values(0, 4099))
		b, err := d.Alloc(int64(len(want)), device.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Upload(b, want); err != nil {
			t.Fatal(err)
		}
		ev, err := c.AllReduce(b, dt, d.Stream())
		if err != nil {
			t.Fatalf("AllReduce %v: %v", dt, err)
		}
		if err := ev.Wait(); err != nil {
			t.Fatal(err)
		}
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ev); err != nil {
			t.Fatal(err)
		}
		if ev, err = c.Broadcast(b, 0, s); err != nil {
			t.Fatalf("Broadcast: %v", err)
		}
		if err := ev.Wait(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if err := d.Download(got, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%v: the all-reduce and broadcast of one rank changed the values (first bytes %x, want %x)", dt, head(got), head(want))
		}
		if err := c.Err(); err != nil {
			t.Errorf("Err() = %v, want nil", err)
		}
		s.Close()
		if err := d.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// versionString is ncclGetVersion's code as major.minor.patch: since 2.9,
// major*10000 + minor*100 + patch; before, major*1000 + minor*100 + patch.
func versionString(v int) string {
	if v >= 20900 {
		return strconv.Itoa(v/10000) + "." + strconv.Itoa(v/100%100) + "." + strconv.Itoa(v%100)
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v/100%10) + "." + strconv.Itoa(v%100)
}
