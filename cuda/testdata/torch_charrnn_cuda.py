#!/usr/bin/env python3
"""PyTorch + cuDNN on the GPU: the char-RNN workload of `charrnn bench -device cuda`.

Usage: torch_charrnn_cuda.py [lstm|gru] [hidden] [layers] [batch] [seq] [steps] [tf32 0|1]
                             [--profile STEPS] [--sync]

The workload of bench/torch_charrnn.py (vocabulary 65, embedding 64, the stack, a linear
head, cross-entropy, Adam 2e-3, clipping at norm 5, detached carried state; sampling at batch 1
with temperature 0.8), on cuda:0 with nn.LSTM / nn.GRU (cuDNN), timed with
torch.cuda.synchronize() around the measured loop. Prints one JSON line on stdout; warnings go
to stderr.

TF32: tf32=1 lets both cuBLAS matmuls and cuDNN's RNN GEMMs use TF32 tensor cores, tf32=0 makes
both IEEE float32 (what `charrnn bench` does without -tf32, and with it, TF32 for every cuBLAS
GEMM). PyTorch's own defaults differ: matmul IEEE, cuDNN TF32. The script sets them through
torch.backends.*.fp32_precision where this PyTorch has it (2.9 and later), else through the
allow_tf32 flags, and prints what is in effect under "tf32_settings".

--profile STEPS runs STEPS more training steps under torch.profiler and reports, per step, the
GPU kernels launched, the memory copies and sets, and their summed GPU time (what the
cuda-review's model of cuDNN's launches and overlap predicts).
--sync reads the loss every step (loss.item(): one host synchronisation per step, as the
gocurrent trainer does today); without it PyTorch never waits for the GPU inside the loop.
"""
import argparse
import json
import sys
import time
import warnings

import torch
import torch.nn as nn

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("cell", nargs="?", default="lstm", choices=["lstm", "gru"])
ap.add_argument("hidden", nargs="?", type=int, default=256)
ap.add_argument("layers", nargs="?", type=int, default=2)
ap.add_argument("batch", nargs="?", type=int, default=32)
ap.add_argument("seq", nargs="?", type=int, default=64)
ap.add_argument("steps", nargs="?", type=int, default=50)
ap.add_argument("tf32", nargs="?", type=int, default=0, choices=[0, 1])
ap.add_argument("--profile", type=int, default=0, metavar="STEPS")
ap.add_argument("--sync", action="store_true")
ap.add_argument("--sample", type=int, default=1000, metavar="TOKENS")
ap.add_argument("--device", default="cuda:0", help="cpu runs the script's logic without a GPU")
args = ap.parse_args()

on_gpu = args.device.startswith("cuda")
if on_gpu and not torch.cuda.is_available():
    sys.exit("torch_charrnn_cuda.py: no CUDA device visible to PyTorch")


def sync():
    if on_gpu:
        torch.cuda.synchronize()


def set_tf32(on):
    """Sets TF32 for matmuls and cuDNN RNNs; returns the settings in effect."""
    mode = "tf32" if on else "ieee"
    failed = None
    if hasattr(torch.backends, "fp32_precision"):  # PyTorch 2.9+
        try:
            torch.backends.cuda.matmul.fp32_precision = mode
            torch.backends.cudnn.fp32_precision = mode
            torch.backends.cudnn.rnn.fp32_precision = mode
            return {
                "api": "fp32_precision",
                "matmul": torch.backends.cuda.matmul.fp32_precision,
                "cudnn": torch.backends.cudnn.fp32_precision,
                "cudnn_rnn": torch.backends.cudnn.rnn.fp32_precision,
            }
        except (AttributeError, RuntimeError, ValueError) as e:
            failed = "fp32_precision: %s" % e
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return {
        "api": "allow_tf32" + (" (%s)" % failed if failed else ""),
        "matmul": "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee",
        "cudnn": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee",
        "cudnn_rnn": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee",
    }


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    tf32_settings = set_tf32(args.tf32 == 1)

V, E, H, L, B, T = 65, 64, args.hidden, args.layers, args.batch, args.seq
dev = torch.device(args.device)
torch.manual_seed(0)
emb = nn.Embedding(V, E).to(dev)
rnn = (nn.LSTM if args.cell == "lstm" else nn.GRU)(E, H, L).to(dev)
out = nn.Linear(H, V).to(dev)
params = list(emb.parameters()) + list(rnn.parameters()) + list(out.parameters())
opt = torch.optim.Adam(params, lr=2e-3)
lossf = nn.CrossEntropyLoss()
data = torch.randint(0, V, (T + 1, B), device=dev)
state = None


def detach(h):
    return tuple(x.detach() for x in h) if isinstance(h, tuple) else h.detach()


def step():
    global state
    opt.zero_grad(set_to_none=True)
    y, h = rnn(emb(data[:-1]), state)
    loss = lossf(out(y).reshape(-1, V), data[1:].reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(params, 5.0)
    opt.step()
    state = detach(h)
    if args.sync:
        loss.item()


for _ in range(5):
    step()
sync()
t0 = time.perf_counter()
for _ in range(args.steps):
    step()
sync()
train_tps = args.steps * B * T / (time.perf_counter() - t0)

result = {
    "impl": "pytorch-" + torch.__version__ + "-cudnn-" + str(torch.backends.cudnn.version()),
    "gpu": torch.cuda.get_device_name(dev) if on_gpu else "cpu",
    "cell": args.cell, "hidden": H, "layers": L, "batch": B, "seq": T,
    "tf32": args.tf32 == 1, "tf32_settings": tf32_settings,
    "loss_read_per_step": args.sync,
    "train_tokens_per_s": round(train_tps),
}

if args.profile > 0:
    from torch.profiler import ProfilerActivity, profile

    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        for _ in range(args.profile):
            step()
        sync()
    kernels = copies = 0
    gpu_us = 0.0
    for ev in prof.events():
        if getattr(ev, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(ev, "device_time_total", None)  # µs; cuda_time_total before PyTorch 2.4
        if us is None:
            us = getattr(ev, "cuda_time_total", 0.0)
        gpu_us += us
        if ev.name.startswith(("Memcpy", "Memset", "memcpy", "memset")):
            copies += 1
        else:
            kernels += 1
    n = args.profile
    result["profile"] = {
        "steps": n,
        "kernels_per_step": kernels / n,
        "copies_per_step": copies / n,
        "gpu_ms_per_step": gpu_us / n / 1e3,
    }

with torch.no_grad():
    x = torch.zeros(1, 1, dtype=torch.long, device=dev)
    hs = None
    for _ in range(20):
        y, hs = rnn(emb(x), hs)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.sample):
        y, hs = rnn(emb(x), hs)
        p = torch.softmax(out(y[-1, 0]) / 0.8, -1)
        x = torch.multinomial(p, 1).view(1, 1)
    sync()
    result["sample_tokens_per_s"] = round(args.sample / (time.perf_counter() - t0))

print(json.dumps(result), flush=True)
