#!/usr/bin/python3
"""PyTorch reference for models.Tagger: loss, accuracy, gradients, and
three training steps.

Made with Debian's python3-torch (PyTorch 1.13), CPU, in float64:

    /usr/bin/python3 models/testdata/torch_tagger.py > models/testdata/torch_tagger.json

The module is the tagger the models package builds, with its names:
emb = nn.Embedding(V, E), rnn = nn.LSTM or nn.GRU(E', H, L,
bidirectional=...) over pack_padded_sequence(enforce_sorted=False) of the
token features, out = nn.Linear(H·directions, tags) at every position of
pad_packed_sequence(total_length=T). Without character features the
token features are the word embedding (E' = E). With them (char_embed
CE, char_hidden CH > 0), char_emb = nn.Embedding(C, CE) and char_rnn =
nn.LSTM(CE, CH, 1, bidirectional=True) run over the characters of the
batch's real words, packed by word length, and a token's features are
cat(emb(word), h_n[0], h_n[1]) (E' = E + 2·CH; zeros beside the
embedding at padded positions, which the packed stack never reads). The
words are laid out as loader.HostBatch lays them out: the real positions
in time-major order (t, then b), chars [L, W] time-major over those W
words (0, <pad>, past a word's length), char_lengths [W]. Each word id
has a fixed spelling (SPELL: one to six characters of ids 1..C-1, some of
one character, some with the unknown character 1); an <unk> word (id 1)
gets a spelling of its own.

The loss is nn.CrossEntropyLoss(ignore_index=-100), the mean over the
real tokens, with label -100 at padded positions; the accuracy is the
fraction of real tokens whose argmax logit is the label. Each case
records the state dict, the batch (tokens [T, B] time-major, labels [T,
B], lengths, and with character features chars, char_lengths, word_len),
the loss, the accuracy and the gradient of the loss for every parameter.

"train" records a small bidirectional-LSTM tagger, without and with
character features, trained for three steps on three fixed batches
(train.batches, each as a case's batch) with torch.optim.Adam(lr=1e-2)
(betas 0.9, 0.999, eps 1e-8) and torch.nn.utils.clip_grad_norm_(params,
clip) (which scales the gradients by clip/(norm + 1e-6) when that is
below 1): clip 1.0 as asked for, which these small gradients (norms
0.15 to 0.52) never reach, and a third case with character features at
clip 0.25, which clips. Each case records its initial parameters, and for each step the loss (the mean over the
batch's real tokens) and the gradient norm before clipping, and every
parameter after the last step.
"""
import json
import sys

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

V, TAGS, T, B = 12, 4, 6, 5
C = 9  # characters: 0 <pad>, 1 <unk>, 2..8


def spellings():
    g = torch.Generator().manual_seed(4000)
    spell = {}
    for w in range(2, V):
        n = [1, 3, 6, 1, 2, 5, 4, 1, 6, 3][w - 2]
        s = torch.randint(2, C, (n,), generator=g).tolist()
        if w in (5, 9):
            s[-1] = 1  # an unknown character
        spell[w] = s
    return spell, g


SPELL, SPELL_GEN = spellings()


class Tagger(nn.Module):
    def __init__(self, cell, embed, hidden, layers, bidirectional, char_embed=0, char_hidden=0):
        super().__init__()
        self.emb = nn.Embedding(V, embed)
        self.chars = char_embed > 0
        if self.chars:
            self.char_emb = nn.Embedding(C, char_embed)
            self.char_rnn = nn.LSTM(char_embed, char_hidden, 1, bidirectional=True)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed + 2 * char_hidden, hidden, layers, bidirectional=bidirectional)
        self.out = nn.Linear(hidden * (2 if bidirectional else 1), TAGS)

    def forward(self, tokens, lengths, chars=None, char_lengths=None):
        x = self.emb(tokens)
        if self.chars:
            c = self.char_emb(chars)
            _, (h, _) = self.char_rnn(pack_padded_sequence(c, torch.tensor(char_lengths), enforce_sorted=False))
            f = torch.cat([h[0], h[1]], -1)  # [W, 2·CH], the words in order
            real = torch.arange(tokens.shape[0])[:, None] < torch.tensor(lengths)[None, :]
            feat = x.new_zeros(tokens.shape[0], tokens.shape[1], f.shape[-1])
            feat[real] = f  # row-major over [T, B]: time-major, as the words
            x = torch.cat([x, feat], -1)
        y, _ = self.rnn(pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False))
        y, _ = pad_packed_sequence(y, total_length=tokens.shape[0])
        return self.out(y)


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def word_chars(tokens, lengths):
    """The characters of the real words of a batch, as loader.HostBatch."""
    words = []
    for t in range(tokens.shape[0]):
        for b in range(tokens.shape[1]):
            if t < lengths[b]:
                w = int(tokens[t, b])
                if w == 1:
                    n = 1 + int(torch.randint(0, 4, (1,), generator=SPELL_GEN))
                    words.append(torch.randint(1, C, (n,), generator=SPELL_GEN).tolist())
                else:
                    words.append(SPELL[w])
    L = max(len(s) for s in words)
    chars = torch.zeros(L, len(words), dtype=torch.long)
    for j, s in enumerate(words):
        chars[:len(s), j] = torch.tensor(s)
    return chars, [len(s) for s in words]


def batch_record(tokens, labels, lengths, chars, char_lengths):
    return {
        "seq": tokens.shape[0], "batch": tokens.shape[1], "lengths": lengths,
        "tokens": tokens.reshape(-1).tolist(), "labels": labels.reshape(-1).tolist(),
        "word_len": chars.shape[0], "chars": chars.reshape(-1).tolist(), "char_lengths": char_lengths,
    }


def case(cell, embed, hidden, layers, bidirectional, seed, char_embed=0, char_hidden=0):
    torch.manual_seed(seed)
    m = Tagger(cell, embed, hidden, layers, bidirectional, char_embed, char_hidden).double()
    lengths = [3, 6, 1, 4, 6]
    tokens = torch.randint(2, V, (T, B))
    labels = torch.randint(0, TAGS, (T, B))
    for b, n in enumerate(lengths):
        tokens[n:, b] = 0     # <pad>
        labels[n:, b] = -100  # ignored
    tokens[1, 3] = 1          # an <unk>
    r = {
        "cell": cell, "embed": embed, "hidden": hidden, "layers": layers, "bidirectional": bidirectional,
        "vocab": V, "tags": TAGS, "seq": T, "batch": B, "lengths": lengths,
        "tokens": tokens.reshape(-1).tolist(), "labels": labels.reshape(-1).tolist(),
    }
    chars, char_lengths = None, None
    if char_embed:
        chars, char_lengths = word_chars(tokens, lengths)
        r.update({"char_embed": char_embed, "char_hidden": char_hidden, "char_vocab": C,
                  "word_len": chars.shape[0], "chars": chars.reshape(-1).tolist(), "char_lengths": char_lengths})
    logits = m(tokens, lengths, chars, char_lengths)
    loss = nn.CrossEntropyLoss(ignore_index=-100)(logits.reshape(-1, TAGS), labels.reshape(-1))
    loss.backward()
    real = labels >= 0
    accuracy = float((logits.argmax(-1)[real] == labels[real]).double().mean())
    r.update({
        "params": {name: flat(p) for name, p in m.named_parameters()},
        "loss": float(loss), "accuracy": accuracy,
        "grad_params": {name: flat(p.grad) for name, p in m.named_parameters()},
    })
    return r


def train_batches():
    g = torch.Generator().manual_seed(5000)
    out = []
    for seq, lengths in [(5, [5, 3, 2, 1]), (4, [4, 4, 1]), (7, [7, 2, 6, 3, 5])]:
        b = len(lengths)
        tokens = torch.randint(2, V, (seq, b), generator=g)
        labels = torch.randint(0, TAGS, (seq, b), generator=g)
        for i, n in enumerate(lengths):
            tokens[n:, i] = 0
            labels[n:, i] = -100
        out.append((tokens, labels, lengths) + word_chars(tokens, lengths))
    return out


def train(batches, seed, char_embed, char_hidden, clip=1.0):
    torch.manual_seed(seed)
    m = Tagger("lstm", 5, 4, 1, True, char_embed, char_hidden).double()
    initial = {name: flat(p) for name, p in m.named_parameters()}
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses, norms = [], []
    for tokens, labels, lengths, chars, char_lengths in batches:
        opt.zero_grad()
        logits = m(tokens, lengths, chars, char_lengths)
        loss = nn.CrossEntropyLoss(ignore_index=-100)(logits.reshape(-1, TAGS), labels.reshape(-1))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), clip)))
        opt.step()
        losses.append(float(loss))
    return {
        "cell": "lstm", "embed": 5, "hidden": 4, "layers": 1, "bidirectional": True,
        "char_embed": char_embed, "char_hidden": char_hidden, "clip": clip,
        "initial": initial, "losses": losses, "grad_norms": norms,
        "final": {name: flat(p) for name, p in m.named_parameters()},
    }


def main():
    cases = [
        case("lstm", 5, 4, 1, True, 3000),
        case("gru", 5, 4, 2, True, 3001),
        case("lstm", 3, 6, 2, False, 3002),
        case("lstm", 5, 4, 1, True, 3003, char_embed=3, char_hidden=2),
        case("gru", 4, 3, 2, True, 3004, char_embed=4, char_hidden=3),
        case("lstm", 3, 5, 2, False, 3005, char_embed=3, char_hidden=2),
        case("gru", 5, 4, 1, False, 3006, char_embed=2, char_hidden=3),
    ]
    batches = train_batches()
    tr = {
        "vocab": V, "tags": TAGS, "char_vocab": C, "optimizer": "adam", "lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8,
        "batches": [batch_record(*b) for b in batches],
        "cases": [train(batches, 3100, 0, 0), train(batches, 3101, 3, 2), train(batches, 3102, 3, 2, clip=0.25)],
    }
    json.dump({"made_by": "models/testdata/torch_tagger.py", "torch": torch.__version__, "dtype": "float64", "cases": cases,
               "train": tr}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
