package driver_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/gocurrent/gocurrent/alloc"
	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/device/driver"
)

// named is a device of which the helpers use only the identity and Name;
// every other method panics (the embedded interface is nil).
type named struct {
	device.Device
	name string
}

func (n *named) Name() string { return n.name }

func TestBuffers(t *testing.T) {
	d := &named{name: "dev"}
	mem := make([]float64, 8)
	b := driver.NewBuffer(d, 4096, 64, unsafe.Pointer(&mem[0]))
	if b.Device() != device.Device(d) || b.Addr() != 4096 || b.Len() != 64 || b.IsZero() {
		t.Errorf("NewBuffer = %v %v %d, IsZero %v; want dev 4096 64 false", b.Device(), b.Addr(), b.Len(), b.IsZero())
	}
	if got, want := driver.HostPointer(b.Elems(device.Float64, 3, 2)), unsafe.Pointer(&mem[3]); got != want {
		t.Errorf("HostPointer of elements [3, 5) = %p, want %p, the host pointer moved with the slice", got, want)
	}
	if p := driver.HostPointer(driver.NewBuffer(d, 4096, 64, nil)); p != nil {
		t.Errorf("HostPointer of a GPU buffer = %p, want nil", p)
	}
	if p := driver.HostPointer(device.Buffer{}); p != nil {
		t.Errorf("HostPointer of the zero Buffer = %p, want nil", p)
	}
	h := driver.NewHostBuffer(d, 512, make([]byte, 16))
	if h.Device() != device.Device(d) || h.Addr() != 512 || h.Len() != 16 {
		t.Errorf("NewHostBuffer = %v %v %d, want dev 512 16", h.Device(), h.Addr(), h.Len())
	}
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "driver: ") {
			t.Errorf("NewBuffer of a negative size panicked with %v, want a message starting \"driver: \"", r)
		}
	}()
	driver.NewBuffer(d, 0, -1, nil)
}

func TestChecks(t *testing.T) {
	d, other := &named{name: "dev"}, &named{name: "other"}
	buf := driver.NewBuffer(d, 4096, 8, nil)
	host := driver.NewHostBuffer(d, 512, make([]byte, 8))
	for _, tc := range []struct {
		name string
		err  error
		want error // nil, device.ErrForeignBuffer or device.ErrShape
		says string
	}{
		{"CheckOwner own", driver.CheckOwner(d, "Op", "x", d), nil, ""},
		{"CheckOwner zero", driver.CheckOwner(d, "Op", "x", nil), device.ErrForeignBuffer, "x is the zero buffer"},
		{"CheckOwner other", driver.CheckOwner(d, "Op", "x", other), device.ErrForeignBuffer, "x belongs to other, not dev"},
		{"CheckUpload fits", driver.CheckUpload(d, buf, make([]byte, 8)), nil, ""},
		{"CheckUpload too long", driver.CheckUpload(d, buf, make([]byte, 9)), device.ErrShape, "dev: Upload of 9 bytes into a 8-byte buffer"},
		{"CheckUpload foreign", driver.CheckUpload(other, buf, nil), device.ErrForeignBuffer, "Upload: dst"},
		{"CheckDownload fits", driver.CheckDownload(d, make([]byte, 8), buf), nil, ""},
		{"CheckDownload too long", driver.CheckDownload(d, make([]byte, 9), buf), device.ErrShape, "dev: Download of 9 bytes"},
		{"CheckDownload zero", driver.CheckDownload(d, nil, device.Buffer{}), device.ErrForeignBuffer, "Download: src is the zero buffer"},
		{"CheckCopyToDevice", driver.CheckCopyToDevice(d, buf, host), nil, ""},
		{"CheckCopyToDevice foreign", driver.CheckCopyToDevice(other, buf, host), device.ErrForeignBuffer, "CopyToDevice: dst"},
		{"CheckCopyToHost too long", driver.CheckCopyToHost(d, driver.NewHostBuffer(d, 0, make([]byte, 9)), buf), device.ErrShape, "dev: CopyToHost of 9 bytes"},
		{"Free foreign", driver.Free(other, nil, buf), device.ErrForeignBuffer, "Free: the buffer"},
		{"Free empty", driver.Free(d, nil, driver.NewBuffer(d, 0, 0, nil)), nil, ""}, // holds no memory: c is not touched
		{"FreeStaging foreign", driver.FreeStaging(other, nil, host), device.ErrForeignBuffer, "FreeStaging: the buffer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == nil && tc.err != nil:
				t.Errorf("got %v, want nil", tc.err)
			case tc.want != nil && !errors.Is(tc.err, tc.want):
				t.Errorf("got %v, want an error matching %v", tc.err, tc.want)
			case tc.want != nil && !strings.Contains(tc.err.Error(), tc.says):
				t.Errorf("got %q, want it to say %q", tc.err, tc.says)
			}
		})
	}
}

// TestStaging serves and returns a staging buffer from a host cache.
func TestStaging(t *testing.T) {
	d := &named{name: "dev"}
	c := alloc.NewHostCache(alloc.NewHost(0))
	t.Cleanup(func() {
		if err := c.ReleaseAll(); err != nil {
			t.Error(err)
		}
	})
	if _, err := driver.AllocStaging(d, c, 0); !errors.Is(err, device.ErrShape) {
		t.Errorf("AllocStaging of 0 bytes = %v, want ErrShape", err)
	}
	h, err := driver.AllocStaging(d, c, 100)
	if err != nil {
		t.Fatal(err)
	}
	if h.Len() != 100 || len(h.Bytes()) != 100 || cap(h.Bytes()) != 100 || h.Device() != device.Device(d) {
		t.Errorf("AllocStaging(100) = %d bytes (len %d, cap %d) of %v, want exactly 100 of dev", h.Len(), len(h.Bytes()), cap(h.Bytes()), h.Device())
	}
	if err := driver.FreeStaging(d, c, h); err != nil {
		t.Fatal(err)
	}
	if err := driver.FreeStaging(d, c, h); err == nil {
		t.Error("second FreeStaging of the same buffer succeeded")
	}
}
