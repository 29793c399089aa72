#!/usr/bin/python3
"""PyTorch reference for models.Tagger: loss, accuracy and gradients.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64:

    /usr/bin/python3 models/testdata/torch_tagger.py > models/testdata/torch_tagger.json

The module is the tagger the models package builds, with its names:
emb = nn.Embedding(V, E), rnn = nn.LSTM or nn.GRU(E, H, L,
bidirectional=...) over pack_padded_sequence(enforce_sorted=False) of the
embedded batch, out = nn.Linear(H·directions, tags) at every position of
pad_packed_sequence(total_length=T). The loss is
nn.CrossEntropyLoss(ignore_index=-100), the mean over the real tokens,
with label -100 at padded positions; the accuracy is the fraction of real
tokens whose argmax logit is the label. Each case records the state dict,
the batch (tokens [T, B] time-major, labels [T, B], lengths), the loss,
the accuracy and the gradient of the loss for every parameter.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

V, TAGS, T, B = 12, 4, 6, 5


class Tagger(nn.Module):
    def __init__(self, cell, embed, hidden, layers, bidirectional):
        super().__init__()
        self.emb = nn.Embedding(V, embed)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed, hidden, layers, bidirectional=bidirectional)
        self.out = nn.Linear(hidden * (2 if bidirectional else 1), TAGS)

    def forward(self, tokens, lengths):
        x = self.emb(tokens)
        y, _ = self.rnn(pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False))
        y, _ = pad_packed_sequence(y, total_length=tokens.shape[0])
        return self.out(y)


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def case(cell, embed, hidden, layers, bidirectional, seed):
    torch.manual_seed(seed)
    m = Tagger(cell, embed, hidden, layers, bidirectional).double()
    lengths = [3, 6, 1, 4, 6]
    tokens = torch.randint(2, V, (T, B))
    labels = torch.randint(0, TAGS, (T, B))
    for b, n in enumerate(lengths):
        tokens[n:, b] = 0     # <pad>
        labels[n:, b] = -100  # ignored
    tokens[1, 3] = 1          # an <unk>
    logits = m(tokens, lengths)
    loss = nn.CrossEntropyLoss(ignore_index=-100)(logits.reshape(-1, TAGS), labels.reshape(-1))
    loss.backward()
    real = labels >= 0
    accuracy = float((logits.argmax(-1)[real] == labels[real]).double().mean())
    return {
        "cell": cell, "embed": embed, "hidden": hidden, "layers": layers, "bidirectional": bidirectional,
        "vocab": V, "tags": TAGS, "seq": T, "batch": B, "lengths": lengths,
        "tokens": tokens.reshape(-1).tolist(), "labels": labels.reshape(-1).tolist(),
        "params": {name: flat(p) for name, p in m.named_parameters()},
        "loss": float(loss), "accuracy": accuracy,
        "grad_params": {name: flat(p.grad) for name, p in m.named_parameters()},
    }


def main():
    cases = [
        case("lstm", 5, 4, 1, True, 3000),
        case("gru", 5, 4, 2, True, 3001),
        case("lstm", 3, 6, 2, False, 3002),
    ]
    json.dump({"made_by": "models/testdata/torch_tagger.py", "torch": torch.__version__, "dtype": "float64", "cases": cases},
              sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
