package kern

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The fused cell kernels against an unrolled gorgonia graph of primitive
// ops (Slice, BroadcastAdd, Sigmoid, Tanh, HadamardProd, Add, Sub, Sum)
// built from the PyTorch equations, differentiated by gorgonia.Grad and run
// on a TapeMachine, in float64. Both sides evaluate the same functions with
// library sigmoid/tanh in a different order, so they agree to a few float64
// roundings; oracleTol = 1e-9 leaves a wide margin while catching any wrong
// term.
const oracleTol = 1e-9

// oracleShapes keep hidden ≥ 2: gorgonia's Slice drops an axis sliced to
// width 1.
var oracleShapes = []struct{ rows, hidden int }{{2, 3}, {3, 4}}

// mustFor returns a function that unwraps a gorgonia result, failing t on
// an error.
func mustFor(t *testing.T) func(*G.Node, error) *G.Node {
	return func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// input is a float64 graph input holding data with the given shape.
func input(g *G.ExprGraph, name string, data []float64, shape ...int) *G.Node {
	v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), data...)))
	if len(shape) == 1 {
		return G.NewVector(g, tensor.Float64, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
	}
	return G.NewMatrix(g, tensor.Float64, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
}

// gate is columns [q·hidden, (q+1)·hidden) of a [rows, k·hidden] node.
func gate(t *testing.T, n *G.Node, rows, hidden, q int) *G.Node {
	t.Helper()
	return mustFor(t)(G.Slice(n, G.S(0, rows), G.S(q*hidden, (q+1)*hidden)))
}

// values reads a node's value (or its gradient) as float64s.
func values(t *testing.T, n *G.Node, grad bool) []float64 {
	t.Helper()
	v := n.Value()
	if grad {
		var err error
		if v, err = n.Grad(); err != nil {
			t.Fatalf("gradient of %v: %v", n, err)
		}
	}
	d, ok := v.Data().([]float64)
	if !ok {
		t.Fatalf("%v holds %T, want []float64", n, v.Data())
	}
	return append([]float64(nil), d...)
}

func TestLSTMCellAgainstGorgonia(t *testing.T) {
	for _, s := range oracleShapes {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			B, H := s.rows, s.hidden
			must := mustFor(t)
			rng := newRand(uint64(100 + H))
			pre, cPrev := uniform(rng, 4*B*H, 2), uniform(rng, B*H, 2)
			bih, bhh := uniform(rng, 4*H, 0.5), uniform(rng, 4*H, 0.5)
			w, u := uniform(rng, B*H, 1), uniform(rng, B*H, 1)

			g := G.NewGraph()
			nPre := input(g, "pre", pre, B, 4*H)
			nBih := input(g, "bih", bih, 4*H)
			nBhh := input(g, "bhh", bhh, 4*H)
			nCPrev := input(g, "cPrev", cPrev, B, H)
			nW := input(g, "w", w, B, H)
			nU := input(g, "u", u, B, H)

			x := must(G.BroadcastAdd(nPre, nBih, nil, []byte{0}))
			x = must(G.BroadcastAdd(x, nBhh, nil, []byte{0}))
			i := must(G.Sigmoid(gate(t, x, B, H, 0)))
			f := must(G.Sigmoid(gate(t, x, B, H, 1)))
			gg := must(G.Tanh(gate(t, x, B, H, 2)))
			o := must(G.Sigmoid(gate(t, x, B, H, 3)))
			c := must(G.Add(must(G.HadamardProd(f, nCPrev)), must(G.HadamardProd(i, gg))))
			h := must(G.HadamardProd(o, must(G.Tanh(c))))
			cost := must(G.Add(
				must(G.Sum(must(G.HadamardProd(nW, h)))),
				must(G.Sum(must(G.HadamardProd(nU, c))))))
			if _, err := G.Grad(cost, nPre, nCPrev, nBih, nBhh); err != nil {
				t.Fatal(err)
			}
			m := G.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}

			gc, gh := make([]float64, B*H), make([]float64, B*H)
			act := make([]float64, 4*B*H)
			LSTMCell(H, pre, bih, bhh, cPrev, gc, gh, act)
			dPre, dcPrev := make([]float64, 4*B*H), make([]float64, B*H)
			LSTMCellGrad(H, act, cPrev, gc, w, u, dPre, dcPrev)
			dBias := make([]float64, 4*H)
			SumRows(4*H, 0, 4*H, dPre, dBias, false)

			checkClose(t, "c", gc, values(t, c, false), oracleTol, oracleTol)
			checkClose(t, "h", gh, values(t, h, false), oracleTol, oracleTol)
			checkClose(t, "dPre", dPre, values(t, nPre, true), oracleTol, oracleTol)
			checkClose(t, "dcPrev", dcPrev, values(t, nCPrev, true), oracleTol, oracleTol)
			checkClose(t, "dBiasIH", dBias, values(t, nBih, true), oracleTol, oracleTol)
			checkClose(t, "dBiasHH", dBias, values(t, nBhh, true), oracleTol, oracleTol)
		})
	}
}

func TestGRUCellAgainstGorgonia(t *testing.T) {
	for _, s := range oracleShapes {
		t.Run(fmt.Sprintf("rows=%d/hidden=%d", s.rows, s.hidden), func(t *testing.T) {
			B, H := s.rows, s.hidden
			must := mustFor(t)
			rng := newRand(uint64(200 + H))
			xPre, hPre, hPrev := uniform(rng, 3*B*H, 2), uniform(rng, 3*B*H, 2), uniform(rng, B*H, 1)
			bih, bhh := uniform(rng, 3*H, 0.5), uniform(rng, 3*H, 0.5)
			w := uniform(rng, B*H, 1)

			g := G.NewGraph()
			nX := input(g, "xPre", xPre, B, 3*H)
			nY := input(g, "hPre", hPre, B, 3*H)
			nBih := input(g, "bih", bih, 3*H)
			nBhh := input(g, "bhh", bhh, 3*H)
			nHPrev := input(g, "hPrev", hPrev, B, H)
			nW := input(g, "w", w, B, H)

			x := must(G.BroadcastAdd(nX, nBih, nil, []byte{0}))
			y := must(G.BroadcastAdd(nY, nBhh, nil, []byte{0}))
			r := must(G.Sigmoid(must(G.Add(gate(t, x, B, H, 0), gate(t, y, B, H, 0)))))
			z := must(G.Sigmoid(must(G.Add(gate(t, x, B, H, 1), gate(t, y, B, H, 1)))))
			n := must(G.Tanh(must(G.Add(gate(t, x, B, H, 2), must(G.HadamardProd(r, gate(t, y, B, H, 2)))))))
			// h = (1-z)·n + z·hPrev, written n + z·(hPrev - n) to avoid a
			// broadcast constant.
			h := must(G.Add(n, must(G.HadamardProd(z, must(G.Sub(nHPrev, n))))))
			cost := must(G.Sum(must(G.HadamardProd(nW, h))))
			if _, err := G.Grad(cost, nX, nY, nHPrev, nBih, nBhh); err != nil {
				t.Fatal(err)
			}
			m := G.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}

			gh, act := make([]float64, B*H), make([]float64, 4*B*H)
			GRUCell(H, xPre, hPre, bih, bhh, hPrev, gh, act)
			dxPre, dhPre, dhPrev := make([]float64, 3*B*H), make([]float64, 3*B*H), make([]float64, B*H)
			GRUCellGrad(H, act, hPrev, w, dxPre, dhPre, dhPrev, false)
			dBih, dBhh := make([]float64, 3*H), make([]float64, 3*H)
			SumRows(3*H, 0, 3*H, dxPre, dBih, false)
			SumRows(3*H, 0, 3*H, dhPre, dBhh, false)

			checkClose(t, "h", gh, values(t, h, false), oracleTol, oracleTol)
			checkClose(t, "dxPre", dxPre, values(t, nX, true), oracleTol, oracleTol)
			checkClose(t, "dhPre", dhPre, values(t, nY, true), oracleTol, oracleTol)
			// In the graph hPre is an input, so hPrev's gradient is the
			// direct part only, as GRUCellGrad's dhPrev.
			checkClose(t, "dhPrev", dhPrev, values(t, nHPrev, true), oracleTol, oracleTol)
			checkClose(t, "dBiasIH", dBih, values(t, nBih, true), oracleTol, oracleTol)
			checkClose(t, "dBiasHH", dBhh, values(t, nBhh, true), oracleTol, oracleTol)
		})
	}
}
