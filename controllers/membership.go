package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The operator tells every pod of a cluster who its peers are: the membership, numbered by an
// epoch that only grows. A pod keeps the highest epoch it was told and refuses lower ones, so
// the epoch must never name two different sets of pods. Hence the order: a new epoch is first
// written to the BloomCluster's status (status.membershipEpoch and status.members), and only a
// later pass, which reads it back from the API server, pushes it to the pods. An operator that
// restarts, or a pass whose status write fails, therefore never pushes an epoch that is not
// recorded. If the pods hold a higher epoch than status (status was lost or edited), the next
// epoch is taken past theirs. The placement of each epoch (placement.go) is recorded and pushed
// with it. A pod whose home lease has lapsed is left out of the members once its lease is
// revoked (homelease.go).

// membershipRetry is how soon a pass repeats while some pod has not taken the membership: a
// starting pod answers within seconds, and it reports ready only once it has been told.
const membershipRetry = time.Second

// memberPod is a pod that belongs in the membership.
type memberPod struct {
	addr Pod
	// started is true once the data-plane container passed its startup probe: from then on its
	// API listens, and a pod that does not answer is unreachable rather than starting.
	started bool
	// quick is true when the pod's home lease is overdue or revoked (fenceHomes): the pod is
	// likely frozen or cut off, and calls to it give up after quickCallTimeout.
	quick bool
	// leaseLapses is when its held home lease lapses, as the pass read it (zero when it holds
	// none): calls to it give up then, so that a pass waiting on a pod that froze before its lease
	// was overdue does not hold back the pass that revokes the lease.
	leaseLapses time.Time
}

// quickCallTimeout bounds each call to a pod whose home lease is overdue or revoked. Each pass
// of a cluster calls its members in parallel, and one frozen pod held every pass, the ones that
// revoke its lease and push the epoch without it included, for the whole pod timeout (twice:
// placement status, then membership): its home moved some 20 s after its 5 s lease lapsed. A pod
// that is well answers in milliseconds; one that takes longer is asked again next pass.
const quickCallTimeout = time.Second

// callContext is the context of a call to the pod.
func (t memberPod) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	deadline := t.leaseLapses
	if q := now.Add(quickCallTimeout); t.quick && (deadline.IsZero() || q.Before(deadline)) {
		deadline = q
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	if least := now.Add(minCallTimeout); deadline.Before(least) {
		deadline = least
	}
	return context.WithDeadline(ctx, deadline)
}

// minCallTimeout is the least a call to a pod is given, even past its lease's lapse: each such
// call holds back the pass that revokes the lease that much at most.
const minCallTimeout = 100 * time.Millisecond

// reconcileMembership starts a new epoch when the set of pods changed, or else brings every pod
// to the recorded one. It never fails the pass for a pod: pods that do not take the membership
// are retried soon, and the ones that should answer and do not are reported as Degraded.
func (r *BloomClusterReconciler) reconcileMembership(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	c := st.cluster
	pods, ignored, err := clusterPods(ctx, r.Client, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.reportIgnored(c, ignored)
	if st.noTLS {
		// reconcileTLS reported why; plain HTTP would send the token in clear.
		return ctrl.Result{RequeueAfter: tlsRetry}, nil
	}
	members, targets := membersOf(pods, st.token, st.tls)
	members, targets, wake, err := r.fenceHomes(ctx, st, members, targets)
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.reconcileMembers(ctx, st, members, targets)
	if wake > 0 && (res.RequeueAfter == 0 || wake < res.RequeueAfter) {
		// Back when the first held lease may lapse, if no event comes sooner.
		res.RequeueAfter = wake
	}
	return res, err
}

// reconcileMembers is reconcileMembership's work once the members are known.
func (r *BloomClusterReconciler) reconcileMembers(ctx context.Context, st *clusterState,
	members []bloomeryv1alpha1.ClusterMember, targets []memberPod) (ctrl.Result, error) {
	c := st.cluster
	reports := r.readPlacement(ctx, targets)
	st.underReplicated = underReplication(c, recordReports(c, targets, reports))
	want := r.planPlacement(st, members, reports)
	recorded, ok := recordedPlacement(c)
	switch {
	case !slices.Equal(members, c.Status.Members):
		return r.startEpoch(ctx, c, c.Status.MembershipEpoch+1, members, want, previousFor(c, want), "the set of pods changed"), nil
	case len(members) == 0:
		st.drained = true // no pod holds anything the operator could move
		return ctrl.Result{}, nil
	case !ok || !recorded.equal(want):
		return r.startEpoch(ctx, c, c.Status.MembershipEpoch+1, members, want, previousFor(c, want), "the placement changed"), nil
	}

	outcomes := r.pushMembership(ctx, c, targets)
	var next uint64 // past the highest epoch a pod holds for another set; 0 if none does
	var retry bool
	var unreachable, exhausted []string
	for i, o := range outcomes {
		switch {
		case o.ahead && o.podEpoch >= wire.MaxEpoch:
			// No epoch is left above the pod's for the operator to push; only a restart of the
			// pod, which forgets its membership, lets it follow the cluster again.
			exhausted = append(exhausted, targets[i].addr.Name)
		case o.ahead:
			next = max(next, o.podEpoch+1)
		case o.err != nil:
			retry = true
			if targets[i].started {
				unreachable = append(unreachable, targets[i].addr.Name)
			}
		}
	}
	if len(exhausted) > 0 {
		st.notApplied = append(st.notApplied, degradation{ReasonMembershipEpochExhausted, fmt.Sprintf(
			"pods %s hold membership epoch %d, the largest there is, so they can be told no newer membership; delete them to restart them with none",
			strings.Join(exhausted, ", "), uint64(wire.MaxEpoch))})
		return ctrl.Result{RequeueAfter: membershipRetry}, nil
	}
	if next > 0 {
		return r.startEpoch(ctx, c, int64(next), members, recorded, previousFor(c, recorded), "a pod holds an epoch at least as high as status.membershipEpoch"), nil
	}
	if len(unreachable) > 0 {
		st.notApplied = append(st.notApplied, degradation{ReasonMembershipNotDelivered, fmt.Sprintf(
			"pods %s did not take membership epoch %d: their API does not answer the operator, or refused it (see the operator's log)",
			strings.Join(unreachable, ", "), c.Status.MembershipEpoch)})
	}
	if retry {
		return ctrl.Result{RequeueAfter: membershipRetry}, nil
	}
	// Every member holds the recorded membership.
	if c.Status.Placement.Previous == nil {
		st.drained = drained(c)
		return ctrl.Result{}, nil
	}
	logMove(ctx, c, targets, reports)
	for _, rep := range reports {
		if !rep.holdsEpoch(uint64(c.Status.MembershipEpoch)) {
			return ctrl.Result{RequeueAfter: placementRetry}, nil
		}
	}
	return r.startEpoch(ctx, c, c.Status.MembershipEpoch+1, members, recorded, nil, "every member holds the partitions it owns"), nil
}

// reportIgnored counts in status the pods with the cluster's labels that are not its
// StatefulSet's, and names them in a Warning event.
func (r *BloomClusterReconciler) reportIgnored(c *bloomeryv1alpha1.BloomCluster, ignored []corev1.Pod) {
	c.Status.IgnoredPods = int32(len(ignored))
	if len(ignored) == 0 {
		return
	}
	names := make([]string, len(ignored))
	for i := range ignored {
		names[i] = ignored[i].Name
	}
	slices.Sort(names)
	orNoop(r.Recorder).Eventf(c, nil, corev1.EventTypeWarning, "IgnoredPods", "Membership",
		"Pods %s carry the labels of BloomCluster %s but are not pods of its StatefulSet: they are not members and are sent no token",
		strings.Join(names, ", "), c.Name)
}

// membersOf returns the membership of the cluster's pods, sorted by name, and how to reach each
// member's internal port with token and tls (https URLs with it). A pod belongs once it has an
// IP, and until it is being deleted or has stopped for good (an evicted pod keeps its IP in
// status, but never serves again).
func membersOf(pods []corev1.Pod, token string, tls *ClusterTLS) ([]bloomeryv1alpha1.ClusterMember, []memberPod) {
	var members []bloomeryv1alpha1.ClusterMember
	var targets []memberPod
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		addr, ok := podAddress(p, token, tls)
		if !ok {
			continue
		}
		members = append(members, bloomeryv1alpha1.ClusterMember{Pod: p.Name, URL: addr.baseURL()})
		targets = append(targets, memberPod{addr: addr, started: containerStarted(p)})
	}
	slices.SortFunc(members, func(a, b bloomeryv1alpha1.ClusterMember) int { return strings.Compare(a.Pod, b.Pod) })
	slices.SortFunc(targets, func(a, b memberPod) int { return strings.Compare(a.addr.Name, b.addr.Name) })
	return members, targets
}

// containerStarted reports whether the data-plane container passed its startup probe.
func containerStarted(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == containerName {
			return s.Started != nil && *s.Started
		}
	}
	return false
}

// startEpoch records a new membership in status, with its placement and the one it moves from
// (nil: none), and answers the pass's result: the status write at the end of the pass persists
// the epoch, and the next pass, which pushes it to the pods, follows at once. It starts from the
// cache, once the cache holds that write (BloomClusterReconciler.own): a pass from the status
// before it would start the same epoch again, and its write would conflict.
func (r *BloomClusterReconciler) startEpoch(ctx context.Context, c *bloomeryv1alpha1.BloomCluster, epoch int64,
	members []bloomeryv1alpha1.ClusterMember, current placement, previous *placement, why string) ctrl.Result {
	kv := []any{"epoch", epoch, "previousEpoch", c.Status.MembershipEpoch, "members", memberNames(members),
		"owners", current.owners, "replicationFactor", current.factor, "reason", why}
	if previous != nil {
		kv = append(kv, "previousOwners", previous.owners, "previousReplicationFactor", previous.factor)
	}
	log.FromContext(ctx).Info("Started a new membership epoch of BloomCluster", kv...)
	c.Status.MembershipEpoch = epoch
	c.Status.Members = members
	setPlacement(c, members, current, previous)
	return ctrl.Result{RequeueAfter: pushAfterEpoch}
}

// pushAfterEpoch is when the pass that pushes a new epoch follows the one that started it.
// RequeueAfter must be positive to be honoured.
const pushAfterEpoch = time.Millisecond

// pushOutcome is what became of one pod's membership in a pass.
type pushOutcome struct {
	// ahead is true when the pod holds the recorded epoch or a higher one for another set:
	// status is behind the pods, and the next epoch must be past podEpoch.
	ahead    bool
	podEpoch uint64
	// err is set when the pod did not answer or refused the membership for another reason.
	err error
}

// pushMembership reads every member's membership and sends the recorded one to those that
// differ, with bounded parallelism. outcomes[i] is targets[i]'s. The pods may take an epoch in
// any order, a move's start and end included: while some member may hold the epoch before, every
// copy it may read from still gets every write (dataplane/replication/placed.go, endingMove).
func (r *BloomClusterReconciler) pushMembership(ctx context.Context, c *bloomeryv1alpha1.BloomCluster, targets []memberPod) []pushOutcome {
	members := make([]wire.Member, len(c.Status.Members))
	for i, m := range c.Status.Members {
		members[i] = wire.Member{Name: m.Pod, URL: m.URL}
	}
	epoch := uint64(c.Status.MembershipEpoch)
	var current wire.Placement
	var previous *wire.Placement
	if p := c.Status.Placement; p != nil {
		current = placementOf(p.PartitionPlacement).wire()
		if p.Previous != nil {
			prev := placementOf(*p.Previous).wire()
			previous = &prev
		}
	}
	outcomes := make([]pushOutcome, len(targets))
	var g errgroup.Group
	g.SetLimit(r.podParallelism())
	for i, t := range targets {
		g.Go(func() error {
			want := wire.Membership{Epoch: epoch, Self: t.addr.Name, Members: members, Placement: current, Previous: previous}
			ctx, cancel := t.callContext(ctx)
			defer cancel()
			outcomes[i] = r.pushTo(ctx, t.addr, want)
			return nil
		})
	}
	_ = g.Wait()
	return outcomes
}

// pushTo brings one pod to want. A pod that already holds it costs a GET and no write.
func (r *BloomClusterReconciler) pushTo(ctx context.Context, pod Pod, want wire.Membership) pushOutcome {
	logger := log.FromContext(ctx).V(1).WithValues("pod", pod.Name, "epoch", want.Epoch)
	held, err := r.dataPlane().GetMembership(ctx, pod)
	if err != nil {
		logger.Info("Pod did not answer with its membership; will retry", "error", err.Error())
		return pushOutcome{err: fmt.Errorf("getting the membership of pod %s: %w", pod.Name, err)}
	}
	if held.Epoch == want.Epoch && sameMembership(held, want) {
		return pushOutcome{}
	}
	if held.Epoch > want.Epoch || (held.Epoch == want.Epoch && !sameMembers(held, want)) {
		// Pushing would be refused (higher epoch) or would give one epoch two meanings (same).
		// The same members with another placement are pushed again: a pod whose data plane
		// predates placement answers without it, and the same epoch is accepted again.
		logger.Info("Pod holds a membership epoch at least as high as the operator's", "podEpoch", held.Epoch)
		return pushOutcome{ahead: true, podEpoch: held.Epoch}
	}
	err = r.dataPlane().SetMembership(ctx, pod, want)
	switch {
	case errors.Is(err, ErrStaleEpoch):
		// Someone pushed a higher epoch between the GET and the PUT. It is at least ours; the
		// next pass reads the actual one and moves past it if this is not enough.
		logger.Info("Pod refused the membership as stale", "error", err.Error())
		return pushOutcome{ahead: true, podEpoch: want.Epoch}
	case err != nil:
		logger.Info("Pod did not take the membership; will retry", "error", err.Error())
		return pushOutcome{err: fmt.Errorf("setting the membership of pod %s: %w", pod.Name, err)}
	}
	logger.Info("Pushed membership to pod", "previousEpoch", held.Epoch, "members", len(want.Members))
	return pushOutcome{}
}

// sameMembership compares what defines a membership besides its epoch.
func sameMembership(a, b wire.Membership) bool {
	return sameMembers(a, b) && samePlacement(a.Placement, b.Placement) &&
		(a.Previous == nil) == (b.Previous == nil) && (a.Previous == nil || samePlacement(*a.Previous, *b.Previous))
}

// sameMembers compares the pods of two memberships.
func sameMembers(a, b wire.Membership) bool {
	return a.Self == b.Self && slices.Equal(a.Members, b.Members)
}

func samePlacement(a, b wire.Placement) bool {
	return a.ReplicationFactor == b.ReplicationFactor && slices.Equal(a.Owners, b.Owners)
}

func (r *BloomClusterReconciler) podParallelism() int {
	return positiveOr(r.PodParallelism, defaultPodParallelism)
}
