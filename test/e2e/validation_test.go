//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// bloomFilter is a BloomFilter manifest named name whose spec is the sample's plus extra, a YAML
// fragment indented under spec.
func bloomFilter(name, capacity, fpr, extra string) string {
	return fmt.Sprintf(`
apiVersion: bloomery.io/v1alpha1
kind: BloomFilter
metadata:
  name: %s
spec:
  clusterRef:
    name: example
  capacity: %s
  falsePositiveRate: %q
%s`, name, capacity, fpr, extra)
}

// TestInvalidManifestsAreRefused applies manifests the API refuses: kubectl apply fails with the
// message of the schema's rule, and nothing is created.
func TestInvalidManifestsAreRefused(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	for _, tc := range []struct {
		name, manifest, object, message string
	}{{
		name:     "both expiries",
		manifest: bloomFilter("both", "1000", "0.01", "  expiry:\n    afterCreate: 1h\n    afterAccess: 1h\n"),
		object:   "bloomfilter/both",
		message:  "give exactly one of afterCreate and afterAccess",
	}, {
		name:     "false positive rate of 1.5",
		manifest: bloomFilter("fpr", "1000", "1.5", ""),
		object:   "bloomfilter/fpr",
		message:  `spec.falsePositiveRate: Invalid value: "1.5": spec.falsePositiveRate in body should match`,
	}, {
		name:     "capacity 0",
		manifest: bloomFilter("empty", "0", "0.01", ""),
		object:   "bloomfilter/empty",
		message:  "spec.capacity: Invalid value: 0: spec.capacity in body should be greater than or equal to 1",
	}, {
		name:     "the data plane's reserved name",
		manifest: bloomFilter("list", "1000", "0.01", ""),
		object:   "bloomfilter/list",
		message:  "list is reserved by the data plane's API; choose another name",
	}, {
		name:     "cluster name starting with a digit",
		manifest: "apiVersion: bloomery.io/v1alpha1\nkind: BloomCluster\nmetadata:\n  name: 9lives\nspec: {}\n",
		object:   "bloomcluster/9lives",
		message:  "name must start with a lowercase letter and contain only lowercase letters, digits and '-'",
	}, {
		// The Prometheus Operator's ServiceMonitor CRD takes each unit once, largest first: an
		// interval it refuses would leave the operator unable to make the ServiceMonitor.
		name:     "scrape interval the ServiceMonitor refuses",
		manifest: "apiVersion: bloomery.io/v1alpha1\nkind: BloomCluster\nmetadata:\n  name: scraped\nspec:\n  monitoring:\n    serviceMonitor: {enabled: true, interval: 30s1m}\n",
		object:   "bloomcluster/scraped",
		message:  "spec.monitoring.serviceMonitor.interval in body should match",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := namespace{t: t, name: n.name}
			out, err := n.tryStdin(tc.manifest, "apply", "-f", "-")
			if err == nil {
				t.Fatalf("kubectl apply accepted it: %s", out)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("kubectl apply failed without the rule's message %q: %v", tc.message, err)
			}
			if _, err := n.try("get", tc.object); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Errorf("%s exists after a refused apply (%v)", tc.object, err)
			}
		})
	}

	// The shape of a filter cannot change: a filter of another shape is another filter.
	n.apply(bloomFilter("fixed", "1000", "0.01", ""))
	for _, tc := range []struct{ name, manifest, message string }{
		{"capacity", bloomFilter("fixed", "2000", "0.01", ""), "capacity is immutable"},
		{"false positive rate", bloomFilter("fixed", "1000", "0.001", ""), "falsePositiveRate is immutable"},
		{"expiry added", bloomFilter("fixed", "1000", "0.01", "  expiry:\n    afterCreate: 1h\n"), "expiry cannot be added or removed"},
	} {
		t.Run("changed "+tc.name, func(t *testing.T) {
			n := namespace{t: t, name: n.name}
			if out, err := n.tryStdin(tc.manifest, "apply", "-f", "-"); err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("kubectl apply of a changed %s: %q, %v; want refused with %q", tc.name, out, err, tc.message)
			}
		})
	}
}
