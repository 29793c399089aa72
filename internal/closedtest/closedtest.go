// Package closedtest checks what an object does after Close, for the tests
// of every package whose types have one: each exported method is called on
// the closed object, and the table of calls must name every method the
// type has (reflect lists them), so a method added later without a
// behaviour after Close fails the test until someone decides one.
//
// Only tests import this package.
package closedtest

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// Call is one exported method's call on a closed object.
type Call struct {
	// Closed says the call must return an error matching the sentinel
	// (ErrClosed) whose message names the method, as Type.Method.
	Closed bool
	// F makes the call. With Closed, its error is the method's; without,
	// F checks the method's result itself (a getter's value, a zero
	// Buffer) and returns an error describing what is wrong, nil if
	// nothing is.
	F func() error
	// Says is what the message of a Closed call's error must contain,
	// when not Type.Method (a package whose messages name the object
	// otherwise, "dist: nccl rank 0 of 2: ... closed").
	Says string
}

// Check calls every entry of calls on obj, a closed object named name
// (its type's name, as the error messages spell it), after checking that
// calls has an entry for each exported method of obj's type and none for
// a method it lacks. A call that panics fails the test with the panic.
func Check(t testing.TB, name string, obj any, sentinel error, calls map[string]Call) {
	t.Helper()
	typ := reflect.TypeOf(obj)
	for i := range typ.NumMethod() {
		if m := typ.Method(i).Name; calls[m].F == nil {
			t.Errorf("%s.%s is not in the table of calls after Close: decide what it does on a closed %s and add it", name, m, name)
		}
	}
	names := make([]string, 0, len(calls))
	for m := range calls {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		c := calls[m]
		if _, ok := typ.MethodByName(m); !ok {
			t.Errorf("the table of calls after Close names %s.%s, which %T does not have", name, m, obj)
			continue
		}
		err := safely(c.F)
		says := c.Says
		if says == "" {
			says = name + "." + m
		}
		var p *panicked
		switch {
		case errors.As(err, &p):
			t.Errorf("%s.%s after Close panicked: %v", name, m, p.v)
		case c.Closed && !errors.Is(err, sentinel):
			t.Errorf("%s.%s after Close = %v, want an error matching %v", name, m, err, sentinel)
		case c.Closed && !strings.Contains(err.Error(), says):
			t.Errorf("%s.%s after Close = %q, want a message saying %q", name, m, err, says)
		case !c.Closed && err != nil:
			t.Errorf("%s.%s after Close: %v", name, m, err)
		}
	}
}

type panicked struct{ v any }

func (p *panicked) Error() string { return fmt.Sprint("panic: ", p.v) }

func safely(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicked{v}
		}
	}()
	return f()
}
