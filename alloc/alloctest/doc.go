// Package alloctest holds what tests of memory sources and allocators
// share: TestSource, the conformance suite every alloc.Source passes (the
// host source of package alloc, Simulated here, and the CUDA device's
// device-memory and pinned-host sources in package cuda), and Simulated, a
// fake device for testing allocation policy without a GPU.
//
// Simulated serves fake addresses from a fixed capacity, so a test can
// fill a 4 GiB device without touching memory. Its events complete only
// when the test says so (Complete, CompleteAll) or when someone waits for
// them, which makes stream-ordered reuse deterministic; FailNext injects
// refusals and device faults; Claim and Unclaim keep a shadow map of live
// blocks that reports any two sharing a byte; Counts, Pending and Waits
// show what the allocator asked of the device.
//
// It is a test helper: import it from _test files only. Package alloc's
// own tests that use Simulated are external tests (package alloc_test),
// since an in-package test cannot import a package that imports alloc;
// alloc's export_test.go opens to them the internals they check.
//
// Example:
//
//	func TestMySource(t *testing.T) {
//		alloctest.TestSource(t, newMySource(64<<20), true)
//	}
//
//	sim := alloctest.NewSimulated(1 << 30)
//	c, err := alloc.NewCaching(sim, alloc.Config{})
//	if err != nil { ... }
//	sim.FailNext(nil) // the next segment request is refused
package alloctest
