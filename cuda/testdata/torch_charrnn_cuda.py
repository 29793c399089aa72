#!/usr/bin/python3
"""PyTorch + cuDNN on the GPU: the char-RNN workload of `charrnn bench -device cuda`.

Usage: torch_charrnn_cuda.py [lstm|gru] [hidden] [layers] [batch] [seq] [steps] [tf32 0|1]

The same workload as ../shared/bench/torch_charrnn.py (vocabulary 65, embedding 64, the stack,
a linear head, cross-entropy, Adam 2e-3, clipping at norm 5, detached carried state; sampling at
batch 1 with temperature 0.8), on cuda:0 with nn.LSTM/nn.GRU (cuDNN), timed with
torch.cuda.synchronize() around the measured loop. tf32 sets both matmul and cuDNN TF32 (PyTorch's
defaults are matmul off, cuDNN on; 0 turns both off, to compare with our FP32 GEMMs).
Prints one JSON line.
"""
import json, sys, time
import torch
import torch.nn as nn

cell = sys.argv[1] if len(sys.argv) > 1 else "lstm"
H = int(sys.argv[2]) if len(sys.argv) > 2 else 256
L = int(sys.argv[3]) if len(sys.argv) > 3 else 2
B = int(sys.argv[4]) if len(sys.argv) > 4 else 32
T = int(sys.argv[5]) if len(sys.argv) > 5 else 64
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 50
tf32 = (sys.argv[7] == "1") if len(sys.argv) > 7 else False
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
V, E = 65, 64
dev = torch.device("cuda:0")
torch.manual_seed(0)

emb = nn.Embedding(V, E).to(dev)
rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(E, H, L).to(dev)
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

for _ in range(5):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
train_tps = steps * B * T / (time.perf_counter() - t0)

with torch.no_grad():
    x = torch.zeros(1, 1, dtype=torch.long, device=dev)
    hs = None
    for _ in range(20):
        y, hs = rnn(emb(x), hs)
    n = 1000
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        y, hs = rnn(emb(x), hs)
        p = torch.softmax(out(y[-1, 0]) / 0.8, -1)
        x = torch.multinomial(p, 1).view(1, 1)
    torch.cuda.synchronize()
    sample_tps = n / (time.perf_counter() - t0)

print(json.dumps({"impl": "pytorch-" + torch.__version__ + "-cudnn-" + str(torch.backends.cudnn.version()),
                  "gpu": torch.cuda.get_device_name(0), "cell": cell, "hidden": H, "layers": L, "batch": B,
                  "seq": T, "tf32": tf32, "train_tokens_per_s": round(train_tps),
                  "sample_tokens_per_s": round(sample_tps)}))
