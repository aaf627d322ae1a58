// Package lease renews the pod's home lease: the coordination.k8s.io/v1 Lease, named after the
// pod, that the operator creates and watches (docs/replication.md#the-homes-lease). Held says
// whether the pod holds it, for a home to consult before it serves a check-and-set or a create;
// the operator moves the pod's partitions to their next owner only once the lease has lapsed.
//
// Held measures time on this process's monotonic clock from the moment the last successful
// renewal was sent, never from renewTime: the request reaches the API server after it is sent,
// and the operator sees the new version after that, so the operator's clock starts later than
// this one and, the drift bound holding, stops later too.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// Leases reads and writes the Leases of the pod's namespace; client-go's typed
// coordination/v1 LeaseInterface is one.
type Leases interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// Options configure New.
type Options struct {
	Leases Leases
	// Name is the pod's, and its lease's, name; Namespace is only logged.
	Name, Namespace string
	// Duration is the lease's: it is renewed every third of it.
	Duration time.Duration
	// Epoch is the membership epoch the pod holds: after a revocation the lease is taken again
	// only at the epoch it names or later.
	Epoch func() uint64
	// EpochChanged, when set, answers a channel closed when the pod's membership next changes:
	// Run renews then at once, so that a pod readmitted after a revocation takes its lease back
	// as soon as it holds the epoch that readmits it, rather than an Interval later, while it is
	// home again and refuses check-and-sets for want of the lease.
	EpochChanged func() <-chan struct{}
	// Now is the clock; nil means time.Now, whose readings carry the monotonic clock.
	Now func() time.Time
	Log *slog.Logger
}

// Renewer keeps the pod's lease renewed.
type Renewer struct {
	opts Options
	// sent is when the last successful renewal was sent; zero when there is none, or since the
	// lease was found revoked.
	sent atomic.Pointer[time.Time]
	// failures counts the renewals that failed: the API did not answer, refused, or conflicted.
	failures atomic.Uint64

	mu sync.Mutex // serializes Renew
	// current is the lease as the API server last returned it: its resourceVersion makes the
	// next update fail if anyone changed the lease since (the operator revoking it).
	current *coordinationv1.Lease
	// waiting is the epoch a revocation named while the pod held a lower one; 0 when none.
	// logged is the last one logged.
	waiting, logged uint64
	// failing counts the failures since the last success, for the log.
	failing int
}

// New returns a renewer that holds nothing until its first renewal.
func New(opts Options) *Renewer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Epoch == nil {
		opts.Epoch = func() uint64 { return 0 }
	}
	opts.Log = opts.Log.With("lease", opts.Name, "namespace", opts.Namespace)
	return &Renewer{opts: opts}
}

// Held reports whether the pod holds its lease: a renewal succeeded, and less than the duration
// × (1 − the drift bound) has passed since it was sent.
func (r *Renewer) Held() bool {
	sent := r.sent.Load()
	return sent != nil && r.opts.Now().Sub(*sent) < wire.LeaseHeldFor(r.opts.Duration)
}

// Failures is the count of failed renewals.
func (r *Renewer) Failures() uint64 { return r.failures.Load() }

// Interval is the period of the renewals: a third of the duration, so that two can fail in a row
// and the lease is still held.
func (r *Renewer) Interval() time.Duration { return r.opts.Duration / 3 }

// Run renews the lease at once, then every Interval and at each change of the membership
// (Options.EpochChanged), until ctx ends. Each attempt may take up to an Interval.
func (r *Renewer) Run(ctx context.Context) {
	r.opts.Log.Info("Renewing the home lease", "duration", r.opts.Duration, "interval", r.Interval(),
		"heldFor", wire.LeaseHeldFor(r.opts.Duration))
	t := time.NewTicker(r.Interval())
	defer t.Stop()
	for {
		var changed <-chan struct{} // nil, which never fires, without EpochChanged
		if r.opts.EpochChanged != nil {
			changed = r.opts.EpochChanged() // before the attempt: a change during it renews again
		}
		attempt, cancel := context.WithTimeout(ctx, r.Interval())
		_ = r.Renew(attempt) // logged and counted by Renew
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
	}
}

// ErrRevoked is Renew's error while the operator's revocation keeps the pod from its lease.
var ErrRevoked = errors.New("the operator revoked the lease")

// Renew makes one attempt to renew the lease, reading it first when the last attempt left no
// version to update from; a conflict reads it and tries once more.
func (r *Renewer) Renew(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.renew(ctx)
	if apierrors.IsConflict(err) {
		// Someone else wrote the lease since we read it: read what they wrote.
		err = r.renew(ctx)
	}
	r.report(err)
	return err
}

func (r *Renewer) renew(ctx context.Context) error {
	if r.current == nil {
		l, err := r.opts.Leases.Get(ctx, r.opts.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Lease %s: %w", r.opts.Name, err)
		}
		r.current = l
	}
	next, err := r.renewal(r.current)
	if err != nil {
		return err
	}
	sent := r.opts.Now()
	updated, err := r.opts.Leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		// Unknown whether it was written: the next attempt reads the lease again.
		r.current = nil
		return fmt.Errorf("updating Lease %s: %w", r.opts.Name, err)
	}
	r.current = updated
	r.sent.Store(&sent)
	return nil
}

// renewal is l renewed by this pod, or ErrRevoked while a revocation names a later epoch than the
// pod holds.
func (r *Renewer) renewal(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	next := l.DeepCopy()
	now := metav1.NewMicroTime(r.opts.Now())
	switch {
	case holder == r.opts.Name:
	case holder != "":
		// Never written by the operator or by this pod: someone edited the lease by hand.
		r.forget()
		return nil, fmt.Errorf("lease %s is held by %q, not by this pod: refusing to take it over; empty its holderIdentity to give it back", l.Name, holder)
	default:
		if v, ok := l.Annotations[wire.LeaseRevokedAnnotation]; ok {
			epoch, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				r.forget()
				return nil, fmt.Errorf("lease %s: annotation %s is %q, not an epoch", l.Name, wire.LeaseRevokedAnnotation, v)
			}
			if held := r.opts.Epoch(); held < epoch {
				r.forget()
				r.waiting = epoch
				return nil, fmt.Errorf("%w for membership epoch %d; this pod holds epoch %d and takes the lease again once it holds that one or a later one",
					ErrRevoked, epoch, held)
			}
			delete(next.Annotations, wire.LeaseRevokedAnnotation)
		}
		next.Spec.AcquireTime = &now
		next.Spec.LeaseTransitions = new(leaseTransitions(l) + 1)
	}
	next.Spec.HolderIdentity = new(r.opts.Name)
	next.Spec.LeaseDurationSeconds = new(int32(min(math.Ceil(r.opts.Duration.Seconds()), math.MaxInt32)))
	next.Spec.RenewTime = &now
	return next, nil
}

func leaseTransitions(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// forget stops counting the lease held at once, rather than when it would lapse: the pod no
// longer holds it.
func (r *Renewer) forget() { r.sent.Store(nil) }

// report logs what changed: the failures (each says how long the lease has left), the return to
// renewals, a revocation once.
func (r *Renewer) report(err error) {
	log := r.opts.Log
	switch {
	case err == nil && r.waiting > 0:
		log.Info("Took the home lease again after its revocation", "revokedForEpoch", r.waiting, "epoch", r.opts.Epoch())
		r.waiting, r.logged, r.failing = 0, 0, 0
	case err == nil && r.failing > 0:
		log.Info("Renewed the home lease again", "failedRenewals", r.failing)
		r.failing = 0
	case err == nil:
	case errors.Is(err, ErrRevoked):
		if r.logged != r.waiting {
			log.Warn("The operator revoked the home lease: this pod is no partition's home until it holds the membership that replaced it", "error", err.Error())
			r.logged = r.waiting
		}
		r.failing++
	default:
		r.failures.Add(1)
		r.failing++
		// Every failure while the lease is still held (it is at stake), else the first and
		// then one in quietEvery: a pod that never reaches the API says so without flooding.
		if held := r.Held(); held || r.failing%quietEvery == 1 {
			log.Warn("Could not renew the home lease; check that the pod reaches the API server (the NetworkPolicy's egress) and that its ServiceAccount may update the Lease",
				"error", err.Error(), "failedInARow", r.failing, "held", held, "heldFor", r.heldLeft())
		}
	}
}

// quietEvery is how many failed renewals in a row, once the lease is lost, make one log line.
const quietEvery = 30

// heldLeft is how long the lease stays held without a renewal, 0 when it is not.
func (r *Renewer) heldLeft() time.Duration {
	sent := r.sent.Load()
	if sent == nil {
		return 0
	}
	return max(wire.LeaseHeldFor(r.opts.Duration)-r.opts.Now().Sub(*sent), 0)
}
