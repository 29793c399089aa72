package train

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gocurrent/gocurrent/device"
	"github.com/gocurrent/gocurrent/rnn"
)

// SampleConfig configures Sample.
type SampleConfig struct {
	// N is the number of tokens to generate.
	N int
	// Temperature divides the logits before the softmax; 0 picks the most
	// likely token every time (argmax).
	Temperature float64
	// TopK, when > 0, draws only among the K most likely tokens.
	TopK int
	// Prime is the text the state is warmed up on; the first token drawn
	// follows its last. It must hold at least one token.
	Prime []int32
	// Seed seeds the draws: one seed, one sample.
	Seed uint64
	// NoGraphs draws every token eagerly, never replaying a recorded
	// chunk (see Sample): the same tokens, for a comparison of the two.
	NoGraphs bool
}

// primeChunk bounds the window the prime is fed in, so priming a long text
// takes memory independent of its length.
const primeChunk = 256

// primeWindows is how many windows of the prime the host stages at once:
// their copies to the device are queued without waiting, and a window
// waits only for the copy of the one primeWindows before it (a prime of
// up to primeWindows·primeChunk tokens is never waited for).
const primeWindows = 4

// tokenChunk is how many drawn tokens the host reads back at once: the
// tokens stay on the device, in a ring, and the host waits for the device
// once per read. A sample's last read takes the last whole chunk and what
// follows it (fewer than tokenChunk tokens), so that N tokens are
// max(1, N/tokenChunk) reads, rounded down: the ring and each read hold up
// to ringSlots tokens.
const (
	tokenChunk = 64
	ringSlots  = 2 * tokenChunk
)

// Sample generates cfg.N tokens from m without gradients, one at a time
// with batch 1, calling emit with each, in order: memory does not grow
// with N. It stops early with emit's error or ctx's.
//
// The tokens are drawn on the device (device.Sample, the generator
// device.SampleUniform seeded with cfg.Seed, token i drawn with counter i):
// token i+1's forward reads the id the kernel wrote, and the host never
// waits for a token. It reads the drawn tokens back in chunks of 64, an
// asynchronous copy each (the last chunk with the fewer than 64 tokens
// after it), and calls emit for a chunk's tokens once its copy completed:
// N/64 host synchronisations, rounded down (one when N is below 64),
// where drawing on the host took two per token. The prime goes to the
// device through pinned staging, queued without waiting (past its first
// 1,024 tokens, at most one wait per 256, where a window's staging is
// still being copied from). emit is called while
// later tokens are being drawn, so it runs up to two chunks behind them;
// a cancelled ctx stops the draws within a chunk and the emits within a
// token, and emit then has had exact tokens only.
//
// When d records graphs (device.Grapher), m is Replayable in rnn.NoGrad
// and cfg.NoGraphs is not set, the second whole chunk of 64 tokens is recorded once and it
// and every later whole chunk are a replay of it: one launch where the
// forwards made hundreds of calls. The tokens are the same bits either
// way.
// The device draws the same tokens on every device from the same logits
// (device.Sample says how to the bit).
func Sample(ctx context.Context, d device.Device, m Model, cfg SampleConfig, emit func(id int32) error) (err error) {
	classes := m.Classes()
	switch {
	case cfg.N < 0:
		return fmt.Errorf("train: Sample: N = %d, want >= 0", cfg.N)
	case len(cfg.Prime) == 0:
		return errors.New("train: Sample: no prime token to start from")
	case !(cfg.Temperature >= 0) || math.IsInf(cfg.Temperature, 0):
		return fmt.Errorf("train: Sample: temperature %v, want >= 0", cfg.Temperature)
	case cfg.TopK < 0:
		return fmt.Errorf("train: Sample: TopK = %d, want >= 0", cfg.TopK)
	}
	for _, id := range cfg.Prime {
		if id < 0 || int(id) >= classes {
			return fmt.Errorf("train: Sample: prime token %d outside the vocabulary [0, %d): %w", id, classes, device.ErrIndex)
		}
	}
	groups := m.Groups()
	if len(groups) == 0 {
		return errors.New("train: Sample: the model has no parameters")
	}
	dt := groups[0].Params.DType()
	st, err := m.NewState(1)
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	defer func() {
		if st != nil {
			err = errors.Join(err, st.Free())
		}
	}()
	// One buffer: the prime's window of ids, whose first element is also
	// the id each drawn token's forward reads, then the ring of drawn
	// tokens, then the index of a recorded chunk's first token (two Int32
	// words, device.Sample's CounterAt).
	buf, err := d.Alloc((primeChunk+ringSlots+2)*4, device.Batches)
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	defer func() { err = errors.Join(err, d.Free(buf)) }()
	ids, ring := buf.Slice(0, primeChunk*4), buf.Slice(primeChunk*4, ringSlots*4)
	base := buf.Slice((primeChunk+ringSlots)*4, 8)
	staging, err := d.Staging(2 * ringSlots * 4)
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	r := &tokenReader{ctx: ctx, d: d, staging: staging, emit: emit}
	defer func() { err = errors.Join(err, r.close()) }()

	// The logits of the last prime token, then of each drawn one.
	pr := primer{d: d}
	defer func() { err = errors.Join(err, pr.close()) }()
	logits, err := pr.feed(m, st, cfg.Prime, ids, int64(classes)*dt.Size())
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	k := d.Kernels()
	ch := chunkGraph{d: d, m: m, k: k, st: st, dt: dt, classes: classes, cfg: cfg, ids: ids, ring: ring.Slice(0, tokenChunk*4), base: base}
	defer func() { err = errors.Join(err, ch.close()) }()
	// The ring holds tokens from index read on, the first not yet queued
	// to be read back; token i goes to slot i - read.
	read := 0
	readAfter := func(i int) error {
		// Read back after token i when it ends a whole chunk and another
		// whole chunk follows, or ends the sample. The ring's next writes
		// are queued after the copy, so the ring needs no second half;
		// the staging buffer has two.
		if n := i + 1 - read; (n == tokenChunk && cfg.N-(i+1) >= tokenChunk) || i == cfg.N-1 {
			if err := r.queue(ring.Slice(0, int64(n)*4)); err != nil {
				return err
			}
			read = i + 1
		}
		return nil
	}
	for i := 0; i < cfg.N; {
		if err := ctx.Err(); err != nil {
			return r.stopped(err)
		}
		if i == read && cfg.N-i >= tokenChunk {
			// A whole chunk ahead, from the ring's first slot: one replay
			// of its recorded tokens when the device and model allow.
			ran, err := ch.run(i, logits)
			if err != nil {
				return fmt.Errorf("train: Sample: %w", err)
			}
			if ran {
				if err := readAfter(i + tokenChunk - 1); err != nil {
					return err
				}
				i += tokenChunk
				if err := r.poll(); err != nil {
					return err
				}
				continue
			}
		}
		err := k.Sample(device.Sample{DType: dt, N: 1, Classes: classes, Logits: logits, Temperature: cfg.Temperature,
			TopK: cfg.TopK, Seed: cfg.Seed, Counter: uint64(i), IDs: ids.Slice(0, 4), Tokens: ring.Slice(int64(i-read)*4, 4)})
		if err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		if err := readAfter(i); err != nil {
			return err
		}
		if i < cfg.N-1 {
			if logits, err = m.Forward(rnn.NoGrad, ids, 1, 1, st); err != nil {
				return fmt.Errorf("train: Sample: %w", err)
			}
		}
		if err := r.poll(); err != nil {
			return err
		}
		i++
	}
	return r.drain()
}

// primer feeds Sample's prime to the model through pinned staging: each
// window's copy to the device is queued on the compute stream, after the
// forward that read the window before and before the one that reads it,
// and the host waits for a copy (copied) only to stage a window in its
// slot again.
// The staging is freed when the sample ends, by when the reads of the
// drawn tokens have waited for work queued after every copy.
type primer struct {
	d       device.Device
	staging device.HostBuffer // primeWindows slots of primeChunk int32, or the prime's length
	copies  []device.Event    // each slot's last copy, nil before its first
}

// feed runs the forwards of prime, a window of primeChunk tokens at a
// time, from state st, each window's ids copied into ids; it returns the
// logits of prime's last token, row bytes.
func (p *primer) feed(m Model, st State, prime []int32, ids device.Buffer, row int64) (logits device.Buffer, err error) {
	windows := (len(prime) + primeChunk - 1) / primeChunk
	slots := min(windows, primeWindows)
	if p.staging, err = p.d.Staging(int64(min(len(prime), slots*primeChunk)) * 4); err != nil {
		return device.Buffer{}, err
	}
	p.copies = make([]device.Event, slots)
	for w := range windows {
		win := prime[w*primeChunk : min((w+1)*primeChunk, len(prime))]
		slot := w % slots
		copied(p.copies[slot])
		h := p.staging.Slice(int64(slot*primeChunk)*4, int64(len(win))*4)
		b := h.Bytes()
		for i, id := range win {
			// The host's byte order, as the device's int32s.
			binary.NativeEndian.PutUint32(b[4*i:], uint32(id))
		}
		if p.copies[slot], err = p.d.CopyToDevice(ids.Slice(0, h.Len()), h, p.d.Stream()); err != nil {
			return device.Buffer{}, err
		}
		out, err := m.Forward(rnn.NoGrad, ids, len(win), 1, st)
		if err != nil {
			return device.Buffer{}, err
		}
		logits = out.Slice(int64(len(win)-1)*row, row)
	}
	return logits, nil
}

// close waits for the copies not yet complete and frees the staging. An
// error of the work before a copy is the token reads' to report, as the
// trainer's values' (copied).
func (p *primer) close() error {
	if p.staging.Device() == nil {
		return nil
	}
	for _, ev := range p.copies {
		copied(ev)
	}
	err := p.d.FreeStaging(p.staging)
	p.staging, p.copies = device.HostBuffer{}, nil
	return err
}

// chunkGraph is Sample's recording of a chunk of tokens (device.Grapher):
// tokenChunk times the draw and the forward that follows it, each draw
// into its slot of the ring with the counter Counter = its place in the
// chunk plus the chunk's first index, which the kernel reads from base.
// Recorded once, it is replayed for every whole chunk: one launch instead
// of tokenChunk times a forward's calls. The draws read the logits where
// the first forward left them (the model's buffer, or where the
// recording copies the last forward's logits to), so that every replay
// finds its first logits where the last one wrote them.
type chunkGraph struct {
	d       device.Device
	m       Model
	k       device.Kernels
	st      State
	dt      device.DType
	classes int
	cfg     SampleConfig
	ids     device.Buffer
	ring    device.Buffer
	base    device.Buffer

	g      device.Graph
	off    bool          // no graph: the device or model cannot, or a capture failed
	warm   bool          // a chunk was drawn eagerly: the logits are a one-token forward's
	first  device.Buffer // the logits the recorded chunk's first draw reads
	high   uint32        // the high word of base, as last written
	primed bool          // base's high word was written
}

// run queues the chunk of tokens from index i, whose first draw reads
// logits, as a replay; ran is false when it cannot (then nothing was
// queued and the caller draws the chunk eagerly).
func (c *chunkGraph) run(i int, logits device.Buffer) (ran bool, err error) {
	if c.off || c.cfg.NoGraphs {
		return false, nil
	}
	if c.g == nil {
		gr, ok := c.d.(device.Grapher)
		r, replayable := c.m.(Replayable)
		if !ok || !replayable || !r.Replayable(rnn.NoGrad) {
			c.off = true
			return false, nil
		}
		if !c.warm {
			// The first chunk is drawn eagerly, so that the chunk recorded
			// starts from the logits of a one-token forward, which the
			// models here leave where the next one-token forward does: the
			// last forward of the recording then writes the next chunk's
			// first logits in place, with no copy (the prime's logits lie
			// elsewhere).
			c.warm = true
			return false, nil
		}
		c.first = logits
		c.g, err = gr.Capture(c.record)
		if errors.Is(err, device.ErrNotCapturable) {
			// Nothing recorded ran: the tokens are drawn eagerly instead.
			c.off, c.g = true, nil
			return false, nil
		}
		if err != nil {
			return false, err
		}
	} else if logits != c.first {
		return false, fmt.Errorf("the logits moved from %#x to %#x between two recorded chunks", c.first.Addr(), logits.Addr())
	}
	// The chunk's first index, as two Int32 words (low first), converted
	// as Fill converts: int32(uint32(w)) is w's bits.
	if err := c.k.Fill(device.Fill{DType: device.Int32, N: 1, X: c.base.Slice(0, 4), Value: float64(int32(uint32(i)))}); err != nil {
		return false, err
	}
	if hi := uint32(uint64(i) >> 32); !c.primed || hi != c.high {
		if err := c.k.Fill(device.Fill{DType: device.Int32, N: 1, X: c.base.Slice(4, 4), Value: float64(int32(hi))}); err != nil {
			return false, err
		}
		c.high, c.primed = hi, true
	}
	return true, c.g.Launch()
}

// record queues one chunk: draw, forward, tokenChunk times.
func (c *chunkGraph) record() error {
	logits := c.first
	for j := range tokenChunk {
		err := c.k.Sample(device.Sample{DType: c.dt, N: 1, Classes: c.classes, Logits: logits, Temperature: c.cfg.Temperature,
			TopK: c.cfg.TopK, Seed: c.cfg.Seed, Counter: uint64(j), CounterAt: c.base, IDs: c.ids.Slice(0, 4),
			Tokens: c.ring.Slice(int64(j)*4, 4)})
		if err != nil {
			return err
		}
		if logits, err = c.m.Forward(rnn.NoGrad, c.ids, 1, 1, c.st); err != nil {
			return err
		}
	}
	if logits != c.first {
		return c.k.Copy(device.Copy{Dst: c.first, Src: logits})
	}
	return nil
}

func (c *chunkGraph) close() error {
	if c.g == nil {
		return nil
	}
	return c.g.Close()
}

// tokenReader reads the chunks of drawn tokens back from the device and
// emits them in order: each chunk's copy goes into one half of the staging
// buffer, and is emitted once it completed (polled with Done, so that
// emitting never waits for the device when the copy is already done; then
// Wait returns at once and reports any error of the work before it).
type tokenReader struct {
	ctx     context.Context
	d       device.Device
	staging device.HostBuffer // two halves of ringSlots int32
	emit    func(int32) error
	// inFlight are the copies not yet emitted, oldest first (at most 2):
	// the half of staging each went into and its tokens.
	inFlight []chunkCopy
	next     int // the half the next copy goes into
	emitted  int
}

type chunkCopy struct {
	ev     device.Event
	half   int
	tokens int
}

// queue copies the tokens of src (a prefix of the ring) to the host.
func (r *tokenReader) queue(src device.Buffer) error {
	if len(r.inFlight) == 2 {
		// Both halves hold chunks not yet emitted: the oldest goes first.
		if err := r.emitOldest(); err != nil {
			return err
		}
	}
	n := src.Len() / 4
	ev, err := r.d.CopyToHost(r.staging.Slice(int64(r.next)*ringSlots*4, n*4), src, r.d.Stream())
	if err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	r.inFlight = append(r.inFlight, chunkCopy{ev: ev, half: r.next, tokens: int(n)})
	r.next ^= 1
	return nil
}

// poll emits the chunks whose copies completed, without waiting.
func (r *tokenReader) poll() error {
	for len(r.inFlight) > 0 {
		done, err := r.inFlight[0].ev.Done()
		if err != nil {
			return fmt.Errorf("train: Sample: %w", err)
		}
		if !done {
			return nil
		}
		if err := r.emitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// drain emits every chunk left, waiting for their copies.
func (r *tokenReader) drain() error {
	for len(r.inFlight) > 0 {
		if err := r.emitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// emitOldest waits for the oldest copy and emits its tokens.
func (r *tokenReader) emitOldest() error {
	c := r.inFlight[0]
	r.inFlight = r.inFlight[1:]
	if err := c.ev.Wait(); err != nil {
		return fmt.Errorf("train: Sample: %w", err)
	}
	b := r.staging.Slice(int64(c.half)*ringSlots*4, int64(c.tokens)*4).Bytes()
	for i := range c.tokens {
		if err := r.ctx.Err(); err != nil {
			return r.stopped(err)
		}
		// The device's int32s in the host's byte order, as
		// device.UploadSlice and DownloadSlice take them.
		if err := r.emit(int32(binary.NativeEndian.Uint32(b[4*i:]))); err != nil {
			return err
		}
		r.emitted++
	}
	return nil
}

// stopped is the error of a sample that ctx stopped.
func (r *tokenReader) stopped(err error) error {
	return fmt.Errorf("train: Sample: stopped after %d tokens: %w", r.emitted, err)
}

// close waits for the copies still in flight, which write into the
// staging buffer, and frees it.
func (r *tokenReader) close() error {
	var errs []error
	for _, c := range r.inFlight {
		if err := c.ev.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("train: Sample: %w", err))
		}
	}
	r.inFlight = nil
	if err := r.d.FreeStaging(r.staging); err != nil {
		errs = append(errs, fmt.Errorf("train: Sample: %w", err))
	}
	return errors.Join(errs...)
}
