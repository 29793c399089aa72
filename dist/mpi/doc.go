// Package mpi is the dist.Comm of CPU processes: Open MPI's collectives
// over MPI_COMM_WORLD, on the host memory of the CPU device, for a job
// started by mpirun (or a Kubernetes MPIJob, which runs it).
//
// A process joins the job once (Join returns its World: rank, size, a
// broadcast of host bytes, a barrier, an abort) and makes a communicator
// on a device with New. The communicator's AllReduce and Broadcast are
// queued on a stream of the device like kernels (device.HostCaller): they
// start after the work queued before them, and the returned event
// completes when the result is in place.
//
// # Finding the library
//
// Open MPI is loaded at run time with dlopen, so a binary builds, and runs
// as a job of one rank, without it: Join opens dist.Config.MPILibrary, or
// libmpi.so.40 found by the dynamic linker (Debian's openmpi-bin installs
// it), with RTLD_GLOBAL, since Open MPI's own plug-ins need its symbols.
// No MPI header is needed to build: the package declares the dozen entry
// points it calls, and takes MPI_COMM_WORLD, MPI_FLOAT, MPI_DOUBLE,
// MPI_BYTE and MPI_SUM as the addresses of Open MPI's predefined objects
// (ompi_mpi_comm_world, ...). That is Open MPI's ABI (4.x and 5.x);
// MPICH's, whose handles are integers, is not supported. A missing
// library or symbol, or a build without cgo, is an error wrapping
// dist.ErrUnavailable that says what is missing.
//
// Outside mpirun a process is an MPI singleton: a World of one rank.
//
// # Concurrency
//
// MPI is initialised once per process (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE and accepting MPI_THREAD_FUNNELED or more), by a
// goroutine of the World locked to its OS thread; every MPI call of the
// process but MPI_Abort is made by that goroutine, one at a time, for the
// goroutines that ask it (the streams' goroutines, for a communicator's
// collectives). A second Join returns the same World; the last Close
// finalizes MPI, which cannot be initialised again in the process.
//
// # Errors and hangs
//
// MPI errors on MPI_COMM_WORLD are returned (MPI_ERRORS_RETURN), not fatal:
// each becomes an *Error with MPI_Error_string's text, raised on the
// collective's stream and kept as the communicator's Err.
//
// MPI never times out a collective: when a rank hangs, the others wait for
// ever. Each communicator runs a dist.Watchdog: a collective that runs
// past dist.Config.Timeout aborts the communicator with a
// *dist.TimeoutError, which ends the job (World.Abort writes
// "gocurrent: rank R aborts the job: ..." to standard error, and
// MPI_Abort has mpirun end every rank). A rank that exits, or crashes,
// needs no watchdog: mpirun ends the job when a rank exits with an error,
// or without finalizing MPI.
//
// # Example
//
// Under mpirun -np 2 (every rank runs the same program):
//
//	w, err := mpi.Join(dist.Config{MPILibrary: os.Getenv("GOCURRENT_MPI")})
//	if err != nil {
//		return err // dist.ErrUnavailable: no Open MPI
//	}
//	defer w.Close()
//	d, err := cpu.Open(cpu.Config{})
//	if err != nil {
//		return err
//	}
//	defer d.Close()
//	c, err := mpi.New(d, w, dist.Config{Timeout: time.Minute})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	grads, err := d.Alloc(4096, device.Gradients)
//	if err != nil {
//		return err
//	}
//	// ... a backward pass writes grads on d.Stream() ...
//	if _, err := c.AllReduce(grads, device.Float32, d.Stream()); err != nil {
//		return err
//	}
//	return d.Stream().Synchronize() // grads is the sum over the ranks
package mpi
