package alloc_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gocurrent/gocurrent/alloc"
)

// FuzzCaching decodes bytes into a policy and a sequence of allocator
// operations (alloc, free, record stream, complete a stream, empty cache)
// on a 64 MiB simulated device, and checks after every step that the
// figures match the snapshot, segments are tiled and merged, and no two
// live blocks share a byte. Out of memory is allowed; anything else is not.
// At the end everything is freed and the cache must empty completely.
func FuzzCaching(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 3, 0, 0, 0})
	f.Add([]byte{1, 0, 0xff, 0xff, 0x60, 0, 0x10, 0x00, 0x20, 5, 0, 1, 1, 3, 0, 0, 0, 6, 1, 0, 0, 0, 0x80, 0x80, 0xe0})
	f.Add([]byte{6, 2, 0x40, 0x00, 0x61, 2, 0x40, 0x00, 0x62, 5, 1, 0, 2, 4, 0, 0, 0, 7, 0, 0, 0, 0, 0xff, 0xff, 0xe3})
	rng := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		b := make([]byte, 400)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		var cfg alloc.Config
		flags := data[0]
		if flags&1 != 0 {
			cfg.MaxSplitSize = alloc.LargeBuffer
		}
		if flags&2 != 0 {
			for i := range cfg.RoundupPower2Divisions {
				cfg.RoundupPower2Divisions[i] = 4
			}
		}
		switch flags >> 2 & 3 {
		case 1:
			cfg.MemoryLimit = 48 * mib
		case 2:
			cfg.MemoryLimit, cfg.GarbageCollectionThreshold = 48*mib, 0.5
		}
		sim, c := newSim(t, 64*mib, cfg)
		type live struct {
			p    alloc.Ptr
			size int64
		}
		var blocks []live
		data = data[1:]
		for len(data) >= 4 {
			op, a, b, d := data[0]%8, data[1], data[2], data[3]
			data = data[4:]
			stream := alloc.Stream(d & 3)
			switch op {
			case 0, 1, 2:
				mult := []int64{1, 8, 64, 512}[d>>6]
				size := int64(binary.BigEndian.Uint16([]byte{a, b}))*mult + 1
				p, err := c.Alloc(size, stream)
				if err != nil {
					var oom *alloc.OutOfMemoryError
					if !errors.As(err, &oom) {
						t.Fatalf("Alloc(%d): %v, want success or *OutOfMemoryError", size, err)
					}
					break
				}
				if err := sim.Claim(p, size); err != nil {
					t.Fatal(err)
				}
				blocks = append(blocks, live{p, size})
			case 3, 4:
				if len(blocks) == 0 {
					break
				}
				i := int(a) % len(blocks)
				if err := sim.Unclaim(blocks[i].p); err != nil {
					t.Fatal(err)
				}
				mustFree(t, c, blocks[i].p)
				blocks[i] = blocks[len(blocks)-1]
				blocks = blocks[:len(blocks)-1]
			case 5:
				if len(blocks) == 0 {
					break
				}
				if err := c.RecordStream(blocks[int(a)%len(blocks)].p, alloc.Stream(b&3)); err != nil {
					t.Fatal(err)
				}
			case 6:
				sim.Complete(alloc.Stream(a & 3))
			case 7:
				if a < 64 {
					if err := c.EmptyCache(); err != nil {
						t.Fatal(err)
					}
				} else {
					sim.CompleteAll()
				}
			}
			checkInvariants(t, c)
		}
		for _, b := range blocks {
			if err := sim.Unclaim(b.p); err != nil {
				t.Fatal(err)
			}
			mustFree(t, c, b.p)
		}
		if err := c.EmptyCache(); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, c)
		st := c.Stats()
		if st.ReservedBytes[alloc.AllPools].Current != 0 || st.Active[alloc.AllPools].Current != 0 {
			t.Fatalf("after freeing all and emptying: reserved %d, active %d; want 0, 0",
				st.ReservedBytes[alloc.AllPools].Current, st.Active[alloc.AllPools].Current)
		}
		if _, _, n := sim.Counts(); n != 0 {
			t.Fatalf("%d segments live on the device after emptying, want 0", n)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConcurrent runs allocations and frees from many goroutines, on three
// streams, with blocks freed by a goroutine other than the one that
// allocated them, while others empty the cache, read figures and finish
// streams. Run under -race. The shadow map catches any overlap.
func TestConcurrent(t *testing.T) {
	sim, c := newSim(t, 4*gib, alloc.Config{})
	const workers, ops = 8, 1500
	handoff := make(chan alloc.Ptr, 64)
	var wg sync.WaitGroup
	var failed sync.Once
	fail := func(err error) { failed.Do(func() { t.Error(err) }) }
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // frees what others hand over
		defer bg.Done()
		for p := range handoff {
			if err := sim.Unclaim(p); err != nil {
				fail(err)
			}
			if err := c.Free(p); err != nil {
				fail(err)
			}
		}
	}()
	go func() { // housekeeping
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sim.CompleteAll()
			_ = c.Stats()
			_ = c.Snapshot()
			if err := c.EmptyCache(); err != nil {
				fail(err)
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			stream := alloc.Stream(w % 3)
			var mine []alloc.Ptr
			for range ops {
				switch r := rng.IntN(10); {
				case r < 5 || len(mine) == 0:
					size := int64(rng.IntN(1<<rng.IntN(23))) + 1
					p, err := c.Alloc(size, stream)
					if err != nil {
						fail(err)
						return
					}
					if err := sim.Claim(p, size); err != nil {
						fail(err)
						return
					}
					if rng.IntN(4) == 0 {
						if err := c.RecordStream(p, alloc.Stream(rng.IntN(3))); err != nil {
							fail(err)
						}
					}
					mine = append(mine, p)
				case r < 8:
					i := rng.IntN(len(mine))
					p := mine[i]
					mine[i] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					if err := sim.Unclaim(p); err != nil {
						fail(err)
					}
					if err := c.Free(p); err != nil {
						fail(err)
					}
				default:
					p := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					handoff <- p
				}
			}
			for _, p := range mine {
				handoff <- p
			}
		}()
	}
	wg.Wait()
	close(handoff)
	close(stop)
	bg.Wait()
	sim.CompleteAll()
	if err := c.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, c)
	st := c.Stats()
	if st.Allocation[alloc.AllPools].Current != 0 || st.ReservedBytes[alloc.AllPools].Current != 0 {
		t.Errorf("after all frees: allocation %d, reserved %d; want 0, 0", st.Allocation[alloc.AllPools].Current, st.ReservedBytes[alloc.AllPools].Current)
	}
	if st.Allocation[alloc.AllPools].Allocated < workers*ops/3 {
		t.Errorf("only %d allocations ran", st.Allocation[alloc.AllPools].Allocated)
	}
}
