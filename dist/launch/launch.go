// Package launch joins a process to its data-parallel job: it reads the
// launcher's variables (dist.FromEnv) and opens the communicator the
// device calls for: Open MPI's for the CPU device (dist/mpi), NCCL's for
// a GPU (dist/nccl), none for a job of one rank (dist.Single).
package launch

import (
	"errors"
	"fmt"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/dist"
	"github.com/gocurrent/gocurrent/dist/mpi"
	"github.com/gocurrent/gocurrent/dist/nccl"
)

// Join returns the communicator of the job env describes, for device d.
// A job of one rank is dist.Single whatever the device. The caller closes
// the communicator, before d.
func Join(d device.Device, env dist.Env, cfg dist.Config) (dist.Comm, error) {
	if env.Size <= 1 {
		return dist.Single(), nil
	}
	if _, ok := d.(device.HostCaller); ok {
		return joinMPI(d, env, cfg)
	}
	if _, ok := d.(nccl.Native); ok {
		return joinNCCL(d, env, cfg)
	}
	return nil, fmt.Errorf("dist: %s has no collectives (neither host memory for MPI nor a CUDA stream for NCCL)", d.Name())
}

func joinMPI(d device.Device, env dist.Env, cfg dist.Config) (dist.Comm, error) {
	if env.Launcher != "mpirun" {
		return nil, fmt.Errorf("dist: rank %d of %d on %s under %s: the CPU device's collectives are Open MPI's; launch the job with mpirun (or a Kubernetes MPIJob)", env.Rank, env.Size, d.Name(), env.Launcher)
	}
	w, err := mpi.Join(cfg)
	if err != nil {
		return nil, err
	}
	if w.Rank() != env.Rank || w.Size() != env.Size {
		err := fmt.Errorf("dist: MPI says rank %d of %d, the launcher's variables rank %d of %d", w.Rank(), w.Size(), env.Rank, env.Size)
		return nil, errors.Join(err, w.Close())
	}
	c, err := mpi.New(d, w, cfg)
	if err != nil {
		return nil, errors.Join(err, w.Close())
	}
	return &closing{Comm: c, close: w.Close}, nil
}

// closing is a communicator that releases what it was made over (MPI's
// world) when it closes.
type closing struct {
	dist.Comm
	close func() error
}

func (c *closing) Close() error { return errors.Join(c.Comm.Close(), c.close()) }

// Stats is the communicator's (dist.Counter), zero if it counts nothing.
func (c *closing) Stats() dist.Stats {
	if s, ok := c.Comm.(dist.Counter); ok {
		return s.Stats()
	}
	return dist.Stats{}
}

// joinNCCL opens NCCL's communicator on a GPU, its unique id agreed as
// the launcher allows: under mpirun rank 0 makes it and MPI broadcasts
// it; under torchrun every rank derives it from MASTER_ADDR:MASTER_PORT
// (NCCL_COMM_ID: rank 0 listens there, and the ranks need an interface in
// that address's subnet; see nccl.IDFromAddress).
func joinNCCL(d device.Device, env dist.Env, cfg dist.Config) (dist.Comm, error) {
	var id nccl.UniqueID
	switch env.Launcher {
	case "mpirun":
		w, err := mpi.Join(cfg)
		if err != nil {
			return nil, fmt.Errorf("dist: sending NCCL's id over MPI (mpirun): %w", err)
		}
		if env.Rank == 0 {
			if id, err = nccl.NewUniqueID(cfg); err != nil {
				// The other ranks wait for the id: end the job.
				w.Abort(err)
				return nil, errors.Join(err, w.Close())
			}
		}
		if err := w.Broadcast(id[:], 0); err != nil {
			return nil, errors.Join(fmt.Errorf("dist: sending NCCL's id: %w", err), w.Close())
		}
		c, err := nccl.Open(d, env.Rank, env.Size, id, cfg)
		if err != nil {
			return nil, errors.Join(err, w.Close())
		}
		return &closing{Comm: c, close: w.Close}, nil
	case "torchrun":
		id, err := nccl.IDFromAddress(env.MasterAddr+":"+env.MasterPort, cfg)
		if err != nil {
			return nil, err
		}
		return nccl.Open(d, env.Rank, env.Size, id, cfg)
	}
	return nil, fmt.Errorf("dist: rank %d of %d from launcher %q: want mpirun or torchrun", env.Rank, env.Size, env.Launcher)
}
