#!/usr/bin/python3
"""PyTorch's packed bidirectional LSTM over variable-length batches.

Usage: torch_seq.py [iterations] [--device cpu|cuda:N]
The workload of rnn's BenchmarkSequences: nn.LSTM(128, 256, num_layers=2,
bidirectional=True), batch 32, lengths 5 + (37·i + 11) mod 56 for sequence i
(5 to 60, padded to 60), packed with pack_padded_sequence(enforce_sorted=False)
every iteration as a tagger does; and a fixed-length batch of the same token
count (32 sequences of the mean length) unpacked. Forward runs under
torch.no_grad(); forward+backward back-propagates sum(output · dy). tokens/s
counts real tokens only. Prints one JSON line. On the CPU (the default) it runs
on 2 threads, as the README's figures; on a GPU (--device cuda:0) cuDNN runs
the layers, FP32 without TF32 (as gocurrent's default), and each timing waits
for the device.
"""
import argparse, json, time
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence

ap = argparse.ArgumentParser()
ap.add_argument("iters", nargs="?", type=int, default=10)
ap.add_argument("--device", default="cpu")
args = ap.parse_args()
iters, dev = args.iters, torch.device(args.device)
B, I, H, T = 32, 128, 256, 60
if dev.type == "cpu":
    torch.set_num_threads(2)
else:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
lengths = [5 + (i * 37 + 11) % 56 for i in range(B)]
total = sum(lengths)
mean = (total + B // 2) // B
m = nn.LSTM(I, H, num_layers=2, bidirectional=True).to(dev)
x = torch.full((T, B, I), 0.1, device=dev)
xf = torch.full((mean, B, I), 0.1, device=dev)
lens = torch.tensor(lengths)  # on the CPU, as pack_padded_sequence wants


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run(packed, backward):
    def once():
        if packed:
            inp = pack_padded_sequence(x, lens, enforce_sorted=False)
        else:
            inp = xf
        if backward:
            m.zero_grad()
            out, _ = m(inp)
            data = out.data if packed else out
            (data * 0.01).sum().backward()
        else:
            with torch.no_grad():
                m(inp)
    once()  # warm-up
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        once()
    sync()
    dt = time.perf_counter() - t0
    return (total if packed else mean * B) * iters / dt


res = {"impl": "pytorch", "torch": torch.__version__, "device": str(dev),
       "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
       "threads": torch.get_num_threads(), "tokens": total,
       "lengths_forward_tokens_per_s": run(True, False),
       "lengths_forward_backward_tokens_per_s": run(True, True),
       "fixed%d_forward_tokens_per_s" % mean: run(False, False),
       "fixed%d_forward_backward_tokens_per_s" % mean: run(False, True)}
print(json.dumps(res))
