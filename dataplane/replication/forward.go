package replication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// HomeOrder lists the members in the order that serves a filter's check-and-sets: its home
// first, then who takes over. Self is this pod's name; the list is empty without membership.
func (n *Node) HomeOrder(name string) ([]wire.Member, string) { return n.members.HomeOrder(name) }

// Forward sends a client's request to peer on its behalf. It errs when the peer did not serve
// it: unreachable, or unavailable (503 with code 7, or 13 from a pod that does not serve as the
// filter's home). Any other answer is the peer's to give, errors included: a 503 with code 9 (the
// peer did the write) or 14 (the home's lease had lapsed when it applied it).
//
// The peer may itself wait up to the replication timeout for its own peers, so the request gets
// twice that.
func (n *Node) Forward(ctx context.Context, peer wire.Member, method, requestURI, contentType string, body []byte) (client.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*n.opts.Timeout)
	defer cancel()
	n.stats.ForwardedRequests.Add(1)
	a, err := n.peer(peer).Forward(ctx, method, requestURI, contentType, body)
	if err != nil {
		return client.Answer{}, fmt.Errorf("%s: %w", peer.Name, err)
	}
	if a.Status == http.StatusServiceUnavailable {
		if err := a.Err(); !client.IsReplicationFailed(err) && !client.IsLeaseLapsed(err) {
			return client.Answer{}, fmt.Errorf("%s is unavailable: %w", peer.Name, err)
		}
	}
	return a, nil
}

// PeersToAsk is how many peers a read at level asks for the values this pod's copy answers
// absent: as many as the level counts beyond this pod. A pod that does not hold its home lease
// counts its own copy for nothing, and asks one more, at consistency one too: it may have been
// left out of the members while it was away (frozen, cut off), and its copy may lack writes
// acknowledged without it. A pod without peers asks none.
func (n *Node) PeersToAsk(level wire.Consistency) int {
	peers := len(n.members.Peers())
	need := level.Count(peers+1) - 1
	if !n.LeaseHeld() {
		need = min(need+1, peers)
	}
	return need
}

// CheckPeers asks PeersToAsk(level) peers, in parallel, and ORs their answers into present: a
// value any of them holds is reported present. It errs when too few answer in time. The checks
// go with the others bound for the same peer and filter (checkBatcher).
func (n *Node) CheckPeers(ctx context.Context, name string, values []string, level wire.Consistency, present []bool) error {
	peers := n.members.Peers()
	need := n.PeersToAsk(level)
	if need <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	type answer struct {
		present []bool
		err     error
	}
	answers := make(chan answer, len(peers))
	for _, p := range peers {
		go func() {
			got, err := n.checks.check(ctx, checkRoute{peer: p, name: name}, values)
			if err != nil {
				err = fmt.Errorf("%s: %w", p.Name, err)
			}
			answers <- answer{got, err}
		}()
	}
	answered, failed := 0, 0
	var failures []string
	for answered < need {
		a := <-answers
		if a.err != nil {
			failed++
			failures = append(failures, a.err.Error())
			if len(peers)-failed < need {
				if need > level.Count(len(peers)+1)-1 {
					return fmt.Errorf("%w: consistency %q asks %d of the %d peers, since this pod does not hold its home lease, and only %d answered (%s)",
						ErrReplication, level, need, len(peers), answered, strings.Join(failures, "; "))
				}
				return fmt.Errorf("%w: consistency %q needs %d of %d pods and only %d answered (%s)",
					ErrReplication, level, need+1, len(peers)+1, answered+1, strings.Join(failures, "; "))
			}
			continue
		}
		answered++
		for i, p := range a.present {
			present[i] = present[i] || p
		}
	}
	return nil
}

// errNotServed marks a peer's failure to serve values routed to it: the caller tries the next
// owner.
var errNotServed = errors.New("not served")

// IsNotServed reports whether a routed request was not served by the peer it was sent to
// (unreachable, or unavailable: 503 with code 7), so that another owner may serve it.
func IsNotServed(err error) bool { return errors.Is(err, errNotServed) }

// ServeOn sends values of the filter name to peer for op (multi-check, multi-check-and-set or
// multi-set), marked as forwarded so that peer serves them itself, at level. Answers are nil for
// a multi-set. Errors are the peer's answer, or IsNotServed. Checks go with the others bound for
// the same peer and filter (checkBatcher).
func (n *Node) ServeOn(ctx context.Context, peer wire.Member, op wire.FilterOp, name string, values []string, level wire.Consistency) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*n.opts.Timeout)
	defer cancel()
	var answers []bool
	var err error
	switch op {
	case wire.OpMultiCheck:
		answers, err = n.checks.check(ctx, checkRoute{peer: peer, name: name}, values)
	case wire.OpMultiCheckAndSet:
		n.stats.ForwardedRequests.Add(1)
		answers, err = n.peer(peer).Serve(ctx, level, op, name, values)
	default:
		n.stats.ForwardedRequests.Add(1)
		_, err = n.peer(peer).Serve(ctx, level, op, name, values)
	}
	var apiErr *client.Error
	switch {
	case err == nil:
		return answers, nil
	case !errors.As(err, &apiErr) || apiErr.Code == wire.CodeUnavailable:
		return nil, fmt.Errorf("%w by %s: %w", errNotServed, peer.Name, err)
	}
	return nil, fmt.Errorf("%s: %w", peer.Name, err)
}

// sendChecks is one request of checks that went together (checkBatcher): it is no one caller's,
// so it ends with the node rather than with a caller. A peer answers checks from its own copy,
// asking no one, so one timeout bounds it: a hung peer holds the checks queued behind it no
// longer than it would hold one.
func (n *Node) sendChecks(r checkRoute, values []string) ([]bool, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	n.stats.ForwardedRequests.Add(1)
	return n.peer(r.peer).Serve(ctx, wire.ConsistencyOne, wire.OpMultiCheck, r.name, values)
}
