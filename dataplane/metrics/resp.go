package metrics

import "github.com/prometheus/client_golang/prometheus"

// RESP counts the commands of the Redis protocol's port: enough to see that it is used and how
// often it answers errors, without a series per command name (clients choose those).
type RESP struct {
	commands prometheus.Counter
	errors   prometheus.Counter
}

func newRESP() *RESP {
	return &RESP{
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "resp_commands_total",
			Help:      "Commands answered on the RESP port.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "resp_command_errors_total",
			Help:      "Commands the RESP port answered with an error (unknown command, bad arguments, a write not acknowledged...).",
		}),
	}
}

// Command counts a command answered, failed or not.
func (r *RESP) Command(failed bool) {
	r.commands.Inc()
	if failed {
		r.errors.Inc()
	}
}

// Describe implements prometheus.Collector.
func (r *RESP) Describe(ch chan<- *prometheus.Desc) {
	r.commands.Describe(ch)
	r.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (r *RESP) Collect(ch chan<- prometheus.Metric) {
	r.commands.Collect(ch)
	r.errors.Collect(ch)
}
