package launch_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/cpu"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/launch"
	"github.com/gocurrent/gocurrent/internal/cudaemu"
	"github.com/gocurrent/gocurrent/internal/mpitest"
)

func openCPU(t *testing.T) device.Device {
	t.Helper()
	d, err := cpu.Open(cpu.Config{Threads: 1})
	check(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// TestJoinOne: a job of one rank is dist.Single, on any device, whatever
// libraries there are.
func TestJoinOne(t *testing.T) {
	c, err := launch.Join(openCPU(t), dist.Env{Size: 1}, dist.Config{MPILibrary: "/nonexistent"})
	if err != nil || c.Backend() != "single" || c.Size() != 1 {
		t.Fatalf("got %v, %v; want the single communicator", c, err)
	}
}

// TestJoinTorchrunOnCPU: the CPU device's collectives are MPI's, which
// torchrun does not start: an error that says to use mpirun.
func TestJoinTorchrunOnCPU(t *testing.T) {
	_, err := launch.Join(openCPU(t), dist.Env{Launcher: "torchrun", Rank: 0, Size: 2, MasterAddr: "127.0.0.1", MasterPort: "29500"}, dist.Config{})
	if err == nil || !strings.Contains(err.Error(), "mpirun") {
		t.Fatalf("got %v, want an error naming mpirun", err)
	}
}

// TestJoinRank is a rank of TestJoinMPI's job.
func TestJoinRank(t *testing.T) {
	if _, ok := mpitest.Rank(); !ok {
		t.Skip("a rank of TestJoinMPI: runs under mpirun only")
	}
	env, err := dist.FromEnv(os.Getenv)
	check(t, err)
	d := openCPU(t)
	c, err := launch.Join(d, env, dist.Config{Timeout: time.Minute})
	check(t, err)
	defer c.Close()
	if c.Backend() != "mpi" || c.Rank() != env.Rank || c.Size() != env.Size {
		t.Fatalf("%s rank %d of %d, want mpi rank %d of %d", c.Backend(), c.Rank(), c.Size(), env.Rank, env.Size)
	}
	b, err := d.Alloc(8, device.Workspace)
	check(t, err)
	check(t, device.UploadSlice(d, b, []float64{float64(env.Rank + 1)}))
	e, err := c.AllReduce(b, device.Float64, d.Stream())
	check(t, err)
	check(t, d.Stream().Wait(e))
	got := []float64{0}
	check(t, device.DownloadSlice(d, got, b))
	if want := float64(env.Size * (env.Size + 1) / 2); got[0] != want {
		t.Fatalf("rank %d: sum %v, want %v", env.Rank, got[0], want)
	}
}

// TestJoinMPI: under mpirun the CPU device joins through Open MPI, as the
// ranks the launcher's variables say.
func TestJoinMPI(t *testing.T) {
	mpitest.Run(t, 2, "TestJoinRank", time.Minute).Check(t, "2 ranks")
}

// TestJoinTorchrunNCCL: under torchrun's variables a GPU joins through
// NCCL, the id derived from MASTER_ADDR:MASTER_PORT (NCCL_COMM_ID), here
// over the CUDA emulator's NCCL with 2 ranks in goroutines.
func TestJoinTorchrunNCCL(t *testing.T) {
	lib := cudaemu.ForTest(t)
	if old, ok := os.LookupEnv("NCCL_COMM_ID"); ok {
		t.Cleanup(func() { os.Setenv("NCCL_COMM_ID", old) })
	} else {
		t.Cleanup(func() { os.Unsetenv("NCCL_COMM_ID") })
	}
	cfg := dist.Config{NCCLLibrary: lib.Path(), Timeout: time.Minute}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				d, err := cuda.Open(cuda.Config{DriverLibrary: lib.Path(), BLASLibrary: lib.Path()})
				if err != nil {
					return err
				}
				defer d.Close()
				c, err := launch.Join(d, dist.Env{Launcher: "torchrun", Rank: r, Size: 2, MasterAddr: "127.0.0.1", MasterPort: "29511"}, cfg)
				if err != nil {
					return err
				}
				defer c.Close()
				if c.Backend() != "nccl" {
					return fmt.Errorf("backend %s, want nccl", c.Backend())
				}
				b, err := d.Alloc(4, device.Workspace)
				if err != nil {
					return err
				}
				if err := device.UploadSlice(d, b, []float32{float32(r + 1)}); err != nil {
					return err
				}
				if _, err := c.AllReduce(b, device.Float32, d.Stream()); err != nil {
					return err
				}
				got := []float32{0}
				if err := device.DownloadSlice(d, got, b); err != nil {
					return err
				}
				if got[0] != 3 {
					return fmt.Errorf("rank %d: sum %v, want 3", r, got[0])
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	check(t, errors.Join(errs...))
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
