package rnn

// Share returns a stack over the same parameters with buffers of its own,
// for NoGrad forwards from another goroutine: the service case, where each
// goroutine (or a sync.Pool of them) holds a share of one loaded model's
// layers. A share copies no parameter, refuses what trains (Train
// forwards, Backward, SetDropoutState: ErrShared) and reads the parameters
// as they are when its forward runs on the compute stream, so a caller
// that changes them (an optimizer step, Params.SetValue) while shares run
// gets the values of the moment each forward ran, and one that wants
// them fixed leaves them alone meanwhile. Closing a share frees its
// buffers; the parameters are freed at the last Close of the stack and
// its shares, in either order.
func (l *LSTM) Share() (*LSTM, error) {
	s, err := l.shareStack()
	if err != nil {
		return nil, err
	}
	return &LSTM{s}, nil
}

// Share returns a stack over the same parameters with buffers of its own,
// for NoGrad forwards from another goroutine, as LSTM.Share.
func (g *GRU) Share() (*GRU, error) {
	s, err := g.shareStack()
	if err != nil {
		return nil, err
	}
	return &GRU{s}, nil
}

// shareStack is Share's stack: the configuration, the parameters' views
// and the device's chunk, none of the owner's buffers, saved forward,
// dropout state, branch or callback (a share opens a branch of its own
// when a forward can use one).
func (s *stack) shareStack() (*stack, error) {
	if err := s.g.enter(s.cell.name(), "Share"); err != nil {
		return nil, err
	}
	defer s.g.leave()
	sh := &stack{share: true, dev: s.dev, cell: s.cell, cfg: s.cfg, params: s.params.retain(),
		layers: append([]layerParams(nil), s.layers...), lay: make([]layerBufs, len(s.lay)),
		chunkRows: s.chunkRows, stepwise: s.stepwise, dropSeed: s.dropSeed, drawn: s.drawn}
	return sh, nil
}
