package client

import (
	"context"
	"net/http"
	"net/url"

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
