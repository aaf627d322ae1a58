//go:build e2e

package e2e

import (
	"net/http"
	"testing"
	"time"
)

// rotatingFilter expires ten seconds after its creation; the operator then creates it anew, empty.
const rotatingFilter = `
apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: sessions
spec:
  clusterRef:
    name: example
  capacity: 10000
  falsePositiveRate: "0.01"
  expiry:
    afterCreate: 10s
`

// TestExpiringFilterRotates applies a BloomFilter with expiry.afterCreate: 10s: every pod holds
// the same incarnation, with the same expiration; after it expires, the operator recreates it
// empty on every pod, and status.lastRecreationTime and an event say so.
func TestExpiringFilterRotates(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	n.apply(rotatingFilter)
	n.wait("condition=Ready", "bloomfilter/sessions")
	apis := n.apis(podNames(sampleReplicas)...)
	status, first := apis[0].filter("sessions")
	if status != http.StatusOK {
		t.Fatalf("GET sessions on pod %s: %d %v", apis[0].pod, status, first)
	}
	created, expiration := parseTime(t, first["created"]), parseTime(t, first["expiration"])
	if d := expiration.Sub(created); d != 10*time.Second {
		t.Errorf("the filter on pod %s expires %v after its creation, want 10s (%v)", apis[0].pod, d, first)
	}
	for _, api := range apis[1:] {
		status, f := api.filter("sessions")
		if status != http.StatusOK || f["created"] != first["created"] || f["expiration"] != first["expiration"] {
			t.Errorf("GET sessions on pod %s: %d %v; want the incarnation of pod %s (%v)", api.pod, status, f, apis[0].pod, first)
		}
	}
	if apis[0].checkAndSet("sessions", "alice") {
		t.Fatal("check-and-set of a new value answered true")
	}

	n.wait("jsonpath={.status.lastRecreationTime}", "bloomfilter/sessions")
	recreatedAt := parseTime(t, n.jsonpath("bloomfilter/sessions", "{.status.lastRecreationTime}"))
	if recreatedAt.Before(expiration.Truncate(time.Second)) {
		t.Errorf("status.lastRecreationTime %v is before the filter expired (%v)", recreatedAt, expiration)
	}
	n.wait("condition=Ready", "bloomfilter/sessions")
	for _, api := range apis {
		status, second := api.filter("sessions")
		if status != http.StatusOK {
			t.Errorf("GET sessions on pod %s after the rotation: %d %v", api.pod, status, second)
			continue
		}
		if !parseTime(t, second["created"]).After(created) {
			t.Errorf("the filter on pod %s was created %v, not after the first one (%v)", api.pod, second["created"], created)
		}
		if api.multiCheck("sessions", []string{"alice"})[0] {
			t.Errorf("the rotated filter on pod %s still holds a value of the expired one", api.pod)
		}
	}
	if events := n.run("get", "events", "--field-selector", "reason=Recreated,involvedObject.name=sessions", "-o", "name"); events == "" {
		t.Error("no Recreated event for the BloomFilter")
	}
}

// parseTime parses an RFC 3339 time of a status or of the data plane's filter JSON.
func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return at
}
