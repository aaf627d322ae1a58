package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherCommand is the command label of the commands the RESP port does not know: their names are
// the client's to choose, and as labels they would make a series per typo.
const OtherCommand = "other"

// RESP are the Redis protocol port's metrics: commands by name, their errors and latency, the
// connections and the refused authentications.
type RESP struct {
	commands     *prometheus.CounterVec
	errors       *prometheus.CounterVec
	durations    *prometheus.HistogramVec
	open         prometheus.Gauge
	accepted     prometheus.Counter
	closed       *prometheus.CounterVec
	refused      *prometheus.CounterVec
	authFailures prometheus.Counter
}

// RESPCommand is one command name's series, resolved once: counting a command takes no lookup.
type RESPCommand struct {
	count, errors prometheus.Counter
	duration      prometheus.Observer
}

func newRESP() *RESP {
	return &RESP{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "commands_total",
			Help: "Commands answered on the RESP port, by command name (lower case; other for commands the port does not know).",
		}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "command_errors_total",
			Help: "Commands the RESP port answered with an error (unknown command, bad arguments, NOAUTH, a write not acknowledged...), by command name.",
		}, []string{"command"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "resp", Name: "command_duration_seconds",
			Help:    "Time from a command's decoding to its answer being written to the connection's buffer, by command name.",
			Buckets: latencyBuckets,
		}, []string{"command"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "resp", Name: "connections",
			Help: "Connections open to the RESP port.",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "connections_total",
			Help: "Connections the RESP port accepted.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "connections_closed_total",
			Help: "Connections to the RESP port closed, by reason: client (the client closed it, or QUIT), idle (respTimeoutSeconds), slow_command and slow_reader (requestTimeoutSeconds), too_large (a command past the limits), protocol (not RESP), budget (maxRequestBytesInFlight), shutdown.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "connections_refused_total",
			Help: "Connections the RESP port refused, by reason: max_clients (respMaxClients).",
		}, []string{"reason"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "resp", Name: "auth_failures_total",
			Help: "AUTH and HELLO ... AUTH refused on the RESP port for a wrong user name or password.",
		}),
	}
}

// Command resolves the series of the command name once; the caller keeps the names to a bounded
// set (the commands it knows, and OtherCommand).
func (r *RESP) Command(name string) *RESPCommand {
	return &RESPCommand{
		count:    r.commands.WithLabelValues(name),
		errors:   r.errors.WithLabelValues(name),
		duration: r.durations.WithLabelValues(name),
	}
}

// Answered counts a command answered after elapsed, failed or not. A nil RESPCommand counts
// nothing.
func (c *RESPCommand) Answered(failed bool, elapsed time.Duration) {
	if c == nil {
		return
	}
	c.count.Inc()
	if failed {
		c.errors.Inc()
	}
	c.duration.Observe(elapsed.Seconds())
}

// Opened counts a connection accepted; Closed must follow.
func (r *RESP) Opened() {
	r.open.Inc()
	r.accepted.Inc()
}

// Closed counts a connection closed, for a reason of a bounded set.
func (r *RESP) Closed(reason string) {
	r.open.Dec()
	r.closed.WithLabelValues(reason).Inc()
}

// Refused counts a connection refused, for a reason of a bounded set.
func (r *RESP) Refused(reason string) { r.refused.WithLabelValues(reason).Inc() }

// AuthFailed counts a refused authentication.
func (r *RESP) AuthFailed() { r.authFailures.Inc() }

// Describe implements prometheus.Collector.
func (r *RESP) Describe(ch chan<- *prometheus.Desc) {
	r.commands.Describe(ch)
	r.errors.Describe(ch)
	r.durations.Describe(ch)
	r.open.Describe(ch)
	r.accepted.Describe(ch)
	r.closed.Describe(ch)
	r.refused.Describe(ch)
	r.authFailures.Describe(ch)
}

// Collect implements prometheus.Collector.
func (r *RESP) Collect(ch chan<- prometheus.Metric) {
	r.commands.Collect(ch)
	r.errors.Collect(ch)
	r.durations.Collect(ch)
	r.open.Collect(ch)
	r.accepted.Collect(ch)
	r.closed.Collect(ch)
	r.refused.Collect(ch)
	r.authFailures.Collect(ch)
}
