package wire

import (
	"net/url"
	"strings"
)

// BasePath prefixes every public endpoint (filter-service compatible).
const BasePath = "/v1"

// Public paths beside the filters'.
const (
	PingPath    = BasePath + "/ping"
	DocsPath    = BasePath + "/docs"
	OpenAPIPath = DocsPath + "/openapi.json"
)

// Paths of the probes and of the metrics, outside BasePath: the kubelet and Prometheus call
// them, as the operator configures.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"
)

// FiltersPath prefixes the paths of the filters; ListPath lists their names, or with
// DetailsParam=true their definitions (ListedFilter).
const (
	FiltersPath  = BasePath + "/bloomfilter"
	ListPath     = FiltersPath + "/list"
	DetailsParam = "details"
)

// FilterOp is an operation on one filter: the last segment of its path.
type FilterOp string

// The operations on a filter.
const (
	OpCheck            FilterOp = "check"
	OpMultiCheck       FilterOp = "multi-check"
	OpCheckAndSet      FilterOp = "check-and-set"
	OpMultiCheckAndSet FilterOp = "multi-check-and-set"
	OpSet              FilterOp = "set"
	OpMultiSet         FilterOp = "multi-set"
	// OpDump answers the filter's state in the snapshot's record format; OpMerge ORs one in.
	OpDump  FilterOp = "dump"
	OpMerge FilterOp = "merge"
	// OpExpiration changes the filter's expiry: PUT an ExpirationRequest sets a deadline,
	// DELETE makes the filter never expire (Redis's EXPIRE and PERSIST).
	OpExpiration FilterOp = "expiration"
)

// PartitionsParam lists, comma-separated, the partitions a dump holds; absent, every one the pod
// holds; empty, none.
const PartitionsParam = "partitions"

// FilterPath is the path of the filter name: create (PUT), describe (GET) and delete (DELETE).
func FilterPath(name string) string { return FiltersPath + "/" + url.PathEscape(name) }

// FilterOpPath is the path of an operation on the filter name.
func FilterOpPath(name string, op FilterOp) string { return FilterPath(name) + "/" + string(op) }

// OwnerParam names, on a DELETE of FilterPath, the owner the filter must have for the delete to
// take it (its create's owner, a UUID).
const OwnerParam = "owner"

// NameParam is the parameter of the route templates that holds a filter's name, still
// percent-encoded.
const NameParam = "name"

// FilterRoute is the route template of FilterPath, in the :param syntax of routers such as echo.
const FilterRoute = FiltersPath + "/:" + NameParam

// FilterOpRoute is the route template of FilterOpPath.
func FilterOpRoute(op FilterOp) string { return FilterRoute + "/" + string(op) }

// InternalBasePath prefixes the endpoints only the operator and peer pods call. They are served on
// the internal port alone, to callers with the cluster's bearer token.
const InternalBasePath = "/internal/v1"

// InternalPath is where the internal port serves the public endpoint at path (a path under
// BasePath): /v1/bloomfilter/users/check is /internal/v1/bloomfilter/users/check there. Peers
// forward requests and pull dumps, and the operator creates filters, through these.
func InternalPath(path string) string {
	return InternalBasePath + strings.TrimPrefix(path, BasePath)
}

// The internal endpoints.
const (
	// MembershipPath is where the operator tells a pod who its peers are (PUT) and reads what
	// the pod believes (GET).
	MembershipPath = InternalBasePath + "/membership"
	// ApplyPath takes a batch of a peer's writes (POST ApplyRequest, answered ApplyResponse).
	ApplyPath = InternalBasePath + "/apply"
	// ApplyStreamPath takes a peer's batches on one connection: a GET with the Upgrade header
	// ApplyStreamProtocol, answered 101 Switching Protocols, then frames (package peer).
	ApplyStreamPath = ApplyPath + "/stream"
	// RoomPath asks whether the pod can hold the filters of a batch of creates (POST, in the
	// binary form of OpsContentType); 200 when it can, else the error it would answer the create.
	RoomPath = InternalBasePath + "/room"
	// InventoryPath answers what the pod holds (GET, answered Inventory).
	InventoryPath = InternalBasePath + "/inventory"
)

// ForwardedHeader marks a request one pod sent another, on a client's behalf or its own: the
// receiver serves it locally and does not forward it again. Only the internal port honours it.
const ForwardedHeader = "X-Bloomery-Forwarded"

// OpsContentType is the media type of a batch of writes in the replication package's binary
// form, the body peers send to ApplyPath.
const OpsContentType = "application/x-bloomery-ops"

// ApplyStreamProtocol is the Upgrade token of ApplyStreamPath; its last digit is the version of
// the framing.
const ApplyStreamProtocol = "bloomery-batches/1"
