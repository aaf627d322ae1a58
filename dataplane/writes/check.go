package writes

import (
	"context"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// AsksPeers reports whether a check at level, of values this pod's copy answers absent, asks
// peers too (replication.Node.PeersToAsk): beyond consistency one, or at any level on a pod that
// does not hold its home lease.
func (s *Service) AsksPeers(level wire.Consistency) bool {
	return s.node.Replicating() && s.node.PeersToAsk(level) > 0
}

// CheckPeers completes a check of values of the filter name that this pod's copy answered
// (present) with the answers of the peers that level asks (AsksPeers), for the values the copy
// answered absent. It errs (replication.ErrReplication) when too few peers answer.
func (s *Service) CheckPeers(ctx context.Context, level wire.Consistency, name string, values []string, present []bool) error {
	if !s.AsksPeers(level) {
		return nil
	}
	var absent []string
	var at []int
	for i, p := range present {
		if !p {
			absent, at = append(absent, values[i]), append(at, i)
		}
	}
	if len(absent) == 0 {
		return nil
	}
	answers := make([]bool, len(absent))
	if err := s.node.CheckPeers(ctx, name, absent, level, answers); err != nil {
		return err
	}
	for j, i := range at {
		present[i] = answers[j]
	}
	return nil
}
