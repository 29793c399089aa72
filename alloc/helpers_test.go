package alloc_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

// checkInvariants fails the test if c's figures disagree with its
// snapshot and internal structures (see CheckInvariants).
func checkInvariants(t testing.TB, c *alloc.Caching) {
	t.Helper()
	if err := alloc.CheckInvariants(c); err != nil {
		t.Fatal(err)
	}
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// The simulated device and the checked calls every test uses, from alloctest.
var (
	newSim    = alloctest.NewCaching
	mustAlloc = alloctest.MustAlloc
	mustFree  = alloctest.MustFree
)
