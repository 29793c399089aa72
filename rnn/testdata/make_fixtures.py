#!/usr/bin/python3
"""PyTorch reference outputs and gradients for the rnn package's LSTM and GRU.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64 so that the
comparison measures our kernels, not float32 rounding in PyTorch:

    apt-get install -y python3-torch libopenblas0-pthread
    /usr/bin/python3 rnn/testdata/make_fixtures.py > rnn/testdata/torch_rnn.json

Every case is nn.LSTM or nn.GRU(input_size, hidden_size, num_layers,
bias=...) in its default sequence-first layout, with PyTorch's own seeded
initialisation, run on a random input x[T, B, I] (and a random initial state
when "initial_state" is true, else zeros). The loss is
    L = sum(out * w_out) + sum(h_n * w_h) (+ sum(c_n * w_c) for LSTM)
with random weights recorded in the case, and the gradients of L with
respect to x, every parameter (PyTorch names), h0 and c0 are recorded.
Tensors are flat row-major lists with their shapes.
"""
import itertools
import json
import sys

import torch

T, B, I, H = 5, 3, 4, 6


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def case(cell, layers, bias, initial_state, seed):
    torch.manual_seed(seed)
    nn_cls = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    rnn = nn_cls(I, H, layers, bias=bias).double()
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    state = None
    h0 = c0 = None
    if initial_state:
        h0 = torch.randn(layers, B, H, dtype=torch.float64, requires_grad=True)
        if cell == "lstm":
            c0 = torch.randn(layers, B, H, dtype=torch.float64, requires_grad=True)
            state = (h0, c0)
        else:
            state = h0
    out, st = rnn(x, state)
    if cell == "lstm":
        h_n, c_n = st
    else:
        h_n, c_n = st, None
    rec = {
        "cell": cell, "layers": layers, "bias": bias, "initial_state": initial_state,
        "seed": seed, "seq": T, "batch": B, "input": I, "hidden": H,
    }
    return record(rec, rnn, x, out, h_n, c_n, h0, c0)


def record(rec, rnn, x, out, h_n, c_n, h0, c0):
    """Adds to rec the inputs, the random loss weights, the outputs and the
    gradients of L = sum(out·w_out) + sum(h_n·w_h) (+ sum(c_n·w_c))."""
    w_out = torch.randn_like(out)
    w_h = torch.randn_like(h_n)
    loss = (out * w_out).sum() + (h_n * w_h).sum()
    rec.update({
        "x": flat(x), "w_out": flat(w_out), "w_h": flat(w_h),
        "params": {name: flat(p) for name, p in rnn.named_parameters()},
    })
    if c_n is not None:
        w_c = torch.randn_like(c_n)
        loss = loss + (c_n * w_c).sum()
        rec["w_c"] = flat(w_c)
    loss.backward()
    rec.update({
        "out": flat(out), "h_n": flat(h_n), "loss": float(loss),
        "grad_x": flat(x.grad),
        "grad_params": {name: flat(p.grad) for name, p in rnn.named_parameters()},
    })
    if c_n is not None:
        rec["c_n"] = flat(c_n)
    if h0 is not None:
        rec["h0"] = flat(h0)
        rec["grad_h0"] = flat(h0.grad)
    if c0 is not None:
        rec["c0"] = flat(c0)
        rec["grad_c0"] = flat(c0.grad)
    return rec


def main():
    cases = []
    for i, (cell, layers, bias, init) in enumerate(
            itertools.product(["lstm", "gru"], [1, 2, 3], [True, False], [False, True])):
        cases.append(case(cell, layers, bias, init, seed=1000 + i))
    json.dump({
        "made_by": "rnn/testdata/make_fixtures.py",
        "torch": torch.__version__,
        "dtype": "float64",
        "cases": cases,
    }, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
