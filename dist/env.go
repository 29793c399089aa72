package dist

import (
	"fmt"
	"strconv"
)

// Env is what a launcher told a process about its job.
type Env struct {
	// Launcher is the launcher the variables came from: "mpirun" (Open
	// MPI's mpirun, a Kubernetes MPIJob), "torchrun" (torchrun, a
	// Kubeflow PyTorchJob) or "" (none: a job of one rank).
	Launcher string
	// Rank, Size and LocalRank (the rank among those of this host, which
	// picks the GPU) are the process's place in the job.
	Rank, Size, LocalRank int
	// MasterAddr and MasterPort are torchrun's rendezvous address (rank
	// 0's host); empty under mpirun.
	MasterAddr, MasterPort string
}

// FromEnv reads the job's layout from the variables the usual launchers
// set, through getenv (os.Getenv in a program): first Open MPI's
// OMPI_COMM_WORLD_RANK, _SIZE and _LOCAL_RANK (mpirun, MPIJob), then
// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
// (torchrun, PyTorchJob). Without either it is a job of one rank. A
// variable that is set but malformed, or out of range, is an error.
func FromEnv(getenv func(string) string) (Env, error) {
	if getenv("OMPI_COMM_WORLD_RANK") != "" || getenv("OMPI_COMM_WORLD_SIZE") != "" {
		e := Env{Launcher: "mpirun"}
		err := ints(getenv, []intVar{{"OMPI_COMM_WORLD_RANK", &e.Rank, true}, {"OMPI_COMM_WORLD_SIZE", &e.Size, true}, {"OMPI_COMM_WORLD_LOCAL_RANK", &e.LocalRank, false}})
		if err != nil {
			return Env{}, err
		}
		return e, e.check()
	}
	if getenv("RANK") != "" || getenv("WORLD_SIZE") != "" {
		e := Env{Launcher: "torchrun", MasterAddr: getenv("MASTER_ADDR"), MasterPort: getenv("MASTER_PORT")}
		err := ints(getenv, []intVar{{"RANK", &e.Rank, true}, {"WORLD_SIZE", &e.Size, true}, {"LOCAL_RANK", &e.LocalRank, false}})
		if err != nil {
			return Env{}, err
		}
		if e.Size > 1 && (e.MasterAddr == "" || e.MasterPort == "") {
			return Env{}, fmt.Errorf("dist: RANK and WORLD_SIZE=%d are set, MASTER_ADDR (%q) and MASTER_PORT (%q) must be too", e.Size, e.MasterAddr, e.MasterPort)
		}
		if e.MasterPort != "" {
			if p, err := strconv.Atoi(e.MasterPort); err != nil || p <= 0 || p > 65535 {
				return Env{}, fmt.Errorf("dist: MASTER_PORT=%q is not a port", e.MasterPort)
			}
		}
		return e, e.check()
	}
	return Env{Size: 1}, nil
}

type intVar struct {
	name     string
	v        *int
	required bool
}

func ints(getenv func(string) string, vars []intVar) error {
	for _, iv := range vars {
		s := getenv(iv.name)
		if s == "" {
			if iv.required {
				return fmt.Errorf("dist: %s is not set, and the launcher's other variables are", iv.name)
			}
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("dist: %s=%q is not a number", iv.name, s)
		}
		*iv.v = n
	}
	return nil
}

func (e Env) check() error {
	switch {
	case e.Size < 1:
		return fmt.Errorf("dist: %s: world size %d, want at least 1", e.Launcher, e.Size)
	case e.Rank < 0 || e.Rank >= e.Size:
		return fmt.Errorf("dist: %s: rank %d of %d ranks", e.Launcher, e.Rank, e.Size)
	case e.LocalRank < 0:
		return fmt.Errorf("dist: %s: local rank %d", e.Launcher, e.LocalRank)
	}
	return nil
}
