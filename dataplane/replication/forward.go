package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Answer is a peer's answer to a forwarded request, to hand back to the client as it is.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
}

// maxAnswer bounds a forwarded answer: booleans for at most one request body's values.
const maxAnswer = 64 << 20

// HomeOrder lists the members in the order that serves a filter's check-and-sets: its home
// first, then who takes over. Self is this pod's name; the list is empty without membership.
func (n *Node) HomeOrder(name string) ([]wire.Member, string) { return n.members.HomeOrder(name) }

// Forward sends a client's request to peer on its behalf. It errs when the peer did not serve
// it (unreachable, or unavailable: 503 with code 7), so that the caller tries the next pod; any
// other answer is the peer's to give, errors included. A 503 with code 9 is such an answer: the
// peer did the write, and doing it again elsewhere would make a second one.
//
// The peer may itself wait up to the replication timeout for its own peers, so the request gets
// twice that.
func (n *Node) Forward(ctx context.Context, peer wire.Member, method, requestURI, contentType string, body []byte) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, peer.URL+requestURI, bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(ForwardedHeader, "1")
	n.stats.ForwardedRequests.Add(1)
	resp, err := n.http.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s: %w", peer.Name, err)
	}
	defer func() { drain(resp.Body); _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return Answer{}, fmt.Errorf("%s: reading its answer: %w", peer.Name, err)
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		var e wire.ErrorBody
		if json.Unmarshal(raw, &e) != nil || e.Code != wire.CodeReplication {
			return Answer{}, fmt.Errorf("%s is unavailable: %s", peer.Name, readError(bytes.NewReader(raw)))
		}
	}
	return Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: raw}, nil
}

// CheckPeers asks enough peers for a read at level to reach that many pods with this one, in
// parallel, and ORs their answers into present: a value any of them holds is reported present.
// It errs when too few answer in time.
func (n *Node) CheckPeers(ctx context.Context, name string, values []string, level wire.Consistency, present []bool) error {
	peers := n.members.Peers()
	need := level.Count(len(peers)+1) - 1
	if need <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	body, err := json.Marshal(map[string][]string{"values": values})
	if err != nil {
		return err
	}
	type answer struct {
		present []bool
		err     error
	}
	answers := make(chan answer, len(peers))
	path := wire.BasePath + "/bloomfilter/" + url.PathEscape(name) + "/multi-check"
	for _, p := range peers {
		go func() {
			a, err := n.Forward(ctx, p, http.MethodPost, path, "application/json", body)
			if err == nil && a.Status != http.StatusOK {
				err = fmt.Errorf("%s answered %d: %s", p.Name, a.Status, readError(bytes.NewReader(a.Body)))
			}
			var got []bool
			if err == nil {
				if err = json.Unmarshal(a.Body, &got); err == nil && len(got) != len(values) {
					err = fmt.Errorf("%s answered %d booleans for %d values", p.Name, len(got), len(values))
				}
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
