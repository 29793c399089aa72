package gemm

import (
	"sort"
	"sync"
	"testing"
	"time"
)

func spinFor(d time.Duration) {
	t0 := time.Now()
	for time.Since(t0) < d {
	}
}

func TestWakeLatency(t *testing.T) {
	for _, sleep := range []bool{true, false} {
		for _, busy := range []time.Duration{20 * time.Microsecond, 100 * time.Microsecond, 1 * time.Millisecond} {
			ch := make(chan time.Duration)
			var wg sync.WaitGroup
			for range 2 {
				go func() {
					for d := range ch {
						spinFor(d)
						wg.Done()
					}
				}()
			}
			var ds []time.Duration
			for range 40 {
				if sleep {
					time.Sleep(200 * time.Microsecond)
				}
				t0 := time.Now()
				wg.Add(2)
				ch <- busy
				ch <- busy
				wg.Wait()
				ds = append(ds, time.Since(t0))
			}
			close(ch)
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			t.Logf("sleep %v 2 workers busy %v: makespan p10 %v p50 %v p90 %v max %v", sleep, busy, ds[4], ds[20], ds[36], ds[39])
		}
	}
}
