#!/usr/bin/python3
"""PyTorch reference for models.Classifier: loss, accuracy and gradients.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64:

    /usr/bin/python3 models/testdata/torch_classifier.py > models/testdata/torch_classifier.json

The module is the classifier the models package builds, with its names:
emb = nn.Embedding(V, E), rnn = nn.LSTM or nn.GRU(E, H, L,
bidirectional=...) over pack_padded_sequence(enforce_sorted=False), the
top layer's final states pooled (cat(h_n[-2], h_n[-1]) when bidirectional,
h_n[-1] otherwise), out = nn.Linear(H·directions, classes). The loss is
nn.CrossEntropyLoss over the sequences (the mean); the accuracy the
fraction whose argmax logit is the label.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence

V, CLASSES, T, B = 12, 3, 6, 5


class Classifier(nn.Module):
    def __init__(self, cell, embed, hidden, layers, bidirectional):
        super().__init__()
        self.cell, self.bidirectional = cell, bidirectional
        self.emb = nn.Embedding(V, embed)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed, hidden, layers, bidirectional=bidirectional)
        self.out = nn.Linear(hidden * (2 if bidirectional else 1), CLASSES)

    def forward(self, tokens, lengths):
        x = self.emb(tokens)
        _, st = self.rnn(pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False))
        h = st[0] if self.cell == "lstm" else st
        pooled = torch.cat([h[-2], h[-1]], dim=1) if self.bidirectional else h[-1]
        return self.out(pooled)


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def case(cell, embed, hidden, layers, bidirectional, seed):
    torch.manual_seed(seed)
    m = Classifier(cell, embed, hidden, layers, bidirectional).double()
    lengths = [3, 6, 1, 4, 6]
    tokens = torch.randint(2, V, (T, B))
    for b, n in enumerate(lengths):
        tokens[n:, b] = 0
    labels = torch.randint(0, CLASSES, (B,))
    logits = m(tokens, lengths)
    loss = nn.CrossEntropyLoss()(logits, labels)
    loss.backward()
    accuracy = float((logits.argmax(-1) == labels).double().mean())
    return {
        "cell": cell, "embed": embed, "hidden": hidden, "layers": layers, "bidirectional": bidirectional,
        "vocab": V, "classes": CLASSES, "seq": T, "batch": B, "lengths": lengths,
        "tokens": tokens.reshape(-1).tolist(), "labels": labels.tolist(),
        "params": {name: flat(p) for name, p in m.named_parameters()},
        "loss": float(loss), "accuracy": accuracy,
        "grad_params": {name: flat(p.grad) for name, p in m.named_parameters()},
    }


def main():
    cases = [
        case("lstm", 5, 4, 1, True, 4000),
        case("gru", 5, 4, 2, True, 4001),
        case("lstm", 3, 6, 2, False, 4002),
    ]
    json.dump({"made_by": "models/testdata/torch_classifier.py", "torch": torch.__version__, "dtype": "float64", "cases": cases},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
