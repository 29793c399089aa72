package device

import (
	"encoding/binary"
	"math"
)

// RatesSize is the bytes of an optimizer step's Rates buffer.
const RatesSize = 32

// Rates is what changes from one optimizer step to the next, as the
// update kernels read it from device memory when their Rates buffer is set
// (SGD, Adam, RMSprop): a recorded update (Grapher) then serves every
// step, each replay reading the values the caller wrote for it.
type Rates struct {
	LR   float64
	Step int // 1-based
	// Beta1 and Beta2 are the Adam step's own (their powers go into the
	// buffer); any values for SGD and RMSprop.
	Beta1, Beta2 float64
}

// Put writes r as a Rates buffer holds it, four Float64 in the host's
// byte order (the devices' own): LR, Step, Beta1^Step and Beta2^Step. The
// powers are math.Pow's, as the kernels compute them from LR and Step
// arguments, so a step given its rates in memory is bit for bit the step
// given them as arguments. dst must hold RatesSize bytes.
func (r Rates) Put(dst []byte) {
	t := float64(r.Step)
	for i, v := range [4]float64{r.LR, t, math.Pow(r.Beta1, t), math.Pow(r.Beta2, t)} {
		binary.NativeEndian.PutUint64(dst[8*i:], math.Float64bits(v))
	}
}
