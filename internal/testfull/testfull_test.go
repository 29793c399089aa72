package testfull

import "testing"

func TestCases(t *testing.T) {
	cases := []int{1, 2, 3}
	t.Setenv(Env, "")
	if got := Cases(cases, 1); len(got) != 1 || Count(10, 2) != 2 || On() {
		t.Errorf("quick: Cases = %v, Count = %d, On = %v; want [1], 2, false", got, Count(10, 2), On())
	}
	t.Setenv(Env, "1")
	if got := Cases(cases, 1); len(got) != 3 || Count(10, 2) != 10 || !On() {
		t.Errorf("full: Cases = %v, Count = %d, On = %v; want all 3, 10, true", got, Count(10, 2), On())
	}
}
