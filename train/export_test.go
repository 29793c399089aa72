package train

// ForgetGraphShape makes the trainer's next replay find its graphs
// recorded for another batch shape than its batches', which no windows
// source delivers (a loader's batches all have its shape), so that a test
// reaches the path that records them again.
func ForgetGraphShape(t *Trainer) { t.sg.seq = -1 }

// GraphsRecorded is the number of step graphs t recorded.
func GraphsRecorded(t *Trainer) int { return t.sg.recorded }

// ReadCheckpointBytes is ReadCheckpoint of a file's bytes, for a test that
// reads thousands of damaged copies of one file without writing them.
func ReadCheckpointBytes(path string, b []byte) (*Checkpoint, error) { return readCheckpoint(path, b) }
