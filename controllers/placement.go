package controllers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// Each partition of each filter lives on R of a cluster's pods, its owners. Every membership the
// operator pushes names them (Owners) with R (ReplicationFactor). When they change (a pod comes
// or goes, spec.replication.factor or spec.replicas changes), the new epoch also carries the
// placement the cluster moves from (Previous), the last one whose owners hold everything: pods
// then write to the owners of both and read from the previous ones, and pull what they newly
// own. Once every member reports it holds its partitions under the epoch (PlacementStatus
// CaughtUp), the next epoch, with the same members and placement and no Previous, lets the pods
// drop what they no longer own.
//
// The placement is recorded with the epoch, in status.placement, before any pod is told: a
// restarted operator reads from it the move under way (previous) and resumes it.
//
// A scale-down drains first: the pods that leave (the highest ordinals) stay members but stop
// being owners, the StatefulSet keeps them until the move off them is complete and the final
// membership (without Previous, the leaving pods members but not owners) reached every member,
// and only then is it scaled down (reconcileStatefulSet asks st.drained).

// placementRetry is how soon a pass repeats while partitions move.
const placementRetry = 2 * time.Second

// defaultReplicationFactor is R when spec.replication.factor leaves it out (and replicas allows).
const defaultReplicationFactor = 3

// placement is a membership's owners, sorted, and its replication factor.
type placement struct {
	owners []string
	factor int32
}

func (p placement) equal(q placement) bool {
	return p.factor == q.factor && slices.Equal(p.owners, q.owners)
}

func (p placement) wire() wire.Placement {
	return wire.Placement{Owners: slices.Clone(p.owners), ReplicationFactor: int(p.factor)}
}

func (p placement) api() bloomeryv1alpha1.PartitionPlacement {
	return bloomeryv1alpha1.PartitionPlacement{Owners: slices.Clone(p.owners), ReplicationFactor: p.factor}
}

func placementOf(p bloomeryv1alpha1.PartitionPlacement) placement {
	return placement{owners: slices.Clone(p.Owners), factor: p.ReplicationFactor}
}

// recordedPlacement is the placement of status.membershipEpoch, and false when status records
// none: no epoch yet, or one recorded by an operator from before placement.
func recordedPlacement(c *bloomeryv1alpha1.BloomCluster) (placement, bool) {
	if c.Status.Placement == nil {
		return placement{}, false
	}
	return placementOf(c.Status.Placement.PartitionPlacement), true
}

// heldPlacement is the last placement whose owners hold every partition: the previous one while
// a move is under way, else the recorded one. An epoch recorded before placement had every member
// hold everything. False when no pod was ever told a membership with members.
func heldPlacement(c *bloomeryv1alpha1.BloomCluster) (placement, bool) {
	switch p := c.Status.Placement; {
	case p != nil && p.Previous != nil:
		return placementOf(*p.Previous), true
	case p != nil:
		return placementOf(p.PartitionPlacement), true
	case c.Status.MembershipEpoch > 0 && len(c.Status.Members) > 0:
		return placement{owners: memberNames(c.Status.Members), factor: int32(len(c.Status.Members))}, true
	}
	return placement{}, false
}

// previousFor is the Previous of a new epoch of placement want: the held placement, unless want
// is it (the move is complete, or was undone) or there is none.
func previousFor(c *bloomeryv1alpha1.BloomCluster, want placement) *placement {
	held, ok := heldPlacement(c)
	if !ok || held.equal(want) {
		return nil
	}
	return &held
}

// setPlacement records the placement of a new epoch of members in status, keeping what the pods
// last reported.
func setPlacement(c *bloomeryv1alpha1.BloomCluster, members []bloomeryv1alpha1.ClusterMember, current placement, previous *placement) {
	p := c.Status.Placement
	if p == nil {
		p = &bloomeryv1alpha1.ClusterPlacement{}
		c.Status.Placement = p
	}
	p.PartitionPlacement = current.api()
	p.Previous = nil
	if previous != nil {
		prev := previous.api()
		p.Previous = &prev
	}
	p.Phase = phaseOf(members, current, previous)
}

// phaseOf is Draining while a member owns nothing (it is about to leave), Moving while a move is
// under way, Stable otherwise.
func phaseOf(members []bloomeryv1alpha1.ClusterMember, current placement, previous *placement) bloomeryv1alpha1.PlacementPhase {
	for _, m := range members {
		if !slices.Contains(current.owners, m.Pod) {
			return bloomeryv1alpha1.PlacementDraining
		}
	}
	if previous != nil {
		return bloomeryv1alpha1.PlacementMoving
	}
	return bloomeryv1alpha1.PlacementStable
}

func memberNames(members []bloomeryv1alpha1.ClusterMember) []string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Pod
	}
	return names
}

// ordinalOf is the ordinal of a pod of the cluster's StatefulSet (<cluster>-<ordinal>), and false
// for another name.
func ordinalOf(cluster, pod string) (int32, bool) {
	rest, ok := strings.CutPrefix(pod, statefulSetName(cluster)+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

// leavingPod reports whether the pod is one a scale-down to spec.replicas removes. A scale to 0
// drains nothing: no pod would be left to hold the partitions, and the volumes keep them.
func leavingPod(c *bloomeryv1alpha1.BloomCluster, pod string) bool {
	target := c.DesiredReplicas()
	n, ok := ordinalOf(c.Name, pod)
	return ok && target > 0 && n >= target
}

// replicationFactor is R for a placement on owners pods: spec.replication.factor, or the smaller
// of 3 and spec.replicas (3 at 0 replicas), and between 1 and owners.
func replicationFactor(c *bloomeryv1alpha1.BloomCluster, owners int) int32 {
	if owners == 0 {
		return 0
	}
	r := min(defaultReplicationFactor, c.DesiredReplicas())
	if r == 0 { // scaled to 0: the pods that are still members keep the default
		r = defaultReplicationFactor
	}
	if c.Spec.Replication.Factor != nil {
		r = *c.Spec.Replication.Factor
	}
	return max(1, min(r, int32(owners)))
}

// placementReport is what one member answered about its placement.
type placementReport struct {
	status wire.PlacementStatus
	// err is set when the pod did not answer; it wraps ErrPlacementUnsupported for a pod that
	// holds every partition (a data plane from before placement).
	err error
}

// holdsEpoch reports whether the pod holds every partition it owns under epoch.
func (p placementReport) holdsEpoch(epoch uint64) bool {
	if errors.Is(p.err, ErrPlacementUnsupported) {
		return true
	}
	return p.err == nil && p.status.Epoch == epoch && p.status.CaughtUp
}

// readPlacement reads every member's placement status, with bounded parallelism. reports[i] is
// targets[i]'s.
func (r *BloomClusterReconciler) readPlacement(ctx context.Context, targets []memberPod) []placementReport {
	reports := make([]placementReport, len(targets))
	var g errgroup.Group
	g.SetLimit(r.podParallelism())
	for i, t := range targets {
		g.Go(func() error {
			ctx, cancel := t.callContext(ctx)
			defer cancel()
			st, err := r.dataPlane().PlacementStatus(ctx, t.addr)
			if err != nil && !errors.Is(err, ErrPlacementUnsupported) {
				log.FromContext(ctx).V(1).Info("Pod did not answer with its placement status", "pod", t.addr.Name, "error", err.Error())
			}
			reports[i] = placementReport{status: st, err: err}
			return nil
		})
	}
	_ = g.Wait()
	return reports
}

// recordReports writes what the pods reported into status.placement: the sums of the partitions
// they own and still pull, the bytes each holds, and the pairs held by fewer than R pods
// (underReplicated). Pods that did not report are left out of the sums. It returns the owners
// counted as under-replicated: catching up, or not answering.
func recordReports(c *bloomeryv1alpha1.BloomCluster, targets []memberPod, reports []placementReport) []string {
	p := c.Status.Placement
	if p == nil {
		return nil
	}
	lastOwned := p.PartitionsOwned
	p.PartitionsOwned, p.PartitionsMoving, p.BytesPerPod = 0, 0, nil
	for i, rep := range reports {
		if rep.err != nil {
			continue
		}
		p.PartitionsOwned += int64(rep.status.PartitionsOwned)
		p.PartitionsMoving += int64(rep.status.PartitionsMoving)
		p.BytesPerPod = append(p.BytesPerPod, bloomeryv1alpha1.PodBytes{
			Pod: targets[i].addr.Name, Bytes: int64(min(rep.status.Bytes, math.MaxInt64)),
		})
	}
	var pods []string
	p.PartitionsUnderReplicated, pods = underReplicated(c, targets, reports, lastOwned)
	return pods
}

// underReplicated approximates the pairs that fewer than R pods hold: the largest count the pods
// report (pairs with an owner that is not a member, which every pod counts alike), plus the pairs
// of each owner that does not hold them: one that reports it has not caught up while no move is
// under way (a restarted pod pulling from its peers; during a move the previous owners hold
// everything), and one that does not answer (an owner of the placement or of the one moved from).
// Such a pod reporting status.membershipEpoch counts what it owns; the others count the average
// of the owners that report it (one that has not been told the epoch yet would count every pair
// as its own), or, when none does, lastOwned (the last pass's sum) spread over the owners. A pair
// owned by two such pods counts twice. It also returns those pods.
func underReplicated(c *bloomeryv1alpha1.BloomCluster, targets []memberPod, reports []placementReport, lastOwned int64) (int64, []string) {
	p := c.Status.Placement
	epoch := uint64(c.Status.MembershipEpoch)
	moving := p.Previous != nil
	owner := func(pod string) bool {
		return slices.Contains(p.Owners, pod) || (moving && slices.Contains(p.Previous.Owners, pod))
	}
	var reported, sum, n int64
	for i, rep := range reports {
		if rep.err != nil {
			continue
		}
		reported = max(reported, int64(rep.status.PartitionsUnderReplicated))
		if rep.status.Epoch == epoch && owner(targets[i].addr.Name) {
			sum += int64(rep.status.PartitionsOwned)
			n++
		}
	}
	var average int64
	switch owners := int64(len(p.Owners)); {
	case n > 0:
		average = (sum + n - 1) / n
	case owners > 0:
		average = (lastOwned + owners - 1) / owners
	}
	count := reported
	var pods []string
	for i, rep := range reports {
		name := targets[i].addr.Name
		switch {
		case !owner(name) || errors.Is(rep.err, ErrPlacementUnsupported):
			// Owns nothing, or is a data plane from before placement, which holds everything.
			continue
		case rep.err == nil && (rep.status.CaughtUp || moving):
			continue
		case rep.err == nil && rep.status.Epoch == epoch:
			count += int64(rep.status.PartitionsOwned)
		default:
			count += average
		}
		pods = append(pods, name)
	}
	return count, pods
}

// underReplication is the degradation of a cluster whose status.placement counts pairs held by
// fewer than R pods, naming the pods catching up or not answering; nil when it counts none.
func underReplication(c *bloomeryv1alpha1.BloomCluster, pods []string) *degradation {
	p := c.Status.Placement
	if p == nil || p.PartitionsUnderReplicated <= 0 {
		return nil
	}
	msg := fmt.Sprintf("%d partitions are held by fewer pods than the replication factor %d", p.PartitionsUnderReplicated, p.ReplicationFactor)
	if len(pods) > 0 {
		msg += fmt.Sprintf(" (pods catching up from their peers or not answering: %s)", strings.Join(pods, ", "))
	} else {
		msg += " (an owner is not a member: its pod is away)"
	}
	return &degradation{ReasonPartitionsUnderReplicated, msg}
}

// planPlacement is the placement the members should have: every member owns partitions but the
// pods a scale-down removes, unless the others cannot hold the data (then the scale-down is
// refused, and the cluster Degraded). The factor is replicationFactor's for the owners.
func (r *BloomClusterReconciler) planPlacement(st *clusterState, members []bloomeryv1alpha1.ClusterMember, reports []placementReport) placement {
	c := st.cluster
	names := memberNames(members)
	var owners, leaving []string
	for _, n := range names {
		if leavingPod(c, n) {
			leaving = append(leaving, n)
		} else {
			owners = append(owners, n)
		}
	}
	if len(owners) == 0 {
		// No remaining pod is a member yet: nothing to move the partitions to, so they stay.
		owners, leaving = names, nil
	}
	recorded, ok := recordedPlacement(c)
	if !ok {
		recorded, _ = heldPlacement(c) // every member of an epoch from before placement
	}
	// An owner that is away for a moment (deleted by a rolling update, its node lost) stays one:
	// the other owners serve its partitions meanwhile, and it catches up from them when back.
	// Moving its partitions away and back would copy them twice for nothing.
	for _, o := range recorded.owners {
		if _, desired := ordinalOf(c.Name, o); desired && !leavingPod(c, o) && !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	slices.Sort(owners)
	want := placement{owners: owners, factor: replicationFactor(c, len(owners))}
	// The pods that stop owning now: the drain of a scale-down starts (or grows) with them.
	var starting []string
	for _, n := range leaving {
		if slices.Contains(recorded.owners, n) {
			starting = append(starting, n)
		}
	}
	if len(starting) == 0 {
		return want
	}
	msg := scaleDownMisfit(c, reports, want)
	if msg == "" {
		return want
	}
	st.notApplied = append(st.notApplied, degradation{ReasonScaleDownRefused, msg})
	r.event(c, nil, corev1.EventTypeWarning, ReasonScaleDownRefused, "ScaleDown", "%s", msg)
	owners = slices.Sorted(slices.Values(slices.Concat(owners, starting)))
	return placement{owners: owners, factor: replicationFactor(c, len(owners))}
}

// scaleDownMisfit says why the owners of want cannot hold the data, or "" when they can or
// nothing tells: no limits.maxTotalBytes (derived or given), or no pod reports its bytes. The
// pods' bytes hold every partition R times (the held placement's factor); spread over the
// owners at want's factor, each would hold sum × want.factor / (R × owners). Pods that did not
// report are counted as holding the average of those that did.
func scaleDownMisfit(c *bloomeryv1alpha1.BloomCluster, reports []placementReport, want placement) string {
	limit := limitsOf(c).total
	if limit == 0 || len(want.owners) == 0 {
		return ""
	}
	var sum float64
	var reported int
	for _, rep := range reports {
		if rep.err == nil {
			sum += float64(rep.status.Bytes)
			reported++
		}
	}
	if reported == 0 {
		return ""
	}
	total := sum * float64(len(reports)) / float64(reported)
	held, _ := heldPlacement(c)
	factor := held.factor
	if factor <= 0 {
		factor = want.factor
	}
	perPod := total * float64(want.factor) / (float64(factor) * float64(len(want.owners)))
	if perPod <= float64(limit) {
		return ""
	}
	return fmt.Sprintf("The scale-down to %d pods is refused: the pods hold %s (%d of %d reporting), every partition %d times; "+
		"%d pods at replication factor %d would hold about %s each (%d bytes), more than maxTotalBytes %s. "+
		"The StatefulSet keeps its pods; raise spec.limits.maxTotalBytes (or the memory limit) or spec.replicas",
		c.DesiredReplicas(), formatBytes(int64(total)), reported, len(reports), factor,
		len(want.owners), want.factor, formatBytes(int64(perPod)), int64(perPod), limitsOf(c).totalText())
}

// drained reports whether the StatefulSet may drop the pods a scale-down removes: the recorded
// membership, which no pod leaving owns and which moves nothing, reached every member in this pass.
func drained(c *bloomeryv1alpha1.BloomCluster) bool {
	p := c.Status.Placement
	if p == nil || p.Previous != nil {
		return false
	}
	for _, o := range p.Owners {
		if leavingPod(c, o) {
			return false
		}
	}
	return true
}

// logMove logs the progress of the move to the recorded placement, once per pass.
func logMove(ctx context.Context, c *bloomeryv1alpha1.BloomCluster, targets []memberPod, reports []placementReport) {
	epoch := uint64(c.Status.MembershipEpoch)
	var waiting []string
	for i, rep := range reports {
		if !rep.holdsEpoch(epoch) {
			waiting = append(waiting, targets[i].addr.Name)
		}
	}
	p := c.Status.Placement
	log.FromContext(ctx).Info("Moving partitions of BloomCluster", "epoch", epoch, "phase", p.Phase,
		"caughtUp", fmt.Sprintf("%d/%d", len(reports)-len(waiting), len(reports)), "waitingFor", waiting,
		"partitionsMoving", p.PartitionsMoving, "partitionsOwned", p.PartitionsOwned,
		"owners", p.Owners, "replicationFactor", p.ReplicationFactor,
		"previousOwners", p.Previous.Owners, "previousReplicationFactor", p.Previous.ReplicationFactor)
}
