// Package client is a typed Go client of the data plane's HTTP API, public and internal: one
// method per endpoint, answers decoded into the types of package wire, and failures as *Error
// carrying the HTTP status and the API's error code. Tests, benchmarks, the operator and the pods
// calling each other all use it, so they exercise the same contract as any other user.
//
// A Client is safe for concurrent use. Every method takes a context, which bounds the whole
// call including reading the answer; the client itself sets no overall timeout.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Client calls one data-plane server.
type Client struct {
	base string // scheme://host[:port], no trailing slash
	http *http.Client
	// query is added to every filter request: the consistency level, when one was asked for.
	query string
	// forwarded marks every request as a pod's (wire.ForwardedHeader).
	forwarded bool
	// internal sends the public API's requests to their wire.InternalPath, with token.
	internal bool
	token    string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc instead of the shared default.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithConsistency asks every filter request for a consistency level: how many pods of a cluster
// must hold a write before it is answered, or answer a read (see docs/replication.md).
func WithConsistency(level wire.Consistency) Option {
	return func(c *Client) { c.query = "?" + wire.ConsistencyParam + "=" + url.QueryEscape(string(level)) }
}

// At is a copy of the client that asks its filter requests for the consistency level.
func (c *Client) At(level wire.Consistency) *Client {
	copied := *c
	WithConsistency(level)(&copied)
	return &copied
}

// Forwarded marks every request as sent by another pod of the cluster (wire.ForwardedHeader): the
// receiver serves it itself, neither forwarding it to the filter's home nor asking its own peers.
// The pods set it on the clients they call each other with.
func Forwarded() Option {
	return func(c *Client) { c.forwarded = true }
}

// Internal makes the Client call a pod's internal port, as the operator and the pods do: every
// request carries the cluster's bearer token, and the public API's paths become their
// wire.InternalPath. The base URL is then the internal port's.
func Internal(token string) Option {
	return func(c *Client) { c.internal, c.token = true, token }
}

// defaultHTTPClient is shared by every Client built without WithHTTPClient, so that all of them
// draw on one pool of keep-alive connections. Its users, such as benchmarks, run many requests at
// once against the same pod.
var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	return NewHTTPClient(TransportOptions{
		DialTimeout:           2 * time.Second,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		ProxyFromEnvironment:  true,
	})
})

// New returns a Client of the server at baseURL, such as "http://127.0.0.1:8080" (without the
// /v1 prefix).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: defaultHTTPClient()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// CreateOptions are the fields of a create request. A nil field is left out of the request, so
// the server applies its configured default; that matters where the zero value means something
// else, such as ValidPeriodAfterCreate 0 (never expire) against absent (the server's default
// expiry). Go 1.26's new(expr) fills them: CreateOptions{FPP: new(0.001)}.
type CreateOptions struct {
	// ExpectedInsertions is the capacity the filter (its first layer, if scalable) is sized for.
	ExpectedInsertions *uint64 `json:"expectedInsertions,omitempty"`
	// FPP is the false positive probability, in (0, 1).
	FPP *float64 `json:"fpp,omitempty"`
	// ValidPeriodAfterCreate expires the filter this many seconds after creation; 0 means never.
	ValidPeriodAfterCreate *int64 `json:"validPeriodAfterCreate,omitempty"`
	// ValidPeriodAfterAccess expires the filter this many seconds after its last check or set.
	ValidPeriodAfterAccess *int64 `json:"validPeriodAfterAccess,omitempty"`
	// Overwrite replaces an existing filter of the same name with an empty one. Absent and
	// false mean the same, so it is a plain bool.
	Overwrite bool `json:"overwrite,omitempty"`
	// Scalable filters grow by adding layers; false gives a filter of fixed size.
	Scalable *bool `json:"scalable,omitempty"`
	// Growth is the capacity factor from one layer to the next.
	Growth *uint `json:"growth,omitempty"`
	// Tightening is the error factor from one layer to the next, in (0, 1).
	Tightening *float64 `json:"tightening,omitempty"`
	// Partitions splits the filter's values into that many partitions by a hash of the value;
	// absent, the server picks the fewest whose partition fits its maxFilterBytes.
	Partitions *int `json:"partitions,omitempty"`
	// Layout is how values are hashed and layers sized: "bitsandblooms" (absent: the default)
	// or "redisbloom", RedisBloom's own, whose BF.SCANDUMP chunks RedisBloom loads.
	Layout string `json:"layout,omitempty"`
	// Owner is a UUID that says who made the filter; the filter keeps it and answers it back.
	Owner string `json:"owner,omitempty"`
}

// Error is a non-2xx answer of the server.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's error code (wire.CodeBadParameter, wire.CodeFilterNotFound, ...); 0 when
	// the body was not the API's error body, as when a proxy answered instead of the server.
	Code int
	// Message is the server's message, or the start of the body when it was not an error body.
	Message string
}

func (e *Error) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("HTTP %d, code %d: %s", e.Status, e.Code, e.Message)
}

// hasCode reports whether err is, or wraps, an *Error with that code.
func hasCode(err error, code int) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code == code
}

// IsBadParameter reports whether the server refused the request's parameters (code 1, HTTP 400):
// a missing or mistyped field, a value out of range, an invalid filter name.
func IsBadParameter(err error) bool { return hasCode(err, wire.CodeBadParameter) }

// IsOtherOwner reports whether a DeleteOwned found the filter made by another owner (code 15, HTTP
// 409).
func IsOtherOwner(err error) bool { return hasCode(err, wire.CodeOtherOwner) }

// IsNotFound reports whether the filter does not exist or has expired (code 2, HTTP 404).
func IsNotFound(err error) bool { return hasCode(err, wire.CodeFilterNotFound) }

// IsBodyTooLarge reports whether the request body exceeded the server's maxHttpRequestLength
// (code 3, HTTP 413).
func IsBodyTooLarge(err error) bool { return hasCode(err, wire.CodeBodyTooLarge) }

// IsInsufficientSpace reports whether the server's total memory limit refused the filter or its
// growth (code 4, HTTP 507).
func IsInsufficientSpace(err error) bool { return hasCode(err, wire.CodeInsufficientSpace) }

// Ping checks that the server is alive.
func (c *Client) Ping(ctx context.Context) error {
	var answer []byte
	if _, err := c.do(ctx, http.MethodGet, wire.PingPath, nil, &answer); err != nil {
		return err
	}
	if string(answer) != "pong" {
		return fmt.Errorf("ping answered %q, want \"pong\"", abbreviate(answer))
	}
	return nil
}

// Create creates the filter name. If a filter of that name exists and opts.Overwrite is false,
// it answers the existing filter and created=false; otherwise the new one and created=true.
func (c *Client) Create(ctx context.Context, name string, opts CreateOptions) (f wire.Filter, created bool, err error) {
	status, err := c.do(ctx, http.MethodPut, wire.FilterPath(name), opts, &f)
	if err != nil {
		return wire.Filter{}, false, err
	}
	return f, status == http.StatusCreated, nil
}

// Get describes the filter name; an absent or expired filter is an error for which IsNotFound
// is true.
func (c *Client) Get(ctx context.Context, name string) (wire.Filter, error) {
	if name == "list" {
		// GET .../list is the listing of names, not a filter; no filter can have that name.
		return wire.Filter{}, errors.New(`"list" is not a valid filter name`)
	}
	var f wire.Filter
	if _, err := c.do(ctx, http.MethodGet, wire.FilterPath(name), nil, &f); err != nil {
		return wire.Filter{}, err
	}
	return f, nil
}

// List answers the names of the live filters, sorted.
func (c *Client) List(ctx context.Context) ([]string, error) {
	var names []string
	if _, err := c.do(ctx, http.MethodGet, wire.ListPath, nil, &names); err != nil {
		return nil, err
	}
	return names, nil
}

// ListDetails answers the live filters' definitions, sorted by name, and how many of each one's
// partitions the pod holds.
func (c *Client) ListDetails(ctx context.Context) ([]wire.ListedFilter, error) {
	var listed []wire.ListedFilter
	if _, err := c.do(ctx, http.MethodGet, wire.ListPath+"?"+wire.DetailsParam+"=true", nil, &listed); err != nil {
		return nil, err
	}
	return listed, nil
}

// Delete removes the filter name; deleting an absent filter succeeds.
func (c *Client) Delete(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, wire.FilterPath(name), nil, nil)
	return err
}

// DeleteOwned deletes the filter only if owner made it (its create named that owner), here and,
// by replication, on the pod's peers: a filter this pod lacks is an error IsNotFound tells, one of
// another owner an error IsOtherOwner tells.
func (c *Client) DeleteOwned(ctx context.Context, name, owner string) error {
	_, err := c.do(ctx, http.MethodDelete, wire.FilterPath(name)+"?"+wire.OwnerParam+"="+url.QueryEscape(owner), nil, nil)
	return err
}

// SetExpiration makes the filter expire at, whatever its options said, and answers it.
func (c *Client) SetExpiration(ctx context.Context, name string, at time.Time) (wire.Filter, error) {
	var f wire.Filter
	req := wire.ExpirationRequest{Expiration: at.UTC().Format(time.RFC3339Nano)}
	if _, err := c.do(ctx, http.MethodPut, wire.FilterOpPath(name, wire.OpExpiration), req, &f); err != nil {
		return wire.Filter{}, err
	}
	return f, nil
}

// RemoveExpiration makes the filter never expire, and answers it.
func (c *Client) RemoveExpiration(ctx context.Context, name string) (wire.Filter, error) {
	var f wire.Filter
	if _, err := c.do(ctx, http.MethodDelete, wire.FilterOpPath(name, wire.OpExpiration), nil, &f); err != nil {
		return wire.Filter{}, err
	}
	return f, nil
}

type valueBody struct {
	Value string `json:"value"`
}

type valuesBody struct {
	Values []string `json:"values"`
}

// Check reports whether value may have been added to the filter.
func (c *Client) Check(ctx context.Context, name, value string) (bool, error) {
	var present bool
	_, err := c.do(ctx, http.MethodPost, wire.FilterOpPath(name, wire.OpCheck), valueBody{value}, &present)
	return present, err
}

// MultiCheck answers Check for every value, in order.
func (c *Client) MultiCheck(ctx context.Context, name string, values []string) ([]bool, error) {
	return c.batch(ctx, wire.FilterOpPath(name, wire.OpMultiCheck), values)
}

// CheckAndSet adds value and reports whether it may have been present before: false means it
// was new.
func (c *Client) CheckAndSet(ctx context.Context, name, value string) (bool, error) {
	var present bool
	_, err := c.do(ctx, http.MethodPost, wire.FilterOpPath(name, wire.OpCheckAndSet), valueBody{value}, &present)
	return present, err
}

// MultiCheckAndSet answers CheckAndSet for every value, in order; a value repeated later in
// values answers true.
func (c *Client) MultiCheckAndSet(ctx context.Context, name string, values []string) ([]bool, error) {
	return c.batch(ctx, wire.FilterOpPath(name, wire.OpMultiCheckAndSet), values)
}

// Set adds value without answering whether it was present.
func (c *Client) Set(ctx context.Context, name, value string) error {
	_, err := c.do(ctx, http.MethodPost, wire.FilterOpPath(name, wire.OpSet), valueBody{value}, nil)
	return err
}

// MultiSet adds every value without answering.
func (c *Client) MultiSet(ctx context.Context, name string, values []string) error {
	_, err := c.do(ctx, http.MethodPost, wire.FilterOpPath(name, wire.OpMultiSet), c.valuesBody(values), nil)
	return err
}

// valuesBody is the body of a multi- request of values. A pod's may be RESP's bytes, which its
// peers take as base64.
func (c *Client) valuesBody(values []string) any {
	if c.forwarded {
		return wire.PeerValuesBody(nonNil(values))
	}
	return valuesBody{nonNil(values)}
}

func (c *Client) batch(ctx context.Context, path string, values []string) ([]bool, error) {
	var answers []bool
	if _, err := c.do(ctx, http.MethodPost, path, c.valuesBody(values), &answers); err != nil {
		return nil, err
	}
	if len(answers) != len(values) {
		return nil, fmt.Errorf("%s answered %d booleans for %d values", path, len(answers), len(values))
	}
	return answers, nil
}

// nonNil sends an empty batch as [] rather than null, which the server reads as a missing field.
func nonNil(values []string) []string {
	if values == nil {
		return []string{}
	}
	return values
}

// maxErrorBody bounds how much of an error answer is read: error bodies are short, and a
// misbehaving proxy should not make the client buffer megabytes of HTML.
const maxErrorBody = 64 << 10

// do sends in (JSON-encoded, unless nil) and decodes a 2xx answer into out: JSON for most
// types, the raw body for *[]byte, nothing for nil. It answers the HTTP status.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	if in == nil {
		return c.roundTrip(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return 0, fmt.Errorf("encoding the %s %s request: %w", method, path, err)
	}
	return c.roundTrip(ctx, method, path, "application/json", b, out)
}

// roundTrip is do with the body already encoded.
func (c *Client) roundTrip(ctx context.Context, method, path, contentType string, body []byte, out any) (int, error) {
	resp, err := c.send(ctx, method, path, contentType, body)
	if err != nil {
		return 0, err
	}
	defer func() { _ = discard(resp.Body) }()

	if !success(resp.StatusCode) {
		return resp.StatusCode, decodeError(resp)
	}
	switch out := out.(type) {
	case nil:
	case *[]byte:
		if *out, err = readAnswer(resp.Body); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	default:
		// A longer answer is cut, and fails to decode.
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// send sends body (nil for none) of contentType, and answers the response whatever its status. The
// caller closes its body with discard.
func (c *Client) send(ctx context.Context, method, path, contentType string, body []byte) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, path, contentType, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// newRequest is the request to path with the client's query, marks and token.
func (c *Client) newRequest(ctx context.Context, method, path, contentType string, body []byte) (*http.Request, error) {
	query := ""
	if c.query != "" && strings.HasPrefix(path, wire.FiltersPath+"/") {
		query = c.query
		if strings.Contains(path, "?") {
			query = "&" + query[1:]
		}
	}
	if c.internal && strings.HasPrefix(path, wire.BasePath+"/") {
		path = wire.InternalPath(path)
	}
	target := c.base + path + query
	var reqBody io.Reader
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reqBody)
	if err != nil {
		return nil, fmt.Errorf("building the %s %s request: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.forwarded {
		req.Header.Set(wire.ForwardedHeader, "1")
	}
	if c.internal {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// Upgrade switches a connection to the pod to protocol with a GET of path (such as
// wire.ApplyStreamPath), and answers the connection, the caller's to use and close: what it writes
// goes to the pod and what it reads comes from it. Any answer but 101 Switching Protocols to that
// protocol is an error, an *Error when the pod answered (whatever the status). ctx bounds the
// upgrade only.
func (c *Client) Upgrade(ctx context.Context, path, protocol string) (io.ReadWriteCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer func() { _ = discard(resp.Body) }()
		if success(resp.StatusCode) {
			return nil, &Error{Status: resp.StatusCode, Message: "not an upgrade to " + protocol}
		}
		return nil, decodeError(resp)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || !strings.EqualFold(resp.Header.Get("Upgrade"), protocol) {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: switched to %q, not to %s", path, resp.Header.Get("Upgrade"), protocol)
	}
	return conn, nil
}

// maxAnswer bounds an answer read into memory: the largest, booleans for the values of one
// request body, is far smaller; a pod that sends more is not to be believed.
const maxAnswer = 64 << 20

// readAnswer reads a whole answer of at most maxAnswer bytes.
func readAnswer(body io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the answer: %w", err)
	case len(raw) > maxAnswer:
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxAnswer)
	}
	return raw, nil
}

func success(status int) bool { return status >= 200 && status <= 299 }

// discard closes an answer's body. Reading it to EOF first lets the transport put the connection
// back in its pool; the limit keeps a huge unexpected answer from being read only to be thrown
// away.
func discard(body io.ReadCloser) error {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxErrorBody))
	return body.Close()
}

func decodeError(resp *http.Response) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return &Error{Status: resp.StatusCode, Message: fmt.Sprintf("%s (reading the body: %v)", http.StatusText(resp.StatusCode), err)}
	}
	return errorOf(resp.StatusCode, raw)
}

// errorOf is the *Error of a non-2xx answer whose body is raw.
func errorOf(status int, raw []byte) *Error {
	e := &Error{Status: status}
	var body wire.ErrorBody
	switch {
	case json.Unmarshal(raw, &body) == nil && body.Code != 0:
		e.Code, e.Message = body.Code, body.Error
	case len(bytes.TrimSpace(raw)) > 0:
		e.Message = abbreviate(bytes.TrimSpace(raw))
	default:
		e.Message = http.StatusText(status)
	}
	return e
}

func abbreviate(b []byte) string {
	const limit = 200
	if len(b) <= limit {
		return string(b)
	}
	return strings.ToValidUTF8(string(b[:limit]), "") + "…"
}

// Membership answers the pod's current membership (epoch 0 and no members if it was never told).
func (c *Client) Membership(ctx context.Context) (wire.Membership, error) {
	var m wire.Membership
	_, err := c.do(ctx, http.MethodGet, wire.MembershipPath, nil, &m)
	return m, err
}

// PlacementStatus answers the pod's part in its membership's placement: what it owns and holds,
// and whether it pulled what a move under way gave it.
func (c *Client) PlacementStatus(ctx context.Context) (wire.PlacementStatus, error) {
	var st wire.PlacementStatus
	_, err := c.do(ctx, http.MethodGet, wire.PlacementStatusPath, nil, &st)
	return st, err
}

// SetMembership tells the pod its membership. A membership older than the pod's (lower epoch) is
// refused with an error for which IsStaleEpoch is true.
func (c *Client) SetMembership(ctx context.Context, m wire.Membership) error {
	_, err := c.do(ctx, http.MethodPut, wire.MembershipPath, m, nil)
	return err
}

// IsStaleEpoch reports whether the pod refused a membership older than its own (code 8, HTTP 409).
func IsStaleEpoch(err error) bool { return hasCode(err, wire.CodeStaleEpoch) }

// IsReplicationFailed reports whether a write was applied but not acknowledged by as many pods as
// its consistency asks (code 9, HTTP 503).
func IsReplicationFailed(err error) bool { return hasCode(err, wire.CodeReplication) }

// IsHomeUnavailable reports whether a check-and-set or create was not served because its filter's
// home did not serve it (code 13, HTTP 503): retry it later.
func IsHomeUnavailable(err error) bool { return hasCode(err, wire.CodeHomeUnavailable) }

// IsLeaseLapsed reports whether a check-and-set was not answered because its home's lease had
// lapsed when it applied it (code 14, HTTP 503): retry it later.
func IsLeaseLapsed(err error) bool { return hasCode(err, wire.CodeLeaseLapsed) }
