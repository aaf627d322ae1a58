package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

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

// Call sends body (nil for none) of contentType to path and decodes a 2xx answer into out: JSON
// for most types, the raw body for *[]byte, nothing for nil. Another status is an *Error. It is
// what the typed methods use, for the calls of protocols built on this client (dataplane/peer).
func (c *Client) Call(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	_, err := c.roundTrip(ctx, method, path, contentType, body, out)
	return err
}

// Open sends a GET of path and answers a 2xx answer's body as a stream to read and close, and its
// length in bytes, or -1 when the pod did not say; another status is an *Error. The body may be
// large: ctx bounds the whole read, not only the call. Closing it reads what is left of it (up to
// a bound), so that a body read only in part still gives its connection back.
func (c *Client) Open(ctx context.Context, path string) (io.ReadCloser, int64, error) {
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

// discarding closes a body with discard.
type discarding struct{ io.ReadCloser }

func (d discarding) Close() error { return discard(d.ReadCloser) }
