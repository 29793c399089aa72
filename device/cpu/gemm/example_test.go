package gemm_test

import (
	"fmt"

	"github.com/gocurrent/gocurrent/device/cpu/gemm"
	"gorgonia.org/tensor"
)

// A recurrent step's product h·Wᵀ: h is batch×hidden, W (4 gates × hidden)
// is stored row-major as [4·hidden][hidden], so B is transposed.
func ExampleSgemm() {
	const batch, hidden = 2, 3
	h := []float32{
		1, 0, 2,
		0, 1, 1,
	}
	w := []float32{ // 4 rows of hidden weights
		1, 1, 1,
		0, 1, 0,
		2, 0, 0,
		0, 0, -1,
	}
	g := make([]float32, batch*4)
	gemm.Sgemm(false, true, batch, 4, hidden, 1, h, hidden, w, hidden, 0, g, 4)
	fmt.Println(g[:4])
	fmt.Println(g[4:])
	// Output:
	// [3 0 2 -2]
	// [2 1 0 -1]
}

// Installing the package's BLAS makes gorgonia.org/tensor's float32
// products use Sgemm.
func ExampleBLAS() {
	prev := tensor.WhichBLAS()
	tensor.Use(gemm.BLAS{})
	defer tensor.Use(prev)

	a := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))
	b := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{0, 1, 1, 0}))
	c, err := tensor.MatMul(a, b)
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Data())
	// Output:
	// [2 1 4 3]
}
