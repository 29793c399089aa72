// Package dist is data-parallel training's seam: a communicator (Comm)
// of the ranks of one job, and the collectives the trainer runs on it
// (a sum of the gradients over the ranks, a broadcast of rank 0's
// weights), queued on a device's streams like kernels.
//
// The engines are the field's own, never a protocol of ours: NCCL
// between GPUs (package dist/nccl) and Open MPI between CPU processes
// (package dist/mpi), both loaded at run time as the CUDA driver is, so a
// binary builds and runs with neither installed; opening one that is
// missing is an error wrapping ErrUnavailable that says what is missing.
// A job of one rank needs neither: Single is its communicator.
//
// FromEnv reads a process's place in the job from the variables of the
// usual launchers: Open MPI's mpirun (and a Kubernetes MPIJob, which runs
// it), then torchrun's (and a Kubeflow PyTorchJob's).
//
// # Errors and hangs
//
// Neither engine times out a collective: when a rank dies or hangs the
// others wait for ever. Every backend runs a Watchdog that aborts its
// communicator when a collective runs past Config.Timeout (ErrTimeout),
// so every rank stops with an error instead.
package dist
