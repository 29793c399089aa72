#!/usr/bin/python3
"""Record a real allocation trace of a PyTorch char-RNN LSTM training workload.

Usage (from the repository root):

    /usr/bin/python3 alloc/testdata/record_trace.py > alloc/testdata/charrnn_lstm.trace

Needs Debian's python3-torch (1.13.1, CPU only) and libopenblas0-pthread:

    apt-get install -y python3-torch libopenblas0-pthread

Route: PROFILER. torch.profiler.profile(activities=[CPU], profile_memory=True)
records one "[memory]" event per CPU tensor storage allocation (positive
bytes) and free (negative bytes). In Debian's 1.13.1 build the chrome-trace
export and KinetoEvent objects carry no address, but the result's
experimental_event_tree() exposes each allocation as an _ExtraFields_Allocation
with ptr, alloc_size and total_allocated. We flatten the tree, order the
events by start time (ties broken by tree order), and check that the order is
exact: each event's total_allocated must equal the previous one's plus its
alloc_size, and each free must name a live address with the same size. The
TorchDispatchMode + weakref.finalize fallback was not needed.

Workload (fixed, deterministic apart from allocator addresses):
  emb = nn.Embedding(65, 64); rnn = nn.LSTM(64, 256, 2); out = nn.Linear(256, 65)
  Adam lr 2e-3, clip_grad_norm_ 5, batch 32, seq-first layout (T, B)
  random token ids from torch.manual_seed(1)
  6 training steps of truncated BPTT: the LSTM (h, c) state is carried from
  one window to the next and detached; window lengths per step cycle through
  the fixed list SEQ_LENS = [64, 48, 64, 80, 32, 64] so that buffer sizes
  vary from step to step (fragmentation pressure).
  torch.set_num_threads(1): ops run on the recording thread, so every
  allocation is seen by the profiler and the trace is reproducible.

Recorded: every CPU storage allocation/free during the 6 steps (forward,
loss, backward, clipping, Adam step, zero_grad, hidden-state detach). The
model parameters and the token data are allocated before recording and are
not in the trace. Adam's state (exp_avg, exp_avg_sq, step) and the .grad
buffers are created inside the first recorded step and stay live.

Trace format (stdout), the text format of gocurrent's alloc/trace package
(trace.Parse reads it, trace.Write writes it from alloc.Caching.Trace):
  '#' lines are comments (header below says how it was made, with totals).
  a <id> <bytes> <stream>   allocation; id is fresh and increasing, stream 0
  f <id>                    free of a live id
  Frees of addresses allocated before recording are dropped (1.13's profiler
  does not report them anyway: it only tracks sizes of storages allocated
  while it is on, and its total_allocated counter starts at 0); zero-byte
  allocations (and their frees) are dropped; every id still live at the end
  gets a synthetic 'f' line so the trace ends with zero live allocations.

Diagnostics go to stderr.
"""

import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

VOCAB = 65
EMB = 64
HIDDEN = 256
LAYERS = 2
BATCH = 32
LR = 2e-3
CLIP = 5.0
SEED = 1
SEQ_LENS = [64, 48, 64, 80, 32, 64]  # one window length per training step
STEPS = len(SEQ_LENS)
STREAM = 0

CMD = "/usr/bin/python3 alloc/testdata/record_trace.py > alloc/testdata/charrnn_lstm.trace"


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, EMB)
        self.rnn = nn.LSTM(EMB, HIDDEN, LAYERS)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, hidden):
        y, hidden = self.rnn(self.emb(x), hidden)
        return self.out(y), hidden


def run_workload():
    """Builds the model, records STEPS training steps, returns (prof, info)."""
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = CharRNN()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    lossf = nn.CrossEntropyLoss()
    # Token stream: windows are consecutive slices (views, no copy).
    total = sum(SEQ_LENS) + 1
    data = torch.randint(0, VOCAB, (total, BATCH), dtype=torch.long)

    losses = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        hidden = None  # the LSTM starts from zeros on the first window
        pos = 0
        for t in SEQ_LENS:
            x = data[pos:pos + t]
            y = data[pos + 1:pos + t + 1]
            pos += t
            if hidden is not None:
                hidden = tuple(h.detach() for h in hidden)  # truncated BPTT
            opt.zero_grad()
            logits, hidden = model(x, hidden)
            loss = lossf(logits.reshape(-1, VOCAB), y.reshape(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            losses.append(loss.item())
            del logits, loss, x, y
        del hidden
    return prof, losses


def memory_events(prof):
    """Allocation events in time order: list of (ptr, size, total_allocated)."""
    evs = []
    stack = list(reversed(prof.profiler.kineto_results.experimental_event_tree()))
    order = 0
    while stack:  # depth-first, children in order
        n = stack.pop()
        ef = n.extra_fields
        if type(ef).__name__ == "_ExtraFields_Allocation":
            if ef.device.type != "cpu":
                raise SystemExit("unexpected non-CPU allocation on %s" % ef.device)
            evs.append((n.start_time_ns, order, ef.ptr, ef.alloc_size, ef.total_allocated))
            order += 1
        stack.extend(reversed(n.children))
    evs.sort(key=lambda e: (e[0], e[1]))
    return [(p, s, tot) for _, _, p, s, tot in evs]


def convert(evs):
    """Turns raw events into trace ops; returns (ops, stats)."""
    ops = []
    live = {}  # ptr -> (id, size)
    next_id = 0
    st = dict(raw=len(evs), dropped_unknown_frees=0, dropped_unknown_free_bytes=0,
              dropped_zero=0, order_breaks=0, end_frees=0)
    prev_total = None
    for ptr, size, total in evs:
        if prev_total is not None and total != prev_total + size:
            st["order_breaks"] += 1
        prev_total = total
        if size > 0:
            if ptr in live:
                raise SystemExit("address %#x allocated twice without a free" % ptr)
            live[ptr] = (next_id, size)
            ops.append(("a", next_id, size))
            next_id += 1
        elif size < 0:
            if ptr not in live:
                st["dropped_unknown_frees"] += 1
                st["dropped_unknown_free_bytes"] += -size
                continue
            i, s = live.pop(ptr)
            if s != -size:
                raise SystemExit("free of %#x: size %d, allocated %d" % (ptr, -size, s))
            ops.append(("f", i))
        else:
            st["dropped_zero"] += 1
    for i, _ in sorted(live.values()):
        ops.append(("f", i))
        st["end_frees"] += 1
    return ops, st


def format_ops(ops):
    out = []
    for op in ops:
        if op[0] == "a":
            out.append("a %d %d %d" % (op[1], op[2], STREAM))
        else:
            out.append("f %d" % op[1])
    return out


def validate(lines):
    """Independent check of the trace text; returns (allocs, frees, peak, bytes)."""
    live = {}
    seen = set()
    allocs = frees = cur = peak = total = 0
    for ln, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        f = line.split()
        if f[0] == "a":
            assert len(f) == 4, (ln, line)
            i, n, s = int(f[1]), int(f[2]), int(f[3])
            assert n > 0 and s == 0, (ln, line)
            assert i not in live, "line %d: id %d reused while live" % (ln, i)
            assert i not in seen, "line %d: id %d reused" % (ln, i)
            seen.add(i)
            live[i] = n
            allocs += 1
            total += n
            cur += n
            peak = max(peak, cur)
        elif f[0] == "f":
            assert len(f) == 2, (ln, line)
            i = int(f[1])
            assert i in live, "line %d: free of id %d which is not live" % (ln, i)
            cur -= live.pop(i)
            frees += 1
        else:
            raise AssertionError("line %d: bad op %r" % (ln, line))
    assert not live and cur == 0, "trace ends with %d live ids" % len(live)
    assert allocs == frees
    return allocs, frees, peak, total


def main():
    prof, losses = run_workload()
    evs = memory_events(prof)
    ops, st = convert(evs)
    body = format_ops(ops)
    allocs, frees, peak, total = validate(body)
    if st["order_breaks"]:
        print("warning: %d events break the total_allocated chain" % st["order_breaks"],
              file=sys.stderr)

    sizes = sorted(op[2] for op in ops if op[0] == "a")
    header = [
        "# Allocation trace of a PyTorch char-RNN LSTM training workload (CPU).",
        "# Made by: %s" % CMD,
        "#   (run from the repository root; see record_trace.py for details)",
        "# torch %s (Debian python3-torch 1.13.1+dfsg), CPU only, torch.set_num_threads(1)"
        % torch.__version__,
        "# Route: profiler (torch.profiler profile_memory=True; [memory] events with ptr and",
        "#   alloc_size from kineto_results.experimental_event_tree(), ordered by time;",
        "#   order checked against the running total_allocated: %d breaks)" % st["order_breaks"],
        "# Workload: emb=Embedding(%d,%d) lstm=LSTM(%d,%d,%d) out=Linear(%d,%d); Adam lr %g;"
        % (VOCAB, EMB, EMB, HIDDEN, LAYERS, HIDDEN, VOCAB, LR),
        "#   clip_grad_norm_ %g; batch %d; random token ids, torch.manual_seed(%d);"
        % (CLIP, BATCH, SEED),
        "#   %d steps of truncated BPTT (hidden carried and detached), window lengths %s"
        % (STEPS, SEQ_LENS),
        "#   losses: %s" % " ".join("%.4f" % l for l in losses),
        "# Not in the trace: parameters and token data, allocated before recording began"
        " (the",
        "#   profiler neither reports their frees nor counts them); %d frees of unknown"
        % st["dropped_unknown_frees"],
        "#   addresses (%d bytes) dropped;" % st["dropped_unknown_free_bytes"],
        "#   %d zero-byte allocation events dropped." % st["dropped_zero"],
        "# The last %d 'f' lines are synthetic: they free every id still live when recording"
        % st["end_frees"],
        "#   stopped (Adam state, grads, ...), so the trace ends with zero live allocations.",
        "# Format: 'a <id> <bytes> <stream>' allocation (stream always 0); 'f <id>' free.",
        "# Totals: %d ops, %d allocs, %d frees, %d bytes allocated in all, peak live %d bytes"
        % (allocs + frees, allocs, frees, total, peak),
        "#   (peak computed from this trace alone); alloc sizes: min %d, median %d, max %d"
        % (sizes[0], sizes[len(sizes) // 2], sizes[-1]),
    ]
    # Validate the file exactly as written.
    text = "\n".join(header + body) + "\n"
    a2, f2, p2, _ = validate(text.splitlines())
    assert (a2, f2, p2) == (allocs, frees, peak)
    sys.stdout.write(text)
    print("route=profiler torch=%s ops=%d allocs=%d frees=%d peak_live=%d bytes=%d "
          "dropped_frees=%d dropped_zero=%d end_frees=%d order_breaks=%d"
          % (torch.__version__, allocs + frees, allocs, frees, peak, len(text),
             st["dropped_unknown_frees"], st["dropped_zero"], st["end_frees"],
             st["order_breaks"]), file=sys.stderr)


if __name__ == "__main__":
    main()
