package godata_test

import (
	"fmt"
	"strings"

	"github.com/gocurrent/gocurrent/examples/internal/godata"
)

func ExampleTagFile() {
	src := `package greet

import "fmt"

func Greet(name string) {
	msg := fmt.Sprint("hello, ", name)
	fmt.Println(msg, len(msg))
}
`
	sents, err := godata.TagFile("greet.go", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range sents {
		var line []string
		for i, tok := range s.Tokens {
			line = append(line, tok+"/"+s.Tags[i])
		}
		fmt.Println(strings.Join(line, " "))
	}
	// Output:
	// func/kw Greet/decl (/punct name/param string/type )/punct {/punct
	// msg/decl :=/op fmt/pkg ./punct Sprint/call (/punct "hello, "/str ,/punct name/var )/punct
	// fmt/pkg ./punct Println/call (/punct msg/var ,/punct len/builtin (/punct msg/var )/punct )/punct
}

func ExampleChunks() {
	src := `package sum

// Sum adds up xs.
func Sum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}
`
	chunks, err := godata.Chunks("sum.go", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	label, _ := godata.ClassOf("math/sum/sum.go")
	for _, c := range chunks {
		fmt.Println(c.Func, label, strings.Join(c.Tokens, " "))
	}
	// Output:
	// Sum math func Sum ( xs [ ] int ) int { total := 0 for _ , x := range xs { total += x } return total }
}
