package controllers

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/config"
)

// checkLimits refuses a spec whose limits cannot fit the memory or the volume: the cluster is
// Degraded (LimitsDoNotFit) with a Warning event, and its ConfigMap and StatefulSet are neither
// made nor changed until the spec fits, so running pods keep the last spec that did and no pod
// starts with one that would be killed or fill its volume. The rest of the pass goes on: the
// Services, policies and the membership do not depend on the limits. A container without a memory
// limit is not refused but warned about, in the Degraded condition's message and a Warning event
// (NoMemoryLimit): nothing in the spec is wrong, the node's memory is simply the bound.
func (r *BloomClusterReconciler) checkLimits(_ context.Context, st *clusterState) (ctrl.Result, error) {
	c := st.cluster
	limits := limitsOf(c)
	if problems := limits.misfits(); len(problems) > 0 {
		msg := "The limits cannot fit: " + strings.Join(problems, "; ") +
			". The ConfigMap and the StatefulSet are left as they are until they fit"
		st.limitsRefused = true
		st.notApplied = append(st.notApplied, degradation{ReasonLimitsDoNotFit, msg})
		r.event(c, nil, corev1.EventTypeWarning, ReasonLimitsDoNotFit, "CheckLimits", "%s", msg)
	}
	if limits.memory == 0 {
		msg := noMemoryLimitMessage(c)
		st.warnings = append(st.warnings, degradation{ReasonNoMemoryLimit, msg})
		r.event(c, nil, corev1.EventTypeWarning, ReasonNoMemoryLimit, "CheckLimits", "%s", msg)
	}
	return ctrl.Result{}, nil
}

// noMemoryLimitMessage says what a cluster without a memory limit risks.
func noMemoryLimitMessage(c *bloomeryv1alpha1.BloomCluster) string {
	bound := fmt.Sprintf("the filters get %.0f%% of the node's memory", config.MemoryShare*100)
	if c.Spec.Limits.MaxTotalBytes != nil {
		bound = "the filters may hold maxTotalBytes whatever the node has left"
	}
	return "The data-plane container has no memory limit (spec.resources.limits.memory): " + bound +
		", and a pod may be OOM-killed with the node's other processes when the node runs short; set a memory limit"
}

// A pod's memory holds the filters' bits, one more copy of a filter while recovery restores it or
// a snapshot, a dump or a catch-up copies it, and the Go runtime. The filters' default share
// (config.MemoryShare, 40%) leaves room for a copy of a filter as large as all of them together,
// and a fifth of the memory for the runtime: the limits fit when the filters and one copy of the
// largest filter take no more than twice that share.
const filtersAndCopyShare = 2 * config.MemoryShare

// goMemLimitShare is the part of the memory limit that GOMEMLIMIT starts from, before the
// filters' maxTotalBytes is taken off it. The bit arrays live outside the Go heap (dataplane/filter), where GOMEMLIMIT does not count them: a
// GOMEMLIMIT near the container's limit would let the heap grow into the filters' memory before
// the collector hurried, and the kernel would kill the pod first. So the soft limit is 90% of the
// memory limit minus maxTotalBytes, and the 10% left keeps the collector working before the hard
// limit is reached.
const goMemLimitShare = 0.9

// filterLimits are a cluster's memory and volume figures in bytes, as each pod gets them.
type filterLimits struct {
	memory int64 // the container's memory limit; 0 when it has none
	// total is maxTotalBytes: the spec's, or config.MemoryShare of memory when the spec leaves it
	// out (derived); 0 means unlimited.
	total   int64
	derived bool
	filter  int64 // maxFilterBytes; 0 means unlimited within total
	volume  int64 // spec.storage.size
}

// limitsOf reads the figures from the spec, and derives maxTotalBytes from the memory limit when
// the spec leaves it out. maxFilterBytes is never derived: within the total one filter may take
// it all, which the headroom allows for, and a derived per-filter limit would refuse a large
// filter that fits.
func limitsOf(c *bloomeryv1alpha1.BloomCluster) filterLimits {
	var l filterLimits
	if mem, ok := c.Spec.Resources.Limits[corev1.ResourceMemory]; ok && mem.Sign() > 0 {
		l.memory = mem.Value()
	}
	switch q := c.Spec.Limits.MaxTotalBytes; {
	case q != nil:
		l.total = max(q.Value(), 0)
	case l.memory > 0:
		l.total, l.derived = int64(config.FiltersShare(uint64(l.memory))), true
	}
	if q := c.Spec.Limits.MaxFilterBytes; q != nil {
		l.filter = max(q.Value(), 0)
	}
	size := buildVolumeClaimTemplate(c).Spec.Resources.Requests[corev1.ResourceStorage]
	l.volume = size.Value()
	return l
}

// goMemLimit is the GOMEMLIMIT of the data-plane container, and false without a memory limit.
func (l filterLimits) goMemLimit() (int64, bool) {
	if l.memory == 0 {
		return 0, false
	}
	return max(int64(float64(l.memory)*goMemLimitShare)-l.total, 0), true
}

// largestCopy is the most one more copy of a filter takes: maxFilterBytes, or the whole total
// without it.
func (l filterLimits) largestCopy() int64 {
	if l.filter > 0 && l.filter < l.total {
		return l.filter
	}
	return l.total
}

// volumeNeeded is the room the data directory needs with full filters: the snapshot, the next one
// written beside it before it replaces it, and the log, which the data plane snapshots at
// snapshotLogBytes (the operator leaves the data plane's default).
func (l filterLimits) volumeNeeded() int64 {
	return 2*l.total + snapshotLogBytes()
}

// snapshotLogBytes is the data plane's default, which the operator leaves as it is.
func snapshotLogBytes() int64 { return int64(config.Default().SnapshotLogBytes) }

// misfits says, one sentence each, why the limits cannot fit the memory or the volume; nil when
// they fit. Unlimited filters (maxTotalBytes 0, or no memory limit to derive it from) are not
// checked: nothing bounds them.
func (l filterLimits) misfits() []string {
	if l.total == 0 {
		return nil
	}
	var problems []string
	if l.filter > l.total {
		problems = append(problems, fmt.Sprintf("maxFilterBytes %s is more than maxTotalBytes %s",
			formatBytes(l.filter), l.totalText()))
	}
	if fits := int64(float64(l.memory) * filtersAndCopyShare); l.memory > 0 && l.total+l.largestCopy() > fits {
		problems = append(problems, fmt.Sprintf("maxTotalBytes %s plus one copy of a filter (%s, maxFilterBytes or else maxTotalBytes) "+
			"is %s, more than the %.0f%% of the memory limit %s (%s) that leaves the data plane its headroom",
			l.totalText(), formatBytes(l.largestCopy()), formatBytes(l.total+l.largestCopy()),
			filtersAndCopyShare*100, formatBytes(l.memory), formatBytes(fits)))
	}
	if need := l.volumeNeeded(); l.volume < need {
		problems = append(problems, fmt.Sprintf("spec.storage.size %s is less than the %s the data directory needs: "+
			"two snapshots of maxTotalBytes %s (the last one and the next, written beside it) and the log of up to %s",
			formatBytes(l.volume), formatBytes(need), l.totalText(), formatBytes(snapshotLogBytes())))
	}
	return problems
}

// totalText is maxTotalBytes, saying where a derived one comes from.
func (l filterLimits) totalText() string {
	if l.derived {
		return fmt.Sprintf("%s (%.0f%% of the memory limit, as spec.limits leaves it out)", formatBytes(l.total), config.MemoryShare*100)
	}
	return formatBytes(l.total)
}

// formatBytes writes n bytes in a quantity's binary units: exactly when it is a whole number of
// the largest unit it reaches (512Mi), else to a tenth of it (819.2Mi).
func formatBytes(n int64) string {
	units := []string{"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"}
	for i, suffix := range units {
		unit := math.Pow(1024, float64(len(units)-i))
		if v := float64(n) / unit; v >= 1 {
			if n%int64(unit) == 0 {
				return resource.NewQuantity(n, resource.BinarySI).String()
			}
			return strconv.FormatFloat(v, 'f', 1, 64) + suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
