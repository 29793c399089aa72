package alloc_test

import (
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/alloc/alloctest"
)

func TestSourceConformance(t *testing.T) {
	const capacity = 64 << 20
	t.Run("simulated", func(t *testing.T) { alloctest.TestSource(t, alloc.NewSimulated(capacity), true) })
	t.Run("host capped", func(t *testing.T) { alloctest.TestSource(t, alloc.NewHost(capacity), true) })
	t.Run("host", func(t *testing.T) { alloctest.TestSource(t, alloc.NewHost(0), false) })
}
