#!/usr/bin/python3
"""Generate PyTorch reference fixtures for the char-RNN's tests (package models,
models.CharRNN; the charrnn example's tests read them too).

What it writes, next to this script (models/testdata/):

  corpus.txt                       ~6,000 bytes of ASCII prose, produced by this
                                   script (hand-written paragraphs plus sentences
                                   drawn from templates with a fixed LCG).
  torch_lstm.safetensors           initial weights of a 2-layer LSTM char-RNN
  torch_gru.safetensors            initial weights of a 2-layer GRU char-RNN
  torch_lstm_trained.safetensors   the LSTM weights after 4 Adam steps
  torch_gru_trained.safetensors    the GRU weights after 4 Adam steps
  torch_lstm.json                  eval loss of the initial weights, and the
  torch_gru.json                   per-step train losses and gradient norms

The model is emb = nn.Embedding(V, 8), rnn = nn.LSTM/GRU(8, 16, 2),
out = nn.Linear(16, V), float32, time-major, seeded with torch.manual_seed(7)
for LSTM and 8 for GRU. The vocabulary is the distinct characters of
corpus.txt sorted by code point (token id = index).

Safetensors files hold exactly the state_dict tensors (F32, PyTorch shapes)
and __metadata__ {"format": "gocurrent.charrnn/1", "config": <json>,
"vocab": <json list of one-character strings>}. The writer is in this script
(no safetensors package needed).

Batching (the project's contract): the N tokens are cut into S = batch*accum
contiguous streams of L = N // S tokens; there are W = (L-1) // seq windows;
window w of stream s has inputs stream[w*seq : w*seq+seq] and targets shifted
by one. A micro-batch is a [seq, batch] tensor whose column r is stream r of
that micro-batch; micro-batch j holds streams j*batch..(j+1)*batch-1 and
carries its own hidden state across windows (zeros at first, detached between
windows).

Eval: batch 4, seq 16, accum 1, all W windows, loss = mean cross-entropy (nats).
Train: batch 2, accum 2, seq 16, Adam(lr 0.01), clip_grad_norm_(0.3), 4 steps;
step k uses window k of every stream.

Run from the repository root:

    OPENBLAS_CORETYPE=Haswell /usr/bin/python3 models/testdata/torch_fixture.py

It is deterministic: it uses fixed seeds, no data-dependent randomness beyond
torch.manual_seed, single-threaded CPU torch, and rerunning it reproduces the
same files (byte for byte, on the same torch build).
"""

import json
import math
import os
import struct

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = "gocurrent.charrnn/1"

PARAGRAPHS = [
    "The river begins as a thin thread of water under a stone on the high "
    "moor. Nobody sees it start. Rain falls on the heather, soaks into the "
    "peat, and comes out again a little lower down, cold and brown, looking "
    "for the easiest way to the sea.",
    "By the time it reaches the first village the thread has become a "
    "stream. Children throw sticks from the bridge and run to the other side "
    "to watch them come out. Sometimes a stick is caught in the weeds and "
    "never appears, and the children argue about whose it was.",
    "Weather decides everything here. A dry summer leaves the stream so low "
    "that the stones show their pale backs, and the trout crowd into the "
    "deep pools under the alders. A wet autumn fills it to the banks in a "
    "single night, and in the morning the meadow is a lake with fence posts "
    "standing in it like the masts of sunken boats.",
    "Old people in the valley can read the sky. A ring around the moon means "
    "rain within two days. Swallows flying low mean the air is heavy and a "
    "storm is coming. When the wind turns to the east in winter, they say, "
    "bring the sheep down from the hill, because the snow will follow.",
    "Further down, the river grows wide and slow. It bends through farmland, "
    "cutting into the outside of each curve and leaving sand and gravel on "
    "the inside. Over many years the bends creep across the valley floor, "
    "and a farmer may find that a field his grandfather ploughed is now "
    "under water, while a new strip of land has appeared on the far bank.",
    "In spring the melt comes down from the mountains. The water is green "
    "and fast and loud, and it carries whole trees that knock against the "
    "piers of the stone bridge in town. The town keeps a gauge painted on "
    "the wall by the mill, with the heights of the great floods marked and "
    "dated, the highest one well above a tall man's head.",
    "Fog lies on the river on still mornings after a clear night. The air "
    "over the water cools, the moisture in it condenses, and a white blanket "
    "fills the valley while the hills above stand in sunshine. By noon the "
    "sun has burned it away, and only the damp grass remembers it.",
    "At the estuary the river meets the tide. Twice a day salt water pushes "
    "inland and fresh water pushes out, and where they meet the mud is rich "
    "and the birds are many. Herons stand in the shallows, waiting. Gulls "
    "argue over anything that floats. The river, which began as a thread "
    "under a stone, loses its name and becomes part of the sea.",
]

SUBJECTS = [
    "the river", "the stream", "the rain", "the wind", "a cold front",
    "the morning fog", "the tide", "a summer storm", "the snow on the hill",
    "the water under the bridge", "a grey cloud", "the flood",
]
VERBS = [
    "moves", "rises", "falls", "drifts", "turns", "waits", "runs", "spreads",
    "settles", "gathers", "slows", "returns",
]
PLACES = [
    "over the meadow", "past the old mill", "along the valley",
    "through the town", "across the moor", "below the alders",
    "toward the estuary", "around the bend", "under the stone bridge",
    "beside the farm", "into the deep pool", "along the gravel bar",
]
TIMES = [
    "before dawn", "in the evening", "after a long dry week", "in early spring",
    "at the end of autumn", "during the night", "by midday", "in winter",
    "when the wind turns east", "after the thunder", "on a still morning",
    "as the light fades",
]
ENDINGS = [
    "and the herons wait in the shallows", "and the farmers watch the sky",
    "and the gauge on the mill wall climbs", "and the fields turn silver",
    "and nobody in the village is surprised", "and the swallows fly low",
    "and the trout hide in the shade", "and the children stay indoors",
    "and the air smells of wet earth", "and the hills disappear",
    "and the bridge trembles a little", "and the sea takes it all",
]


class LCG:
    """A tiny deterministic generator, independent of Python's random module."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % n


def make_corpus(target=6000):
    text = "\n\n".join(PARAGRAPHS) + "\n\n"
    rng = LCG(2024)
    while True:
        sentences = []
        for _ in range(4):
            s = "%s %s %s %s, %s." % (
                SUBJECTS[rng.next(len(SUBJECTS))],
                VERBS[rng.next(len(VERBS))],
                PLACES[rng.next(len(PLACES))],
                TIMES[rng.next(len(TIMES))],
                ENDINGS[rng.next(len(ENDINGS))],
            )
            sentences.append(s[0].upper() + s[1:])
        para = " ".join(sentences) + "\n\n"
        if len(text) + len(para) > target:
            break
        text += para
    text = text.rstrip("\n") + "\n"
    text.encode("ascii")  # must be ASCII
    return text


class CharRNN(nn.Module):
    def __init__(self, cell, vocab, embed=8, hidden=16, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, embed)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed, hidden, layers)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x, state):
        y, state = self.rnn(self.emb(x), state)
        return self.out(y), state


def zero_state(cell, batch, hidden=16, layers=2):
    h = torch.zeros(layers, batch, hidden)
    if cell == "lstm":
        return (h, torch.zeros(layers, batch, hidden))
    return h


def detach(state):
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def streams_of(tokens, n_streams):
    L = len(tokens) // n_streams
    return [tokens[s * L:(s + 1) * L] for s in range(n_streams)], L


def window(streams, first, batch, w, seq):
    """Inputs and targets [seq, batch] for streams first..first+batch-1, window w."""
    xs = [streams[first + r][w * seq:w * seq + seq] for r in range(batch)]
    ys = [streams[first + r][w * seq + 1:w * seq + seq + 1] for r in range(batch)]
    x = torch.tensor(xs, dtype=torch.long).t().contiguous()
    y = torch.tensor(ys, dtype=torch.long).t().contiguous()
    return x, y


def evaluate(model, cell, tokens, V, batch=4, seq=16, accum=1):
    streams, L = streams_of(tokens, batch * accum)
    W = (L - 1) // seq
    total = 0.0
    count = 0
    model.eval()
    with torch.no_grad():
        for j in range(accum):
            state = zero_state(cell, batch)
            for w in range(W):
                x, y = window(streams, j * batch, batch, w, seq)
                logits, state = model(x, state)
                state = detach(state)
                loss = nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
                total += float(loss.item())
                count += 1
    return total / count, W


def train(model, cell, tokens, V, batch=2, accum=2, seq=16, lr=0.01, clip=0.3, steps=4):
    streams, L = streams_of(tokens, batch * accum)
    W = (L - 1) // seq
    assert W >= steps, (W, steps)
    model.train()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
    crit = nn.CrossEntropyLoss()
    states = [zero_state(cell, batch) for _ in range(accum)]
    losses, norms = [], []
    for k in range(steps):
        opt.zero_grad()
        step_loss = 0.0
        for j in range(accum):
            x, y = window(streams, j * batch, batch, k, seq)
            logits, st = model(x, states[j])
            loss = crit(logits.reshape(-1, V), y.reshape(-1)) / accum
            loss.backward()
            states[j] = detach(st)
            step_loss += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        losses.append(float(step_loss))
        norms.append(float(norm))
    return losses, norms


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    corpus = make_corpus()
    with open(os.path.join(HERE, "corpus.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write(corpus)

    vocab = sorted(set(corpus))
    V = len(vocab)
    index = {c: i for i, c in enumerate(vocab)}
    tokens = [index[c] for c in corpus]
    N = len(tokens)

    for cell in ["lstm", "gru"]:
        torch.manual_seed(7 if cell == "lstm" else 8)
        model = CharRNN(cell, V)
        config = {"cell": cell, "embed": 8, "hidden": 16, "layers": 2, "dropout": 0}
        metadata = {
            "format": FORMAT,
            "config": json.dumps(config, separators=(",", ":")),
            "vocab": json.dumps(vocab, separators=(",", ":")),
        }
        write_safetensors(os.path.join(HERE, "torch_%s.safetensors" % cell), model.state_dict(), metadata)

        eval_loss, W = evaluate(model, cell, tokens, V)
        losses, norms = train(model, cell, tokens, V)
        write_safetensors(os.path.join(HERE, "torch_%s_trained.safetensors" % cell), model.state_dict(), metadata)

        report = {
            "made_by": "torch_fixture.py, torch %s" % torch.__version__,
            "cell": cell,
            "vocab_size": V,
            "tokens": N,
            "eval": {
                "batch": 4,
                "seq": 16,
                "windows": W,
                "loss": eval_loss,
                "bits_per_char": eval_loss / math.log(2),
            },
            "train": {
                "batch": 2,
                "accum": 2,
                "seq": 16,
                "optimizer": "adam",
                "lr": 0.01,
                "clip": 0.3,
                "steps": 4,
                "losses": losses,
                "grad_norms": norms,
            },
        }
        with open(os.path.join(HERE, "torch_%s.json" % cell), "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(cell, "V", V, "N", N, "W", W, "eval", eval_loss, "train", losses, "norms", norms)


if __name__ == "__main__":
    main()
