package alloc

import (
	"fmt"
	"sort"
	"strings"
)

// Category says what an allocation holds, so that the allocator can say
// where every byte goes: each block carries the category it was allocated
// with, and Stats keeps current and peak bytes per category.
type Category uint8

const (
	// Other is an allocation nobody tagged. The library tags all of its
	// own; Other stays zero in a training run.
	Other Category = iota
	// Parameters are the model's weights (and constants it keeps beside
	// them, such as a loss's class weights).
	Parameters
	// Gradients are the parameters' gradient buffers.
	Gradients
	// OptimizerState is what the optimizer keeps per parameter (Adam's
	// moments, momentum), allocated at the first step.
	OptimizerState
	// Activations are what a training forward keeps for its backward
	// (a recurrent layer's states and gates, dropout masks, saved inputs).
	Activations
	// Workspace is the temporaries of one pass: outputs and gradients that
	// flow between layers, the no-grad passes' buffers, device workspaces.
	Workspace
	// Batches are inputs and targets on the device (the loader's ring of
	// device slots, sampling's ids).
	Batches
	// State is recurrent state carried from one window to the next (h and
	// c of truncated backpropagation through time, and its backups).
	State
	// NumCategories is the number of categories.
	NumCategories
)

var categoryNames = [NumCategories]string{
	Other:          "other",
	Parameters:     "parameters",
	Gradients:      "gradients",
	OptimizerState: "optimizer_state",
	Activations:    "activations",
	Workspace:      "workspace",
	Batches:        "batches",
	State:          "state",
}

// String is the category's name in tables and JSON: "parameters",
// "optimizer_state", ...
func (c Category) String() string {
	if c < NumCategories {
		return categoryNames[c]
	}
	return fmt.Sprintf("Category(%d)", uint8(c))
}

// Categories lists every category in order, Other last, for tables.
func Categories() []Category {
	return []Category{Parameters, Gradients, OptimizerState, Activations, Workspace, Batches, State, Other}
}

// ParseCategory is the inverse of String.
func ParseCategory(s string) (Category, error) {
	for c, n := range categoryNames {
		if n == s {
			return Category(c), nil
		}
	}
	return 0, fmt.Errorf("alloc: unknown memory category %q", s)
}

// FormatCategories lists the categories holding bytes in v, largest first
// (ties in Categories' order): "activations 1.20 GiB, parameters 9.50
// MiB".
func FormatCategories(v [NumCategories]int64) string {
	cats := Categories()
	sort.SliceStable(cats, func(i, j int) bool { return v[cats[i]] > v[cats[j]] })
	var parts []string
	for _, c := range cats {
		if v[c] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", c, FormatSize(v[c])))
		}
	}
	return strings.Join(parts, ", ")
}

// CategoryArray holds a Stat per category, indexed by Category. Byte
// figures count rounded block sizes, so the currents add up to
// AllocatedBytes[AllPools].Current.
type CategoryArray [NumCategories]Stat

// Total is the sum of the current values.
func (a *CategoryArray) Total() int64 {
	var n int64
	for i := range a {
		n += a[i].Current
	}
	return n
}

// currents returns the current value of every category.
func (a *CategoryArray) currents() [NumCategories]int64 {
	var v [NumCategories]int64
	for i := range a {
		v[i] = a[i].Current
	}
	return v
}
