package gemm

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func spinFor(d time.Duration) {
	t0 := time.Now()
	for time.Since(t0) < d {
	}
}

func TestWakeLatency(t *testing.T) {
	for _, variant := range []string{"gosched", "pause"} {
		for _, gap := range []string{"sleep", "spin"} {
			busy := 100 * time.Microsecond
			var mail atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			go func() {
				for !stop.Load() {
					if d := mail.Swap(0); d != 0 {
						spinFor(time.Duration(d))
						wg.Done()
					}
					if variant == "gosched" {
						runtime.Gosched()
					}
				}
			}()
			var ds []time.Duration
			for range 100 {
				if gap == "sleep" {
					time.Sleep(100 * time.Microsecond)
				} else {
					spinFor(50 * time.Microsecond)
				}
				t0 := time.Now()
				wg.Add(1)
				mail.Store(int64(busy))
				spinFor(busy)
				wg.Wait()
				ds = append(ds, time.Since(t0))
			}
			stop.Store(true)
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			t.Logf("%s gap %s busy %v: makespan p10 %v p50 %v p90 %v max %v", variant, gap, busy, ds[10], ds[50], ds[90], ds[99])
		}
	}
}
