package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// A filter the operator creates on the pods carries its BloomFilter's UID as its owner, when the
// BloomFilter's deletionPolicy is Delete (ownerMark). Such a BloomFilter needs no finalizer: once it
// is gone, the next pass of its name finds the copies that carry its UID (the pods' polls list them)
// and deletes them, as Kubernetes' garbage collector deletes the dependents of an owner that is
// gone. Deleting a BloomFilter is then one write of the API server, not two: with thousands
// deleted at once, the finalizer's removal was two thirds of the API server's work.
//
// The delete event names the UID that went, so its pass deletes the copies at once. A copy whose
// owner the operator did not see go (it was stopped, or the pod did not answer) is deleted once the
// API server says no BloomFilter of its name has that UID; a pod's poll lists every copy it holds
// when it first answers, so this happens after a restart too.
//
// The finalizer stays where the copies' marks disagree with the policy (marksDisagree): a copy
// without the mark under Delete (one the BloomFilter adopted, or made by an operator or pod from
// before owners) is deleted by name as it always was; a copy with the mark under Retain (the policy
// was changed) is recorded as retained on its BloomCluster (retainedAnnotationPrefix), so that it
// stays.

// retainedAnnotationPrefix, followed by a BloomFilter's UID, marks on a BloomCluster that the copies
// carrying that UID are retained: their BloomFilter was deleted under Retain after they were made
// under Delete. Its value is the filter's name, for the reader.
const retainedAnnotationPrefix = "retained.bloomery.io/"

// orphansRetry is how soon a pass whose deletes of orphaned copies failed comes back to them.
const orphansRetry = 5 * time.Second

// ownerMark is the owner the copies of bf are made with: its UID under Delete, none under Retain,
// whose copies outlive it.
func ownerMark(bf *bloomeryv1alpha1.BloomFilter) types.UID {
	if bf.Spec.DeletionPolicy == bloomeryv1alpha1.Retain {
		return ""
	}
	return bf.UID
}

// marksDisagree reports whether a copy the pass found present carries another mark than the one
// bf's policy gives its copies: then bf needs the finalizer.
func marksDisagree(bf *bloomeryv1alpha1.BloomFilter, observed []podObservation) bool {
	want := ownerMark(bf)
	for _, o := range observed {
		if o.status.Present && types.UID(o.filter.Owner) != want {
			return true
		}
	}
	return false
}

// deletedFilter is a BloomFilter the operator saw deleted.
type deletedFilter struct {
	uid     types.UID
	cluster types.NamespacedName
	retain  bool
}

// deletedFilters holds, by name, the BloomFilters seen deleted whose copies no pass of that name
// has deleted yet, and for a while the UIDs whose copies a pass deleted.
type deletedFilters struct {
	mu     sync.Mutex
	byName map[types.NamespacedName][]deletedFilter
	// dropped holds the UIDs whose copies a pass deleted, in the order it did, and when: the pods'
	// polls list those copies until their next answers, and the passes those answers bring know
	// their owner gone without asking the API server.
	dropped     []droppedCopies
	droppedUIDs map[types.UID]bool
}

// droppedCopies is a UID whose copies a pass deleted, and when.
type droppedCopies struct {
	uid types.UID
	at  time.Time
}

// droppedMemory is how long deletedFilters remembers the UIDs whose copies were deleted: far
// longer than a poll takes to answer a change.
const droppedMemory = 2 * time.Minute

// recorder records the BloomFilters deleted; it passes no event itself.
func (d *deletedFilters) recorder() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc: func(e event.DeleteEvent) bool {
			if bf, ok := e.Object.(*bloomeryv1alpha1.BloomFilter); ok {
				d.add(client.ObjectKeyFromObject(bf), deletedFilter{
					uid:     bf.UID,
					cluster: types.NamespacedName{Namespace: bf.Namespace, Name: bf.Spec.ClusterRef.Name},
					retain:  bf.Spec.DeletionPolicy == bloomeryv1alpha1.Retain,
				})
			}
			return false
		},
	}
}

func (d *deletedFilters) add(key types.NamespacedName, gone deletedFilter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byName == nil {
		d.byName = map[types.NamespacedName][]deletedFilter{}
	}
	d.byName[key] = append(d.byName[key], gone)
}

// droppedCopiesOf records that the copies of uid were deleted, and forgets those of long ago.
func (d *deletedFilters) droppedCopiesOf(uid types.UID, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.dropped) > 0 && now.Sub(d.dropped[0].at) > droppedMemory {
		delete(d.droppedUIDs, d.dropped[0].uid)
		d.dropped = d.dropped[1:]
	}
	if d.droppedUIDs[uid] {
		return
	}
	if d.droppedUIDs == nil {
		d.droppedUIDs = map[types.UID]bool{}
	}
	d.dropped = append(d.dropped, droppedCopies{uid: uid, at: now})
	d.droppedUIDs[uid] = true
}

// copiesDropped reports whether a pass deleted copies of uid lately: uid is gone.
func (d *deletedFilters) copiesDropped(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.droppedUIDs[uid]
}

// take returns and forgets the BloomFilters of that name seen deleted.
func (d *deletedFilters) take(key types.NamespacedName) []deletedFilter {
	d.mu.Lock()
	defer d.mu.Unlock()
	gone := d.byName[key]
	delete(d.byName, key)
	return gone
}

// dropOrphans deletes from the pods the copies of the filter key names that carry the UID of a
// BloomFilter that is gone, other than current (the UID of the BloomFilter of that name in the
// cache, if any): first from every pod of its cluster, for a BloomFilter seen deleted; then from
// the pods whose polls list a copy of another owner, once the API server says that owner is gone.
// A pod that does not answer is left to its poll: its first answer lists every copy it holds,
// which brings a pass of each name.
func (r *BloomFilterReconciler) dropOrphans(ctx context.Context, key types.NamespacedName, current types.UID) error {
	var errs []error
	for _, gone := range r.deleted.take(key) {
		r.countsWritten.Delete(gone.uid)
		errs = append(errs, r.dropDeleted(ctx, key.Name, gone))
	}
	for _, c := range r.watch.holders(key.Namespace, key.Name) {
		owner := types.UID(c.status.Owner)
		if owner == "" || owner == current {
			continue
		}
		if !r.deleted.copiesDropped(owner) {
			// Not known gone: the API server says whether a BloomFilter of that name has the UID.
			var live bloomeryv1alpha1.BloomFilter
			err := r.apiReader().Get(ctx, key, &live)
			switch {
			case err == nil && live.UID == owner:
				continue // the cache is behind
			case err != nil && !apierrors.IsNotFound(err):
				errs = append(errs, err)
				continue
			}
		}
		cluster := types.NamespacedName{Namespace: key.Namespace, Name: c.cluster}
		if retained, err := r.isRetained(ctx, cluster, owner); err != nil || retained {
			errs = append(errs, err)
			continue
		}
		deleted, err := r.dataPlane().DeleteFilter(ctx, c.pod, key.Name, owner)
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting the filter of BloomFilter UID %s from pod %s: %w", owner, c.pod.Name, err))
			continue
		}
		if deleted {
			r.deleted.droppedCopiesOf(owner, time.Now())
			log.FromContext(ctx).Info("Deleted from a pod the filter of a BloomFilter that is gone", "pod", c.pod.Name, "ownerUID", owner)
		}
	}
	return errors.Join(errs...)
}

// dropDeleted deletes the copies that carry the mark of a BloomFilter seen deleted from the pods of
// its cluster. The members of the cluster's membership, when it has more than one, replicate to
// each other: the first member that takes the delete passes it to the others, which are not
// asked (they would have nothing left to delete). The watch expects them to lose their copies: a
// copy the replication misses is requeued by its pod's poll, and the holders' pass of dropOrphans
// deletes it. A pod outside the membership is asked for itself. Under Retain it records the copies
// as retained instead, if there are any. The pods take a delete only from the owner its copy
// names: one of a BloomFilter made since under the name stays.
func (r *BloomFilterReconciler) dropDeleted(ctx context.Context, name string, gone deletedFilter) error {
	pods, members, err := r.clusterPods(ctx, gone.cluster)
	if err != nil {
		return err
	}
	if gone.retain {
		for _, p := range pods {
			if st, err := r.filterStatus(ctx, p.pod, p.addr, name); err == nil && types.UID(st.Owner) == gone.uid {
				return r.markRetained(ctx, gone.cluster, gone.uid, name)
			}
		}
		return nil
	}
	var errs []error
	replicated := false // a member took the delete
	for _, p := range pods {
		member := replicatingMember(members, p.pod.Name)
		if replicated && member {
			r.watch.deletedOnPod(p.pod, name)
			continue
		}
		deleted, err := r.dataPlane().DeleteFilter(ctx, p.addr, name, gone.uid)
		if deleted {
			r.deleted.droppedCopiesOf(gone.uid, time.Now())
			replicated = replicated || member
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// replicatingMember reports whether pod is a member of a membership of more than one pod, whose
// writes reach the other members by replication.
func replicatingMember(members []bloomeryv1alpha1.ClusterMember, pod string) bool {
	return len(members) > 1 && slices.ContainsFunc(members, func(m bloomeryv1alpha1.ClusterMember) bool { return m.Pod == pod })
}

// clusterPod is a pod of a cluster and how to call it.
type clusterPod struct {
	pod  *corev1.Pod
	addr Pod
}

// clusterPods are the pods of cluster that have an address, and the members of its membership.
// Both are the cache's own: they are read, never written.
func (r *BloomFilterReconciler) clusterPods(ctx context.Context, key types.NamespacedName) ([]clusterPod, []bloomeryv1alpha1.ClusterMember, error) {
	var cluster bloomeryv1alpha1.BloomCluster
	if err := r.Client.Get(ctx, key, &cluster, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, client.IgnoreNotFound(err) // without a cluster, its pods went with it
	}
	token, err := clusterToken(ctx, r.Client, &cluster)
	if err != nil {
		return nil, nil, err
	}
	podTLS, err := r.tlsSecrets.get(ctx, r.apiReader(), &cluster)
	if err != nil {
		return nil, nil, err
	}
	pods, _, err := sharedClusterPods(ctx, r.Client, &cluster)
	if err != nil {
		return nil, nil, err
	}
	var out []clusterPod
	for i := range pods {
		if addr, ok := podAddress(&pods[i], token, podTLS); ok {
			out = append(out, clusterPod{pod: &pods[i], addr: addr})
		}
	}
	return out, cluster.Status.Members, nil
}

// isRetained reports whether cluster records the copies that carry owner's mark as retained.
func (r *BloomFilterReconciler) isRetained(ctx context.Context, cluster types.NamespacedName, owner types.UID) (bool, error) {
	var c bloomeryv1alpha1.BloomCluster
	if err := r.Client.Get(ctx, cluster, &c, client.UnsafeDisableDeepCopy); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	_, ok := c.Annotations[retainedAnnotationPrefix+string(owner)]
	return ok, nil
}

// markRetained records on the cluster that the copies carrying owner's mark are retained.
func (r *BloomFilterReconciler) markRetained(ctx context.Context, cluster types.NamespacedName, owner types.UID, name string) error {
	var c bloomeryv1alpha1.BloomCluster
	if err := r.Client.Get(ctx, cluster, &c); err != nil {
		return client.IgnoreNotFound(err) // without the cluster, its pods and their copies went with it
	}
	key := retainedAnnotationPrefix + string(owner)
	if _, ok := c.Annotations[key]; ok {
		return nil
	}
	// A merge patch of the one annotation: no other change of the cluster is lost or refused.
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[key] = name
	if err := r.Client.Patch(ctx, &c, patch); err != nil {
		return fmt.Errorf("recording the retained filter %s on BloomCluster %s: %w", name, cluster.Name, err)
	}
	return nil
}

// markRetainedCopies records bf's copies as retained on its cluster, for a BloomFilter deleted
// under Retain with the finalizer: its copies may carry its mark.
func (r *BloomFilterReconciler) markRetainedCopies(ctx context.Context, bf *bloomeryv1alpha1.BloomFilter) error {
	cluster, err := r.clusterOf(ctx, bf)
	if err != nil || cluster == nil {
		return err
	}
	return r.markRetained(ctx, client.ObjectKeyFromObject(cluster), bf.UID, bf.Name)
}
