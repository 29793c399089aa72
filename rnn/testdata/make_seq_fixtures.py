#!/usr/bin/python3
"""PyTorch references for bidirectional stacks and variable-length batches.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64:

    apt-get install -y python3-torch libopenblas0-pthread
    /usr/bin/python3 rnn/testdata/make_seq_fixtures.py > rnn/testdata/torch_seq.json

Every case is nn.LSTM or nn.GRU(input_size, hidden_size, num_layers,
bias=..., bidirectional=...) with PyTorch's own seeded initialisation, run
on a random input x[T, B, I] (a random initial state when "initial_state"
is true, else none). With "lengths" the batch is packed with
pack_padded_sequence(x, lengths, enforce_sorted=False) (the lengths are in
no order, and include 1 and T and a repeated length), and the output is
unpacked with pad_packed_sequence(total_length=T), so padded positions are
zero; x's padded positions hold random values, which must not matter.
Without "lengths" the input runs unpacked. The loss is
    L = sum(out * w_out) + sum(h_n * w_h) (+ sum(c_n * w_c) for LSTM)
with random weights recorded in the case, w_out random at padded positions
too (which must not matter either), and the gradients of L with respect to
x, every parameter (PyTorch names, in PyTorch's order: "param_order"), h0
and c0 are recorded. Tensors are flat row-major lists with their shapes.
"""
import itertools
import json
import sys

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from make_fixtures import record

T, B, I, H = 5, 5, 3, 4


def lengths_for(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = [1, T, 3, T, 2]  # 1 and T, T twice: ties keep the caller's order
    perm = torch.randperm(B, generator=g).tolist()
    return [lengths[i] for i in perm]


def case(cell, layers, bidirectional, bias, initial_state, packed, seed):
    torch.manual_seed(seed)
    nn_cls = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    rnn = nn_cls(I, H, layers, bias=bias, bidirectional=bidirectional).double()
    dirs = 2 if bidirectional else 1
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    state = None
    h0 = c0 = None
    if initial_state:
        h0 = torch.randn(layers * dirs, B, H, dtype=torch.float64, requires_grad=True)
        if cell == "lstm":
            c0 = torch.randn(layers * dirs, B, H, dtype=torch.float64, requires_grad=True)
            state = (h0, c0)
        else:
            state = h0
    lengths = lengths_for(seed) if packed else None
    if packed:
        packed_x = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
        out, st = rnn(packed_x, state)
        out, _ = pad_packed_sequence(out, total_length=T)
    else:
        out, st = rnn(x, state)
    if cell == "lstm":
        h_n, c_n = st
    else:
        h_n, c_n = st, None
    rec = {
        "cell": cell, "layers": layers, "bidirectional": bidirectional, "bias": bias,
        "initial_state": initial_state, "lengths": lengths,
        "seed": seed, "seq": T, "batch": B, "input": I, "hidden": H,
        "param_order": [name for name, _ in rnn.named_parameters()],
    }
    return record(rec, rnn, x, out, h_n, c_n, h0, c0)


def main():
    cases = []
    seed = 2000
    # Packed: every combination. Unpacked: the bidirectional stacks (the
    # unidirectional ones are torch_rnn.json's).
    for cell, layers, bidir, bias, init in itertools.product(
            ["lstm", "gru"], [1, 2, 3], [False, True], [True, False], [False, True]):
        cases.append(case(cell, layers, bidir, bias, init, True, seed))
        seed += 1
        if bidir:
            cases.append(case(cell, layers, bidir, bias, init, False, seed))
            seed += 1
    json.dump({
        "made_by": "rnn/testdata/make_seq_fixtures.py",
        "torch": torch.__version__,
        "dtype": "float64",
        "cases": cases,
    }, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
