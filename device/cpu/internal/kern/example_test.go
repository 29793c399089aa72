package kern_test

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device/cpu/internal/kern"
)

// One part's call of the loss kernel: two rows of three classes, the mean
// over the rows (scale 1/2), the gradient written over the logits. By
// hand: log(1+e⁻¹+e⁻²) = 0.40761 and log(1+2e⁻⁵) = 0.01339, so the loss is
// 0.5·0.42100; the last gradient is 0.5·(1/(1+2e⁻⁵) - 1) = -0.0066485.
func ExampleSoftmaxCrossEntropy() {
	logits := []float32{2, 1, 0, 0, 0, 5}
	loss, bad := kern.SoftmaxCrossEntropy(3, logits, []int32{0, 2}, 0.5, logits, false, 0, nil)
	fmt.Printf("loss %.4f, bad %d\n", loss, bad)
	fmt.Printf("dLogits %.4f\n", logits)
	// Output:
	// loss 0.2105, bad -1
	// dLogits [-0.1674 0.1224 0.0450 0.0033 0.0033 -0.0066]
}
