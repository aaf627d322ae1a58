// Package wire is the contract of the data plane's HTTP API, public and internal: paths, headers,
// request and answer bodies, and error codes. The server, the Go client, the pods calling each
// other and the operator all speak it, so they cannot drift apart. It depends on nothing else of
// Bloomery's, so that any of them may import it.
package wire

// Error codes carried in ErrorBody.Code. 1 and 2 are filter-service's; the rest are ours.
const (
	CodeBadParameter      = 1  // HTTP 400: a request field is missing, of the wrong type or out of range
	CodeFilterNotFound    = 2  // HTTP 404: no such filter, or it expired
	CodeBodyTooLarge      = 3  // HTTP 413: the body exceeds maxHttpRequestLength, or its values maxRequestBytesInFlight once decoded
	CodeInsufficientSpace = 4  // HTTP 507: the total memory limit would be exceeded
	CodeNoSuchRoute       = 5  // HTTP 404/405: no endpoint at that path or method
	CodeInternal          = 6  // HTTP 500: a bug; the message says what failed
	CodeUnavailable       = 7  // HTTP 503: recovering the filters at start, shutting down, or timed out
	CodeUnauthorized      = 10 // HTTP 401: a request to the internal port without the cluster's bearer token
	CodeFilterExists      = 11 // HTTP 409: a create with failIfExists found the filter
	CodeNotJournaled      = 12 // HTTP 507: the update log cannot be written (the data directory's volume is full or failing)
	CodeOtherOwner        = 15 // HTTP 409: a delete that names an owner found the filter made by another, and left it
)

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  int    `json:"code"`
}

// Filter is the JSON description of a filter answered by create and GET. The first fields are
// filter-service's; the rest are ours.
type Filter struct {
	Name               string  `json:"name"`
	ExpectedInsertions uint64  `json:"expectedInsertions"`
	FPP                float64 `json:"fpp"`
	Created            string  `json:"created"`
	// Expiration is absent for a filter that never expires.
	Expiration string `json:"expiration,omitempty"`
	// ValidPeriodAfterAccess is in seconds; absent unless the filter has sliding expiry.
	ValidPeriodAfterAccess int64 `json:"validPeriodAfterAccess,omitempty"`

	// LastSnapshot is when the serving process last completed a snapshot (absent before its
	// first, and when persistence is off); the operator reports it on the BloomFilter.
	LastSnapshot string `json:"lastSnapshot,omitempty"`

	// Partitions is how many partitions the filter's values are split into by a hash of the
	// value, each a scalable filter of ⌈expectedInsertions/partitions⌉ at the filter's fpp; 1 for
	// a filter that is not split. Fixed at creation.
	Partitions int `json:"partitions"`

	Scalable   bool    `json:"scalable"`
	Growth     uint    `json:"growth,omitempty"`
	Tightening float64 `json:"tightening,omitempty"`
	// Layout is how values are hashed and layers sized: "bitsandblooms" (the default of a
	// create) or "redisbloom" (RedisBloom's, which filters created over RESP have). Fixed at
	// creation.
	Layout string `json:"layout"`
	// Owner is the UUID its create named as the filter's maker (the operator names the
	// BloomFilter's UID); absent when it named none. Fixed at creation.
	Owner        string  `json:"owner,omitempty"`
	Items        uint64  `json:"items"`
	Bits         uint64  `json:"bits"`
	Hashes       uint    `json:"hashes"`
	Layers       int     `json:"layers"`
	SizeBytes    uint64  `json:"sizeBytes"`
	FillRatio    float64 `json:"fillRatio"`
	EstimatedFPP float64 `json:"estimatedFpp"`

	// IgnoredParameters, on the answer to a create that found the filter, are the fields of the
	// request that differ from the filter's own, which it keeps.
	IgnoredParameters []string `json:"ignoredParameters,omitempty"`
}

// ListedFilter is a filter as ListPath?details=true lists it: its definition, which every pod
// knows, and how many of its partitions the pod that answers holds. Its items and bits are
// FilterPath's to answer, summed over the pods that hold its partitions.
type ListedFilter struct {
	Name               string  `json:"name"`
	ExpectedInsertions uint64  `json:"expectedInsertions"`
	FPP                float64 `json:"fpp"`
	Scalable           bool    `json:"scalable"`
	Partitions         int     `json:"partitions"`
	PartitionsHeld     int     `json:"partitionsHeld"`
	Created            string  `json:"created"`
	Expiration         string  `json:"expiration,omitempty"`
}

// TimeFormat is how created and expiration are written: UTC, RFC 3339 with milliseconds, as
// filter-service writes them.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// ExpirationRequest is the body of PUT FilterOpPath(name, OpExpiration): the deadline, in
// TimeFormat or any RFC 3339 time, from which the filter is expired whatever its create options
// say.
type ExpirationRequest struct {
	Expiration string `json:"expiration"`
}
