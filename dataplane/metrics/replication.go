package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomery/bloomery/dataplane/replication"
)

// replicationCollector reads the cluster node's counters at scrape time.
type replicationCollector struct {
	node *replication.Node

	queued, replicated, failures, dropped, batches, streamed, forwarded, homeUnavailable, merges, mergedBytes, passes, differences, epoch, peers, standingIn, peersDown, failedFast *prometheus.Desc
	// Of the placement: partitions by state, bytes pulled by moves, whether the pod caught up.
	partitions, movedBytes, caughtUp *prometheus.Desc
}

func newReplicationCollector(node *replication.Node) *replicationCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "replication", name), help, labels, nil)
	}
	return &replicationCollector{
		node:            node,
		queued:          desc("queued_writes", "Writes waiting to be sent to a peer: the replication lag.", "peer"),
		replicated:      desc("writes_total", "Writes forwarded to the peers."),
		failures:        desc("write_failures_total", "Writes answered 503 because fewer pods than their consistency level acknowledged them in time."),
		dropped:         desc("dropped_writes_total", "Writes not queued for a peer whose queue was full; anti-entropy repairs the peer."),
		batches:         desc("sent_batches_total", "Batches that carried writes to a peer, on its stream or as requests."),
		streamed:        desc("streamed_batches_total", "Of the batches sent to peers, those that went on a stream rather than as a request."),
		forwarded:       desc("forwarded_requests_total", "Client requests sent to another pod: check-and-sets and creates to the filter's home, reads widened by ?consistency, values routed to their partitions' owners."),
		homeUnavailable: desc("home_unavailable_total", "Check-and-sets and creates answered 503 code 13: their filter's home, as the membership names it, did not serve them (unreachable, not serving as home yet, or fenced by a newer epoch). No other pod serves them in its place."),
		merges:          desc("merges_total", "Dumps from peers merged in that changed something (catch-up and anti-entropy)."),
		mergedBytes:     desc("merged_bytes_total", "Bytes of the layers that merges changed."),
		passes:          desc("anti_entropy_passes_total", "Anti-entropy passes run."),
		differences:     desc("differences_total", "Filters found missing, older, different or deleted by catch-up and anti-entropy."),
		epoch:           desc("membership_epoch", "Epoch of the membership the operator last told this pod; 0 before the first."),
		peers:           desc("peers", "Peers in the current membership."),
		peersDown:       desc("peers_down", "Peers held down: their last call got no answer and they have not answered a probe since, so calls to them fail at once."),
		failedFast:      desc("failed_fast_calls_total", "Calls to a peer failed at once, without being made, while it was held down.", "peer"),
		standingIn:      desc("standing_in", "1 while this pod, a new home under the membership's epoch, merges from a quorum of owners before serving the check-and-sets it gained (answered 503 code 13 meanwhile), else 0."),
		partitions: prometheus.NewDesc(prometheus.BuildFQName(namespace, "placement", "partitions"),
			"Partitions of all filters (pairs of filter and partition) by state: owned under the membership's placement, moving (owned anew and not pulled yet), held here.", []string{"state"}, nil),
		movedBytes: prometheus.NewDesc(prometheus.BuildFQName(namespace, "placement", "moved_bytes_total"),
			"Bytes of partitions pulled from their previous owners by moves.", nil, nil),
		caughtUp: prometheus.NewDesc(prometheus.BuildFQName(namespace, "placement", "caught_up"),
			"1 when the pod holds every partition it owns under the membership's placement, 0 while a move's pull or the catch-up is under way.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (r *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{r.queued, r.replicated, r.failures, r.dropped, r.batches, r.streamed, r.forwarded, r.homeUnavailable, r.merges, r.mergedBytes, r.passes, r.differences, r.epoch, r.peers, r.standingIn, r.peersDown, r.failedFast, r.partitions, r.movedBytes, r.caughtUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	st := r.node.Stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(r.replicated, st.ReplicatedOps.Load())
	counter(r.failures, st.ReplicationFailures.Load())
	counter(r.dropped, st.DroppedOps.Load())
	counter(r.batches, st.SentBatches.Load())
	counter(r.streamed, st.StreamedBatches.Load())
	counter(r.forwarded, st.ForwardedRequests.Load())
	counter(r.homeUnavailable, st.HomeUnavailable.Load())
	counter(r.merges, st.Merges.Load())
	counter(r.mergedBytes, st.MergedBytes.Load())
	counter(r.passes, st.AntiEntropyPasses.Load())
	counter(r.differences, st.Differences.Load())
	m := r.node.Membership()
	ch <- prometheus.MustNewConstMetric(r.epoch, prometheus.GaugeValue, float64(m.Epoch))
	ch <- prometheus.MustNewConstMetric(r.peers, prometheus.GaugeValue, float64(max(len(m.Members)-1, 0)))
	standingIn := 0.0
	if r.node.StandingIn() {
		standingIn = 1
	}
	ch <- prometheus.MustNewConstMetric(r.standingIn, prometheus.GaugeValue, standingIn)
	ch <- prometheus.MustNewConstMetric(r.peersDown, prometheus.GaugeValue, float64(len(r.node.PeersDown())))
	for peer, n := range r.node.FailedFastCalls() {
		ch <- prometheus.MustNewConstMetric(r.failedFast, prometheus.CounterValue, float64(n), peer)
	}
	for peer, n := range r.node.QueuedWrites() {
		ch <- prometheus.MustNewConstMetric(r.queued, prometheus.GaugeValue, float64(n), peer)
	}
	p := r.node.PlacementStatus()
	for state, n := range map[string]int{"owned": p.PartitionsOwned, "moving": p.PartitionsMoving, "held": p.PartitionsHeld} {
		ch <- prometheus.MustNewConstMetric(r.partitions, prometheus.GaugeValue, float64(n), state)
	}
	counter(r.movedBytes, p.MovedBytes)
	caughtUp := 0.0
	if p.CaughtUp {
		caughtUp = 1
	}
	ch <- prometheus.MustNewConstMetric(r.caughtUp, prometheus.GaugeValue, caughtUp)
}
