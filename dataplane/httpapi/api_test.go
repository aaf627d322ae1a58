package httpapi

import (
	"log/slog"
	"testing"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/metrics"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// newTestAPI builds the API over an in-memory store and a node with no peers, as a data plane
// run by hand has.
func newTestAPI(t *testing.T, cfg config.Config) *Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	store := filter.NewStore(filter.Limits{FilterBytes: cfg.MaxFilterBytes, TotalBytes: cfg.MaxTotalBytes}, nil)
	node := replication.NewNode(replication.Options{Store: store, Log: log, WriteConsistency: "quorum", Timeout: cfg.ReplicationTimeout})
	var s *Server
	m := metrics.New(metrics.Options{Store: store, Cluster: node, Ready: func() bool { return s.Ready() }})
	s, err := New(Options{Config: cfg, Log: log, Store: store, Node: node, Metrics: m, Writes: writes.New(store, node, log)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
