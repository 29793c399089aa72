package mpi

import "unsafe"

// DefaultLibrary is the library Join opens when dist.Config.MPILibrary is
// empty: Open MPI's, found by the dynamic linker.
const DefaultLibrary = "libmpi.so.40"

// Thread support levels of MPI_Init_thread (MPI_THREAD_*).
const (
	threadFunneled = 1
	threadMultiple = 3
)

// dtype is one of the MPI datatypes the package uses.
type dtype int

const (
	mpiFloat dtype = iota
	mpiDouble
	mpiByte
)

// api is the part of Open MPI the package uses, loaded at run time. The
// cgo build implements it over dlopen (api_cgo.go); the CGO_ENABLED=0
// build has none, so loadAPI fails with dist.ErrUnavailable. Every call
// but Abort must come from the goroutine that called InitThread, locked to
// its OS thread (World's MPI goroutine). Calls return MPI's error code,
// 0 (MPI_SUCCESS) when they succeed; ErrorString turns one into text.
type api interface {
	Initialized() (bool, int)
	Finalized() (bool, int)
	// InitThread initialises MPI with argc and argv NULL, asking for
	// thread level required, and has errors on MPI_COMM_WORLD returned
	// rather than ending the job (MPI_ERRORS_RETURN).
	InitThread(required int) (provided, code int)
	Finalize() int
	Rank() (int, int)
	Size() (int, int)
	// AllReduceSum sums count elements at p over MPI_COMM_WORLD, in place.
	AllReduceSum(p unsafe.Pointer, count int, t dtype) int
	Bcast(p unsafe.Pointer, count int, t dtype, root int) int
	Barrier() int
	// Abort is MPI_Abort(MPI_COMM_WORLD, code); any goroutine may call it.
	Abort(code int) int
	ErrorString(code int) string
}
