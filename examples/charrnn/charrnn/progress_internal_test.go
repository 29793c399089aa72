package charrnn

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gocurrent/gocurrent/train"
)

// TestStepRate: a printed step's tokens/s is the rate since the previous
// printed step, not the run's cumulative average (which the trainer
// reports in Progress.TokensPerSecond, here deliberately different).
func TestStepRate(t *testing.T) {
	var out bytes.Buffer
	tp := newTrainProgress(TrainFlags{LogEvery: 10, JSON: true}, Env{}, &printer{W: &out, JSON: true}, 100)
	// Step 1 after 1 s and 1,000 tokens; step 10 after 2 s more and 9,000
	// tokens more: 4,500 tokens/s over the interval, 3,333 cumulative.
	tp.step(train.Progress{Step: 1, Tokens: 1000, Elapsed: time.Second, TokensPerSecond: 1})
	tp.step(train.Progress{Step: 10, Tokens: 10000, Elapsed: 3 * time.Second, TokensPerSecond: 3333})
	var rates []float64
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			TokensPerSec float64 `json:"tokens_per_s"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		rates = append(rates, e.TokensPerSec)
	}
	if len(rates) != 2 || rates[0] != 1000 || !(math.Abs(rates[1]-4500) <= 1) {
		t.Errorf("printed rates %v, want [1000 4500] (the interval's, not the cumulative 3333)", rates)
	}
}
