// Command tagger trains a sequence tagger (a tag per token: part of
// speech, syntactic role) with a bidirectional LSTM or GRU, evaluates it
// and predicts with it: go run ./examples/tagger train. See package
// examples/internal/seqcli for the commands and flags.
package main

import "github.com/gocurrent/gocurrent/examples/internal/seqcli"

func main() { seqcli.Main(seqcli.Tagging) }
