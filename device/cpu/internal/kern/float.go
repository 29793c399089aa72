package kern

import "unsafe"

// Float is the element type of the float kernels: float32 (the speed path)
// or float64 (gradient checks), or a type defined on one of them.
type Float interface{ ~float32 | ~float64 }

// single reports whether T is a 4-byte float, the case that takes the fast
// float32 activations. It is evaluated once per call, not per element.
func single[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}
