package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// The calls pods make to each other: replicated writes, the inventory and dumps of repair, and
// requests forwarded on a client's behalf. Pods make them with the Forwarded option.

// Apply sends a batch of writes, encoded in the binary form of wire.OpsContentType, and answers
// per write whether the pod holds it. The batch must not be reused: the transport may still read
// it after Apply returned (when the pod answers before reading it all).
func (c *Client) Apply(ctx context.Context, batch []byte) ([]bool, error) {
	var out wire.ApplyResponse
	if _, err := c.roundTrip(ctx, http.MethodPost, wire.ApplyPath, wire.OpsContentType, batch, &out); err != nil {
		return nil, err
	}
	return out.Applied, nil
}

// CheckRoom asks the pod whether it can hold the filters of a batch of creates (in the binary
// form of wire.OpsContentType); the error is the pod's answer when it cannot.
func (c *Client) CheckRoom(ctx context.Context, batch []byte) error {
	_, err := c.roundTrip(ctx, http.MethodPost, wire.RoomPath, wire.OpsContentType, batch, nil)
	return err
}

// Inventory answers what the pod holds: a digest of every live filter, and the tombstones.
func (c *Client) Inventory(ctx context.Context) (wire.Inventory, error) {
	var inv wire.Inventory
	_, err := c.do(ctx, http.MethodGet, wire.InventoryPath, nil, &inv)
	return inv, err
}

// Dump answers the filter's state in the snapshot's record format, as a stream to read and close,
// and its length in bytes, or -1 when the pod did not say. A dump may be large: ctx bounds the
// whole read, not only the call.
func (c *Client) Dump(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	return c.DumpPartitions(ctx, name, nil)
}

// DumpPartitions is Dump of the partitions listed only (nil: every one the pod holds; empty: none,
// the filter's definition alone).
func (c *Client) DumpPartitions(ctx context.Context, name string, partitions []int) (io.ReadCloser, int64, error) {
	path := wire.FilterOpPath(name, wire.OpDump)
	if partitions != nil {
		list := make([]string, len(partitions))
		for i, p := range partitions {
			list[i] = strconv.Itoa(p)
		}
		path += "?" + wire.PartitionsParam + "=" + strings.Join(list, ",")
	}
	resp, err := c.send(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return nil, 0, err
	}
	if !success(resp.StatusCode) {
		defer func() { _ = discard(resp.Body) }()
		return nil, 0, decodeError(resp)
	}
	return discarding{resp.Body}, resp.ContentLength, nil
}

// discarding closes a body with discard, so that a dump read only in part still gives its
// connection back.
type discarding struct{ io.ReadCloser }

func (d discarding) Close() error { return discard(d.ReadCloser) }

// Answer is a pod's answer to a forwarded request, to hand back to the client as it is.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
}

// Err is the answer as an error, as the other methods return it: nil for a 2xx answer, an *Error
// otherwise.
func (a Answer) Err() error {
	if success(a.Status) {
		return nil
	}
	return errorOf(a.Status, a.Body)
}

// Forward sends a request the way a client sent it to another pod (requestURI is its path and
// query), and answers the pod's answer whatever its status: errors included, it is the client's.
func (c *Client) Forward(ctx context.Context, method, requestURI, contentType string, body []byte) (Answer, error) {
	resp, err := c.send(ctx, method, requestURI, contentType, body)
	if err != nil {
		return Answer{}, err
	}
	defer func() { _ = discard(resp.Body) }()
	raw, err := readAnswer(resp.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: %w", method, requestURI, err)
	}
	return Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: raw}, nil
}
