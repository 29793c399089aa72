package svc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gocurrent/gocurrent/alloc"
)

// The per-job metrics, labelled by job id: the figures of Status, read
// when Prometheus scrapes, so /metrics and GET /jobs agree.
var (
	descStep = prometheus.NewDesc("gocurrent_job_step",
		"Optimizer steps the job has taken.", []string{"job"}, nil)
	descSteps = prometheus.NewDesc("gocurrent_job_steps_target",
		"Optimizer steps the job runs to.", []string{"job"}, nil)
	descSkipped = prometheus.NewDesc("gocurrent_job_skipped_steps",
		"Steps the job skipped for a non-finite loss or gradient.", []string{"job"}, nil)
	descLoss = prometheus.NewDesc("gocurrent_job_loss",
		"The job's last step's mean cross-entropy, nats per token (NaN before the first).", []string{"job"}, nil)
	descTokens = prometheus.NewDesc("gocurrent_job_tokens_per_second",
		"The job's training rate over its current run.", []string{"job"}, nil)
	descWait = prometheus.NewDesc("gocurrent_job_data_wait_ratio",
		"Fraction of the job's current run spent waiting for batches.", []string{"job"}, nil)
	descMemory = prometheus.NewDesc("gocurrent_job_memory_bytes",
		"Device memory the job's scope holds, by category, after its last step.", []string{"job", "category"}, nil)
	descReserved = prometheus.NewDesc("gocurrent_job_reserved_bytes",
		"Device memory the job's scope reserves (what its limit caps), after its last step.", []string{"job"}, nil)
	descLimit = prometheus.NewDesc("gocurrent_job_memory_limit_bytes",
		"The job's memory limit (0: none but the device's).", []string{"job"}, nil)
	descState = prometheus.NewDesc("gocurrent_job_state",
		"1 for the job's state, 0 for the others.", []string{"job", "state"}, nil)
)

// collector exports the jobs' figures.
type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStep, descSteps, descSkipped, descLoss, descTokens, descWait, descMemory, descReserved, descLimit, descState} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, st := range c.s.Jobs() {
		gauge(descStep, float64(st.Step), st.ID)
		gauge(descSteps, float64(st.Steps), st.ID)
		gauge(descSkipped, float64(st.Skipped), st.ID)
		gauge(descLoss, float64(st.Loss), st.ID)
		gauge(descTokens, st.TokensPerSecond, st.ID)
		gauge(descWait, st.DataWait, st.ID)
		for _, cat := range alloc.Categories() {
			gauge(descMemory, float64(st.Memory[cat.String()]), st.ID, cat.String())
		}
		gauge(descReserved, float64(st.ReservedBytes), st.ID)
		gauge(descLimit, float64(st.Spec.MemoryLimit), st.ID)
		for _, state := range states {
			v := 0.0
			if st.State == state {
				v = 1
			}
			gauge(descState, v, st.ID, string(state))
		}
	}
}
