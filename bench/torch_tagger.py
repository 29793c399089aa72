#!/usr/bin/python3
"""CPU anchor: PyTorch training a tagger on the batches gocurrent trained on.

Usage: torch_tagger.py BATCHES.json [threads]
BATCHES.json is written by `go run ./examples/tagger bench -batches-out
BATCHES.json`: the model's shape and every batch it trained on (token ids
and tags time-major [seq, rows], tags -100 past each sentence's length, the
lengths). The model is the same: nn.Embedding(V, embed) -> nn.LSTM (or GRU)
(embed, hidden, layers, bidirectional) over pack_padded_sequence
(enforce_sorted=False) -> nn.Linear(hidden·directions, tags) at every
token; cross-entropy with ignore_index=-100 averaged over the real tokens;
Adam(lr=1e-3); clip_grad_norm_(5). The first `warmup` batches are not
timed. tokens/s counts real tokens only. Prints one JSON line.
"""
import json, sys, time
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

spec = json.load(open(sys.argv[1]))
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
torch.manual_seed(0)
if not spec["tagging"]:
    sys.exit("torch_tagger.py: the batches are of labelled sequences, not tagged ones")
V, C = spec["vocab"], spec["classes"]
E, H, L, bi = spec["embed"], spec["hidden"], spec["layers"], spec["bidirectional"]
rnn_cls = nn.LSTM if spec["cell"] == "lstm" else nn.GRU


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = rnn_cls(E, H, L, bidirectional=bi)
        self.out = nn.Linear(H * (2 if bi else 1), C)

    def forward(self, tokens, lengths):
        x = self.emb(tokens)
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        y, _ = self.rnn(packed)
        y, _ = pad_packed_sequence(y, total_length=tokens.shape[0])
        return self.out(y)


m = Tagger()
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
batches = []
for b in spec["batches"]:
    T, B = b["seq"], b["rows"]
    batches.append((torch.tensor(b["tokens"], dtype=torch.long).view(T, B),
                    torch.tensor(b["labels"], dtype=torch.long).view(T, B),
                    torch.tensor(b["lengths"], dtype=torch.long)))
warmup = spec["warmup"]


def step(tokens, labels, lengths):
    opt.zero_grad()
    logits = m(tokens, lengths)
    loss = loss_fn(logits.view(-1, C), labels.view(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(m.parameters(), 5.0)
    opt.step()
    return loss.item()


for b in batches[:warmup]:
    step(*b)
t0 = time.perf_counter()
tokens = 0
for b in batches[warmup:]:
    step(*b)
    tokens += int(b[2].sum())
dt = time.perf_counter() - t0
print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "steps": len(batches) - warmup, "tokens": tokens, "seconds": dt, "train_tokens_per_s": tokens / dt}))
