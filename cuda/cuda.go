package cuda

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device"
)

// Open returns the CUDA device of the GPU with the given ordinal (0 is the
// first). Until the device lands (issue 7) it always returns an error
// wrapping device.ErrUnavailable, which is what it will return on a machine
// without a driver or GPU, so callers (the char-RNN example's -device auto)
// already take the path they will take there.
func Open(ordinal int) (device.Device, error) {
	if ordinal < 0 {
		return nil, fmt.Errorf("cuda: device ordinal %d is negative", ordinal)
	}
	return nil, fmt.Errorf("%w: cuda:%d: the CUDA device is not built yet (issue 7)", device.ErrUnavailable, ordinal)
}
