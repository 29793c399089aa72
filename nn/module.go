package nn

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gocurrent/gocurrent/rnn"
)

// Mode says what a forward pass is for: rnn's, under nn's names.
type Mode = rnn.Mode

const (
	// Train saves what Backward needs and applies dropout.
	Train = rnn.Train
	// NoGrad saves nothing and applies no dropout: evaluation, inference.
	NoGrad = rnn.NoGrad
)

// Group is a named set of parameters. A module's tensors are named
// Group.Name + "." + the parameter's name in a checkpoint (a group with
// an empty name contributes the parameter's name alone); a layer's one
// group has the empty name until a Sequential or Prefix names it.
type Group struct {
	Name   string
	Params *rnn.Params
}

// Module is one piece of a model: a layer, a head, a chain of them, or a
// model of the user's own. Every module of this package implements it,
// and so may any type of the user's.
//
// Forward queues the forward pass of x in mode and returns the output,
// which belongs to the module: valid until its next Forward, and, for a
// training forward, left alone until its Backward (a module may keep a
// reference to its input for Backward, so a caller leaves a training
// forward's input as it is until then, as the modules of a chain do for
// each other). Between a training forward and its Backward the caller
// runs no other forward of the module; the trainer never does, and
// evaluates between steps.
//
// Backward differentiates the last training forward, given dy, the
// gradient of the loss with respect to its output (same shape, read, not
// written): it adds the parameters' gradients into their gradient buffers
// and returns the gradient with respect to the input, valid until the
// next Backward, or the zero Tensor for an input that has none (token
// ids). A second Backward for one forward is rnn.ErrNoForward.
//
// Groups lists the parameters, in a fixed order; Close frees the
// module's memory (its parameters included), after which calls return
// errors matching rnn.ErrClosed. A module is used by one goroutine at a
// time: a call meeting another's is rnn.ErrBusy.
type Module interface {
	Forward(mode Mode, x Tensor) (Tensor, error)
	Backward(dy Tensor) (Tensor, error)
	Groups() []Group
	Close() error
}

// MultiInput is implemented by a module over more than one input (an
// encoder-decoder's source and the decoder's inputs): a trainer whose
// batches carry several inputs calls ForwardInputs with them, in the
// dataset's order, instead of Forward. Backward is the Module's; its
// returned gradient is that of the first input.
type MultiInput interface {
	ForwardInputs(mode Mode, xs []Tensor) (Tensor, error)
}

// Random is implemented by a module that draws random numbers in
// training (dropout masks). A checkpoint records RandomState and resuming
// restores it with SetRandomState, so that a resumed run draws what an
// uninterrupted one would have.
type Random interface {
	RandomState() []uint64
	SetRandomState([]uint64) error
}

// Prefix names groups under name: a group "" becomes name, a group g
// becomes name.g. A module of the user's own builds its Groups from its
// parts' this way (Prefix("enc", enc.Groups()), ...).
func Prefix(name string, groups []Group) []Group {
	out := make([]Group, len(groups))
	for i, g := range groups {
		out[i] = g
		switch {
		case g.Name == "":
			out[i].Name = name
		case name != "":
			out[i].Name = name + "." + g.Name
		}
	}
	return out
}

// named is a module with the name a Sequential gives it.
type named struct {
	name string
	Module
}

// Named gives m a name in a Sequential (its groups are named name.…),
// in place of its index: PyTorch's Sequential over an OrderedDict.
func Named(name string, m Module) Module { return named{name: name, Module: m} }

// Sequential is a chain of modules: Forward runs each on the output of
// the one before, Backward runs their backwards in reverse, so a chain is
// trained without a Backward written by hand. Child i is named by its
// index ("0", "1", …), as in PyTorch, or by Named; its groups are
// Prefix'ed with that name. Sequential is Random when a child is (its
// state the children's, each after its length), and passes SetRecompute
// to the children that have it.
type Sequential struct {
	g        guard
	names    []string
	children []Module
}

// NewSequential chains ms, in order; it takes ownership of them (Close
// closes every one). A name given twice is an error.
func NewSequential(ms ...Module) (*Sequential, error) {
	s := &Sequential{}
	seen := map[string]bool{}
	for i, m := range ms {
		name := strconv.Itoa(i)
		if n, ok := m.(named); ok {
			name, m = n.name, n.Module
		}
		if m == nil {
			return nil, fmt.Errorf("nn: NewSequential: module %s is nil", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("nn: NewSequential: two modules named %q", name)
		}
		seen[name] = true
		s.names = append(s.names, name)
		s.children = append(s.children, m)
	}
	if len(s.children) == 0 {
		return nil, errors.New("nn: NewSequential: no modules")
	}
	return s, nil
}

// Len is the number of modules; At is module i (its own, unwrapped).
func (s *Sequential) Len() int          { return len(s.children) }
func (s *Sequential) At(i int) Module   { return s.children[i] }
func (s *Sequential) Name(i int) string { return s.names[i] }

// Forward implements Module.
func (s *Sequential) Forward(mode Mode, x Tensor) (Tensor, error) {
	if err := s.g.enter("Sequential", "Forward"); err != nil {
		return Tensor{}, err
	}
	defer s.g.leave()
	for i, m := range s.children {
		y, err := m.Forward(mode, x)
		if err != nil {
			return Tensor{}, fmt.Errorf("nn: Sequential %s: %w", s.names[i], err)
		}
		x = y
	}
	return x, nil
}

// Backward implements Module: the children's backwards, the last first.
func (s *Sequential) Backward(dy Tensor) (Tensor, error) {
	if err := s.g.enter("Sequential", "Backward"); err != nil {
		return Tensor{}, err
	}
	defer s.g.leave()
	for i := len(s.children) - 1; i >= 0; i-- {
		dx, err := s.children[i].Backward(dy)
		if err != nil {
			return Tensor{}, fmt.Errorf("nn: Sequential %s: %w", s.names[i], err)
		}
		if dx.IsZero() && i > 0 {
			return Tensor{}, fmt.Errorf("nn: Sequential %s returned no gradient for its input, which %s produced: a module without an input gradient (an embedding) must come first",
				s.names[i], s.names[i-1])
		}
		dy = dx
	}
	return dy, nil
}

// Groups implements Module: every child's, Prefix'ed with its name.
func (s *Sequential) Groups() []Group {
	var out []Group
	for i, m := range s.children {
		out = append(out, Prefix(s.names[i], m.Groups())...)
	}
	return out
}

// RandomState implements Random: for each child that is Random, in
// order, the length of its state and the state.
func (s *Sequential) RandomState() []uint64 {
	var out []uint64
	for _, m := range s.children {
		if r, ok := m.(Random); ok {
			v := r.RandomState()
			out = append(out, uint64(len(v)))
			out = append(out, v...)
		}
	}
	return out
}

// SetRandomState implements Random, from what RandomState returned.
func (s *Sequential) SetRandomState(v []uint64) error {
	if err := s.g.enter("Sequential", "SetRandomState"); err != nil {
		return err
	}
	defer s.g.leave()
	rest := v
	for i, m := range s.children {
		r, ok := m.(Random)
		if !ok {
			continue
		}
		if len(rest) == 0 || rest[0] > uint64(len(rest)-1) {
			return fmt.Errorf("nn: Sequential.SetRandomState: %d numbers end before module %s's state", len(v), s.names[i])
		}
		n := int(rest[0])
		if err := r.SetRandomState(rest[1 : 1+n]); err != nil {
			return fmt.Errorf("nn: Sequential %s: %w", s.names[i], err)
		}
		rest = rest[1+n:]
	}
	if len(rest) != 0 {
		return fmt.Errorf("nn: Sequential.SetRandomState: %d numbers left over after the modules' states", len(rest))
	}
	return nil
}

// SetRecompute passes k to every child with a SetRecompute(int) error
// method (the recurrent modules: rnn.Config.Recompute).
func (s *Sequential) SetRecompute(k int) error {
	if err := s.g.enter("Sequential", "SetRecompute"); err != nil {
		return err
	}
	defer s.g.leave()
	for i, m := range s.children {
		if r, ok := m.(interface{ SetRecompute(int) error }); ok {
			if err := r.SetRecompute(k); err != nil {
				return fmt.Errorf("nn: Sequential %s: %w", s.names[i], err)
			}
		}
	}
	return nil
}

// Close implements Module: it closes every child, and returns their
// errors joined.
func (s *Sequential) Close() error {
	if first, err := s.g.close("Sequential"); !first {
		return err
	}
	var errs []error
	for i, m := range s.children {
		if err := m.Close(); err != nil {
			errs = append(errs, fmt.Errorf("nn: Sequential %s: %w", s.names[i], err))
		}
	}
	return errors.Join(errs...)
}

var (
	_ Module = (*Sequential)(nil)
	_ Random = (*Sequential)(nil)
)
