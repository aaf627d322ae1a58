package controllers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// A shape that asks for a number of partitions matches only a filter split into that many; one
// that leaves the number to the data plane matches any. A pod that reports none (0, from before
// partitions) holds one.
func TestFilterShapeMatchesPartitions(t *testing.T) {
	t.Parallel()
	filter := func(partitions int) wire.FilterStatus {
		return wire.FilterStatus{ExpectedInsertions: 1000, FPP: 0.01, Scalable: true, Growth: 2, Partitions: partitions}
	}
	shape := func(partitions int) FilterShape {
		return FilterShape{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Partitions: partitions}
	}
	tests := []struct {
		shape, pod int
		want       bool
	}{
		{0, 0, true}, {0, 1, true}, {0, 8, true}, // the data plane chooses
		{1, 0, true}, {1, 1, true}, {1, 2, false},
		{4, 4, true}, {4, 0, false}, {4, 1, false}, {4, 8, false},
	}
	for _, tt := range tests {
		if got := shape(tt.shape).Matches(filter(tt.pod)); got != tt.want {
			t.Errorf("shape of %d partitions on a pod reporting %d: Matches = %v, want %v", tt.shape, tt.pod, got, tt.want)
		}
	}
	// Partitions do not make another difference of shape match.
	other := filter(4)
	other.ExpectedInsertions = 2000
	if shape(4).Matches(other) {
		t.Error("a filter of another capacity matches because its partitions do")
	}
}

// CreateFilter asks for the shape's partitions, and leaves them to the data plane when the shape
// has none; it names the owner in every create.
func TestCreateFilterSendsPartitionsAndOwner(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("create body %q: %v", raw, err)
		}
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wire.Filter{Name: "f", Partitions: 4})
	}))
	pod := podServedBy(t, srv)
	dp := NewHTTPDataPlane(5 * time.Second)
	base := FilterShape{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2}
	for _, partitions := range []int{4, 0} {
		shape := base
		shape.Partitions = partitions
		f, created, err := dp.CreateFilter(t.Context(), pod, "f", testOwner, shape)
		if err != nil || !created || f.Partitions != 4 {
			t.Fatalf("CreateFilter with %d partitions: %+v, %v, %v", partitions, f, created, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("%d creates reached the pod, want 2", len(bodies))
	}
	if got, ok := bodies[0]["partitions"]; !ok || got != float64(4) {
		t.Errorf("create with 4 partitions sent partitions %v (present %v), want 4", got, ok)
	}
	if got, ok := bodies[1]["partitions"]; ok {
		t.Errorf("create leaving partitions to the data plane sent partitions %v, want none", got)
	}
	for i, body := range bodies {
		if got := body["owner"]; got != string(testOwner) {
			t.Errorf("create %d sent owner %v, want %s", i, got, testOwner)
		}
	}
}

// A data plane from before owners refuses the field: the filter is made there without one.
func TestCreateFilterOnAPodFromBeforeOwners(t *testing.T) {
	t.Parallel()
	var creates atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		creates.Add(1)
		raw, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(raw), `"owner"`) { // what such a data plane answers
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Error: `unknown parameter: "owner"`, Code: wire.CodeBadParameter})
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wire.Filter{Name: "f", ExpectedInsertions: 1000, Partitions: 1})
	}))
	f, created, err := NewHTTPDataPlane(5*time.Second).CreateFilter(t.Context(), podServedBy(t, srv), "f", testOwner, FilterShape{Capacity: 1000, FPP: 0.01})
	if err != nil || !created || f.ExpectedInsertions != 1000 || f.Owner != "" {
		t.Fatalf("CreateFilter: %+v, %v, %v; want the filter created without an owner", f, created, err)
	}
	if n := creates.Load(); n != 2 {
		t.Errorf("%d creates reached the pod, want 2: one with the owner, one without", n)
	}
}

// podServedBy is the pod c-0 as srv serves it; srv closes with the test.
func podServedBy(t *testing.T, srv *httptest.Server) Pod {
	t.Helper()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return Pod{Name: "c-0", IP: u.Hostname(), Port: port, Token: worldToken}
}

// testOwner is the UID of the BloomFilter the creates above are made for.
const testOwner types.UID = "37e7e58f-edbd-4441-9d81-b2b3bc8ae93c"
