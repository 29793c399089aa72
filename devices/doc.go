// Package devices opens a device.Device by name, the way a command line
// or a service's configuration names one: "auto", "cpu", "cuda" or
// "cuda:N".
//
//	d, err := devices.Open("auto", devices.Config{})
//	if err != nil {
//		return err
//	}
//	defer d.Close()
//
// It is the one library package that imports both device implementations
// (device/cpu and cuda), so that the layers, the loader, the trainer and
// the models, which are written against device.Device alone, never do. A
// program that always uses one device may call cpu.Open or cuda.Open
// directly instead.
//
// # Selection
//
// "auto" opens the first GPU if the machine has a usable one and the CPU
// otherwise: no driver, no GPU, no cuBLAS, or a CGO_ENABLED=0 build (each
// an error matching device.ErrUnavailable from cuda.Open) fall back to the
// CPU, while a GPU that is there and fails to open is an error, not a
// silent fallback. "cuda" and "cuda:N" never fall back.
//
// # Errors
//
// A spec other than the four forms is an error wrapping ErrSpec, which
// says what is accepted. Asking for a GPU on a machine without one is an
// error wrapping device.ErrUnavailable and saying which library or device
// is missing.
package devices
