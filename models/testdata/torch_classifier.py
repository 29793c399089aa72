#!/usr/bin/python3
"""PyTorch reference for models.Classifier: loss, accuracy and gradients.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64:

    /usr/bin/python3 models/testdata/torch_classifier.py > models/testdata/torch_classifier.json

The module is the classifier the models package builds, with its names:
emb = nn.Embedding(V, E), rnn = nn.LSTM or nn.GRU(E, H, L,
bidirectional=...) over pack_padded_sequence(enforce_sorted=False), then
one of three poolings (ClassifierConfig.Pool):

- last: the top layer's final states (cat(h_n[-2], h_n[-1]) when
  bidirectional, h_n[-1] otherwise);
- mean: the top layer's output unpacked (pad_packed_sequence, [T, B,
  H·directions]) summed over time and divided by each sequence's length;
- max: its maximum over the real positions (padding filled with -inf,
  torch.max over time: the gradient goes to the first step of a tie,
  which random float64 data does not have),

and out = nn.Linear(H·directions, classes). The loss is
nn.CrossEntropyLoss over the sequences (the mean); the accuracy the
fraction whose argmax logit is the label. Each case records its logits.

The script asserts that every mean and max case would come out different
if the padded positions (zeros in the unpacked output) were pooled too:
a sequence shorter than T changes the mean's denominator, and for max
some feature of a short sequence is negative at all its real steps, so a
padded zero would win.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

V, CLASSES, T, B = 12, 3, 6, 5


class Classifier(nn.Module):
    def __init__(self, cell, embed, hidden, layers, bidirectional, pool):
        super().__init__()
        self.cell, self.bidirectional, self.pool = cell, bidirectional, pool
        self.emb = nn.Embedding(V, embed)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed, hidden, layers, bidirectional=bidirectional)
        self.out = nn.Linear(hidden * (2 if bidirectional else 1), CLASSES)

    def pooled(self, tokens, lengths):
        """The pooled features, and the unpacked output (None for last)."""
        x = self.emb(tokens)
        n = torch.tensor(lengths)
        y, st = self.rnn(pack_padded_sequence(x, n, enforce_sorted=False))
        if self.pool == "last":
            h = st[0] if self.cell == "lstm" else st
            return (torch.cat([h[-2], h[-1]], dim=1) if self.bidirectional else h[-1]), None
        y, _ = pad_packed_sequence(y, total_length=T)  # [T, B, H·directions], zeros at padding
        if self.pool == "mean":
            return y.sum(0) / n.unsqueeze(1).to(y.dtype), y
        padded = torch.arange(T).unsqueeze(1) >= n.unsqueeze(0)  # [T, B]
        return y.masked_fill(padded.unsqueeze(2), float("-inf")).max(0).values, y

    def forward(self, tokens, lengths):
        return self.out(self.pooled(tokens, lengths)[0])


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def case(cell, embed, hidden, layers, bidirectional, seed, pool="last"):
    torch.manual_seed(seed)
    m = Classifier(cell, embed, hidden, layers, bidirectional, pool).double()
    lengths = [3, 6, 1, 4, 6]
    tokens = torch.randint(2, V, (T, B))
    for b, n in enumerate(lengths):
        tokens[n:, b] = 0
    labels = torch.randint(0, CLASSES, (B,))
    if pool != "last":
        with torch.no_grad():
            p, y = m.pooled(tokens, lengths)
            leaky = y.mean(0) if pool == "mean" else y.max(0).values
            assert not torch.allclose(p, leaky), "pooling the padding too would give the same features"
    logits = m(tokens, lengths)
    loss = nn.CrossEntropyLoss()(logits, labels)
    loss.backward()
    accuracy = float((logits.argmax(-1) == labels).double().mean())
    return {
        "cell": cell, "embed": embed, "hidden": hidden, "layers": layers, "bidirectional": bidirectional,
        "pool": pool, "vocab": V, "classes": CLASSES, "seq": T, "batch": B, "lengths": lengths,
        "tokens": tokens.reshape(-1).tolist(), "labels": labels.tolist(),
        "params": {name: flat(p) for name, p in m.named_parameters()},
        "logits": flat(logits), "loss": float(loss), "accuracy": accuracy,
        "grad_params": {name: flat(p.grad) for name, p in m.named_parameters()},
    }


def main():
    cases = [
        case("lstm", 5, 4, 1, True, 4000),
        case("gru", 5, 4, 2, True, 4001),
        case("lstm", 3, 6, 2, False, 4002),
        case("lstm", 5, 4, 1, True, 4010, "mean"),
        case("gru", 5, 4, 2, True, 4011, "mean"),
        case("lstm", 3, 6, 2, False, 4012, "mean"),
        case("gru", 4, 5, 1, False, 4013, "mean"),
        case("lstm", 5, 4, 1, True, 4020, "max"),
        case("gru", 5, 4, 2, True, 4021, "max"),
        case("lstm", 3, 6, 2, False, 4022, "max"),
        case("gru", 4, 5, 1, False, 4023, "max"),
    ]
    json.dump({"made_by": "models/testdata/torch_classifier.py", "torch": torch.__version__, "dtype": "float64", "cases": cases},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
