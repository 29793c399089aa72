package cli

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/gocurrent/gocurrent/cuda"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
)

// DistVar registers -dist and -dist-timeout, the data-parallel flags
// every train command has.
func DistVar(fs *flag.FlagSet, mode *string, timeout *time.Duration) {
	fs.StringVar(mode, "dist", "auto", "data-parallel training: auto joins the job the launcher's variables describe (mpirun, an MPIJob: Open MPI on the CPU; torchrun, a PyTorchJob: NCCL on GPUs), with -batch split evenly over the ranks; none trains alone")
	fs.DurationVar(timeout, "dist-timeout", dist.DefaultTimeout, "with -dist, stop every rank with an error when a gradient exchange takes longer than this (a rank failed or hangs)")
}

// Job is the data-parallel job -dist mode says this process is part of:
// with auto, the one the launcher's variables (read through getenv)
// describe; with none, or without a launcher, a job of one rank.
func Job(mode string, timeout time.Duration, getenv func(string) string) (dist.Env, error) {
	switch mode {
	case "none":
		return dist.Env{Size: 1}, nil
	case "auto":
	default:
		return dist.Env{}, fmt.Errorf("%w: -dist %q, want auto or none", ErrUsage, mode)
	}
	job, err := dist.FromEnv(getenv)
	if err != nil {
		return job, fmt.Errorf("-dist auto: %w", err)
	}
	if job.Size > 1 && timeout <= 0 {
		return job, fmt.Errorf("%w: -dist-timeout %v, want > 0", ErrUsage, timeout)
	}
	return job, nil
}

// OpenRankDevice opens the device a rank trains on (OpenDevice): with
// -device cuda or auto, its own GPU, the local rank's (auto falls back to
// the CPU as without -dist).
func OpenRankDevice(spec string, job dist.Env, gpu cuda.Config, limit int64) (device.Device, error) {
	if job.Size == 1 || job.LocalRank == 0 || spec != "cuda" && spec != "auto" {
		return OpenDevice(spec, gpu, limit)
	}
	d, err := OpenDevice(fmt.Sprintf("cuda:%d", job.LocalRank), gpu, limit)
	if spec == "auto" && errors.Is(err, device.ErrUnavailable) {
		return OpenDevice("cpu", gpu, limit)
	}
	return d, err
}

// CollectiveFields adds a data-parallel run's figures to a done event and
// its text: the ranks and, where the communicator counts them
// (dist.Counter), its collectives, their bytes and time, and that time a
// step over steps.
func CollectiveFields(done map[string]any, comm dist.Comm, steps int64) string {
	if comm == nil || comm.Size() == 1 {
		return ""
	}
	done["ranks"] = comm.Size()
	text := fmt.Sprintf("; %d ranks", comm.Size())
	if c, ok := comm.(dist.Counter); ok {
		st := c.Stats()
		done["collectives"], done["collective_bytes"], done["collective_s"] = st.Collectives, st.Bytes, st.Busy.Seconds()
		if steps > 0 && st.Busy > 0 {
			text += fmt.Sprintf(", %s in collectives a step", (st.Busy / time.Duration(steps)).Round(time.Microsecond))
		}
	}
	return text
}
