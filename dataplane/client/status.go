package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// FilterStatus reads what the operator reports of the filter name: its shape and state, with the
// fill ratio and rate estimated rather than counted, so that the call costs the server the same
// for a filter of any size. An absent or expired filter is an error for which IsNotFound is true.
func (c *Client) FilterStatus(ctx context.Context, name string) (wire.FilterStatus, error) {
	var st wire.FilterStatus
	if _, err := c.do(ctx, http.MethodGet, wire.FilterStatusPath(url.PathEscape(name)), nil, &st); err != nil {
		return wire.FilterStatus{}, err
	}
	return st, nil
}

// FilterStatuses reads the status of every live filter of the pod. With wait above zero it is a
// long poll: the pod answers once its filters' version differs from version (which may be empty),
// or after wait, whole seconds up to wire.MaxStatusesWait; ctx must outlast wait. With changes,
// the answer may carry only what changed since version (see wire.FilterStatuses).
func (c *Client) FilterStatuses(ctx context.Context, version string, wait time.Duration, changes bool) (wire.FilterStatuses, error) {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	if changes {
		q.Set("changes", "true")
	}
	if wait > 0 {
		q.Set("wait", strconv.Itoa(int(wait/time.Second)))
	}
	path := wire.FilterStatusesPath
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var st wire.FilterStatuses
	if _, err := c.do(ctx, http.MethodGet, path, nil, &st); err != nil {
		return wire.FilterStatuses{}, err
	}
	return st, nil
}
