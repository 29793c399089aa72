// Command classify trains a sequence classifier (a label per sequence)
// with a bidirectional LSTM or GRU, evaluates it and predicts with it: go
// run ./examples/classify train. See package examples/internal/seqcli for
// the commands and flags.
package main

import "github.com/gocurrent/gocurrent/examples/internal/seqcli"

func main() { seqcli.Main(seqcli.Classification) }
