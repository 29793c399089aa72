// Package rnn holds the recurrent layers: Embedding, LSTM and GRU (several
// layers, fused over the sequence in cuDNN's style: one GEMM for the input
// projection of all time steps, then per step one recurrent GEMM and one
// fused pointwise kernel), Linear and softmax cross-entropy, with PyTorch's
// parameter names, layouts and initialisation. State (h, and c for LSTM)
// belongs to the caller and Detach cuts its gradient path for truncated
// backpropagation through time. Layers run in training mode, which saves
// what backward needs, or in no-grad mode, which saves nothing so that
// memory stays constant in the sequence length.
//
// The layers are written against device.Device only, so they run on the CPU
// and CUDA devices alike. They arrive with issue 4.
package rnn
