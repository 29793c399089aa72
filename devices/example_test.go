package devices_test

import (
	"fmt"
	"log"

	"github.com/gocurrent/gocurrent/devices"
)

// Opening the device a command line names, here the CPU. With "auto" the
// same program uses the first GPU where there is one.
func ExampleOpen() {
	d, err := devices.Open("cpu", devices.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	fmt.Println("training on", d.Name())

	_, err = devices.Open("tpu", devices.Config{})
	fmt.Println(err)
	// Output:
	// training on cpu
	// devices: unknown device "tpu": want auto, cpu, cuda or cuda:N with N a GPU ordinal
}
