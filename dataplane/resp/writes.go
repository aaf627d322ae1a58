package resp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// Creates and adds are served by the filter's home pod, as HTTP's creates and check-and-sets
// are: the home serializes them, so that two pods cannot create two incarnations of a name, and
// of two concurrent adds of a new item exactly one answers 1. When this pod is the home (or
// serves alone) they run here through the write service. Otherwise the equivalent HTTP request
// (a create, a multi-check-and-set) goes to the home through writes.ForwardToHome, the path
// HTTP's own forwarding takes: the home serves it exactly as if it had come over HTTP, with no
// second protocol between pods to keep in step. The home answers in HTTP's terms, which are
// mapped back onto RedisBloom's replies here.

// create creates the filter name with opts, or reports that it exists (created false).
func (s *Server) create(ctx context.Context, name string, opts filter.Options) (created bool, err error) {
	if err := filter.ValidateName(name); err != nil {
		return false, err
	}
	if s.opts.Writes.HomeElsewhere(name) {
		if a := s.forwardCreate(ctx, name, opts); a != nil {
			if err := answerError(a); err != nil {
				return false, err
			}
			return a.Status == http.StatusCreated, nil
		}
	}
	_, created, err = s.opts.Writes.Create(ctx, s.level, name, opts, false)
	return created, err
}

// add adds items to the filter name, in order, and answers for each whether it may have been
// there. A missing filter is created with create, or is ERR not found when create is nil. full
// says that a non-scaling filter filled up before the item after the answers: nothing after it
// was added. A *stoppedError says the filter could not grow for the item after the answers.
func (s *Server) add(ctx context.Context, name string, create *filter.Options, items []string) (present []bool, full bool, err error) {
	if err := filter.ValidateName(name); err != nil {
		return nil, false, err
	}
	if s.opts.Writes.Placed() {
		return s.addPlaced(ctx, name, create, items)
	}
	if s.opts.Writes.HomeElsewhere(name) {
		if present, served, err := s.addAtHome(ctx, name, create, items); served {
			return present, false, err
		}
	}
	f, err := s.opts.Store.Get(name)
	if isNotFound(err) && create != nil {
		f, _, err = s.opts.Writes.Create(ctx, s.level, name, *create, false)
	}
	switch {
	case isNotFound(err):
		return nil, false, errNotFound
	case err != nil:
		return nil, false, err
	case !f.Options().Scalable:
		return s.addBounded(ctx, f, items)
	}
	present, err = s.opts.Writes.CheckAndSetMany(ctx, s.level, f, items)
	if errors.Is(err, filter.ErrTooLarge) {
		err = &stoppedError{err}
	}
	return present, false, err
}

// stoppedError is the error of an add that the filter stopped at an item it could not grow for:
// the items before it were added, and their answers are returned with it.
type stoppedError struct{ err error }

func (e *stoppedError) Error() string { return e.err.Error() }
func (e *stoppedError) Unwrap() error { return e.err }

// addPlaced adds items under a placed membership: the filter is created first when missing
// and create allows (at the name's home, whose create every pod hears of), then each item goes
// to its partition's home. A non-scaling filter is not bounded at its capacity, as in addAtHome.
func (s *Server) addPlaced(ctx context.Context, name string, create *filter.Options, items []string) (present []bool, full bool, err error) {
	f, err := s.opts.Store.Get(name)
	if isNotFound(err) && create != nil {
		if _, err = s.create(ctx, name, *create); err == nil {
			f, err = s.awaitFilter(ctx, name)
		}
	}
	switch {
	case isNotFound(err):
		return nil, false, errNotFound
	case err != nil:
		return nil, false, err
	}
	present, err = s.opts.Writes.Routed(ctx, s.level, f, wire.OpMultiCheckAndSet, items, false)
	return present, false, err
}

// awaitFilter waits for the filter name, just created at its home, to reach this pod. One that
// reached it already expired (a load's header may give a validity of nanoseconds) is not waited
// for: it will not come back.
func (s *Server) awaitFilter(ctx context.Context, name string) (*filter.Filter, error) {
	for {
		f, err := s.opts.Store.Get(name)
		if !isNotFound(err) {
			return f, err
		}
		if _, here := s.opts.Store.Lookup(name); here {
			return nil, errorf("the filter expired as soon as it was created: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil, errorf("the filter was created at its home pod but has not reached this one yet; retry")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// check answers whether each item may be in f, at consistency one: asked of the owners of its
// partition under a placed membership, of this pod otherwise, and of a peer too for the items
// absent here when this pod does not hold its home lease (writes.Service.AsksPeers).
func (s *Server) check(ctx context.Context, f *filter.Filter, items []string) ([]bool, error) {
	if s.opts.Writes.Placed() {
		return s.opts.Writes.Routed(ctx, wire.ConsistencyOne, f, wire.OpMultiCheck, items, false)
	}
	present := f.CheckMany(items)
	if !s.opts.Writes.AsksPeers(wire.ConsistencyOne) {
		return present, nil
	}
	// The items may view the reader's buffer (itemStrings), which the next commands reuse, and
	// the checks sent to the peers that did not answer in time outlive this command.
	items = slices.Clone(items)
	for i := range items {
		items[i] = strings.Clone(items[i])
	}
	return present, s.opts.Writes.CheckPeers(ctx, wire.ConsistencyOne, f.Name(), items, present)
}

// addBounded adds items to a non-scaling filter one at a time, and stops, as RedisBloom does, at
// the first new item once the filter holds its capacity. Bloomery's fixed filters take items past
// their capacity (their error rate rises); RedisBloom's refuse them. Two adds racing on the last
// free place may both take it: the bound is RedisBloom's within a few items.
func (s *Server) addBounded(ctx context.Context, f *filter.Filter, items []string) (present []bool, full bool, err error) {
	capacity := f.Options().Capacity
	for _, item := range items {
		if f.Items() >= capacity && !f.Check(item) {
			return present, true, nil
		}
		p, err := s.opts.Writes.CheckAndSet(ctx, s.level, f, item)
		if err != nil {
			return present, false, err
		}
		present = append(present, p)
	}
	return present, false, nil
}

// addAtHome sends the adds to the filter's home as a multi-check-and-set, creating the filter
// there first when the home has none and create allows. served is false when no pod before this
// one in the filter's order answered: the adds are then served here. The home applies HTTP's
// semantics, so a non-scaling filter is not bounded at its capacity there.
func (s *Server) addAtHome(ctx context.Context, name string, create *filter.Options, items []string) (present []bool, served bool, err error) {
	body, err := json.Marshal(wire.PeerValuesBody(items))
	if err != nil {
		return nil, true, err
	}
	req := writes.Request{Method: http.MethodPost, URI: wire.FilterOpPath(name, wire.OpMultiCheckAndSet), ContentType: "application/json", Body: body}
	a := s.opts.Writes.ForwardToHome(ctx, name, req)
	if a != nil && a.Status == http.StatusNotFound && create != nil {
		if ca := s.forwardCreate(ctx, name, *create); ca == nil || answerError(ca) != nil {
			return nil, ca != nil, answerError(ca)
		}
		a = s.opts.Writes.ForwardToHome(ctx, name, req)
	}
	switch {
	case a == nil:
		return nil, false, nil
	case a.Status == http.StatusNotFound:
		return nil, true, errNotFound
	}
	if err := answerError(a); err != nil {
		return nil, true, err
	}
	if err := json.Unmarshal(a.Body, &present); err != nil || len(present) != len(items) {
		return nil, true, errorf("the filter's home pod answered %d bytes that are not %d answers", len(a.Body), len(items))
	}
	return present, true, nil
}

// forwardCreate sends a create of name with opts to the filter's home, as HTTP's create: the
// home answers 201 for a new filter and 200 for one that exists. Expiry is left to the home's
// configured default, as this pod's defaults() would set it.
func (s *Server) forwardCreate(ctx context.Context, name string, opts filter.Options) *client.Answer {
	// Numbers, a bool and a string: Marshal cannot fail.
	body, _ := json.Marshal(struct {
		ExpectedInsertions uint64  `json:"expectedInsertions"`
		FPP                float64 `json:"fpp"`
		Scalable           bool    `json:"scalable"`
		Growth             uint    `json:"growth"`
		Tightening         float64 `json:"tightening,omitempty"`
		Partitions         uint32  `json:"partitions,omitempty"`
		Layout             string  `json:"layout"`
	}{opts.Capacity, opts.FPP, opts.Scalable, opts.Growth, opts.Tightening, opts.Partitions, opts.Layout.String()})
	return s.opts.Writes.ForwardToHome(ctx, name, writes.Request{
		Method: http.MethodPut, URI: wire.FilterPath(name), ContentType: "application/json", Body: body,
	})
}

// answerError is the home's error answer as an error reply (TRYAGAIN when the home did not serve
// it); nil for a 2xx answer or none.
func answerError(a *client.Answer) error {
	if a == nil {
		return nil
	}
	if e, ok := errors.AsType[*client.Error](a.Err()); ok {
		if e.Code == wire.CodeHomeUnavailable || e.Code == wire.CodeLeaseLapsed {
			return replyError(tryAgain(e.Message))
		}
		return errorf("%s", e.Message)
	}
	return nil
}

// isNotFound reports whether err means the filter does not exist.
func isNotFound(err error) bool { return errors.Is(err, filter.ErrNotFound) }
