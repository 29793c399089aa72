package inuse

import (
	"sync"
	"testing"
)

func TestWord(t *testing.T) {
	var w Word
	if r := w.Enter(); r != None {
		t.Fatalf("Enter on an idle word: %v, want None", r)
	}
	if r := w.Enter(); r != Busy {
		t.Errorf("Enter with a call inside: %v, want Busy", r)
	}
	if first, r := w.Close(); first || r != Busy {
		t.Errorf("Close with a call inside: %v, %v; want false, Busy", first, r)
	}
	w.Leave()
	if first, r := w.Close(); !first || r != None || !w.Closed() {
		t.Errorf("Close: %v, %v (closed %v); want true, None, closed", first, r, w.Closed())
	}
	if first, r := w.Close(); first || r != None {
		t.Errorf("a second Close: %v, %v; want false, None", first, r)
	}
	if r := w.Enter(); r != Closed {
		t.Errorf("Enter after Close: %v, want Closed", r)
	}
}

// TestWordExcludes: of goroutines entering at once, one at a time is in.
func TestWordExcludes(t *testing.T) {
	var w Word
	var in, most, entered int32
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if w.Enter() != None {
					continue
				}
				mu.Lock()
				in++
				entered++
				most = max(most, in)
				in--
				mu.Unlock()
				w.Leave()
			}
		}()
	}
	wg.Wait()
	if most != 1 || entered == 0 {
		t.Errorf("at most %d calls inside at once (%d entered), want 1", most, entered)
	}
}
