//go:build e2e

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// setupRetry is how often a pod whose volumes or environment cannot be prepared yet (a claim or
// ConfigMap not created yet) tries again.
const setupRetry = 2 * time.Second

// podWorker runs one incarnation (UID) of a pod bound to the node: it prepares its volumes,
// runs its containers, reports its status and, once the pod is deleted, stops the containers
// within the grace period and removes the pod.
type podWorker struct {
	agent     *Agent
	key       string // namespace/name
	namespace string
	name      string
	uid       types.UID
	ip        netip.Addr
	dir       string        // the pod's private directory: working directory and non-persistent volumes
	grace     time.Duration // the spec's termination grace period, for a pod that vanishes
	logger    *slog.Logger

	changed  chan struct{} // the pod object changed; buffered, coalescing
	dirty    chan struct{} // a container's state changed; buffered, coalescing
	vanished chan struct{} // closed when the pod is gone from the API without a deletion seen
	vanish   sync.Once

	mu           sync.Mutex
	runners      []*containerRunner
	setupWaiting *corev1.ContainerStateWaiting
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// notify tells the worker that its pod changed.
func (w *podWorker) notify() { poke(w.changed) }

// gone tells the worker that its pod no longer exists.
func (w *podWorker) gone() { w.vanish.Do(func() { close(w.vanished) }) }

// pod returns the worker's pod from the informer's cache, or nil once it is gone or replaced by
// another incarnation.
func (w *podWorker) pod() *corev1.Pod {
	pod, err := w.agent.pods.Pods(w.namespace).Get(w.name)
	if err != nil || pod.UID != w.uid {
		return nil
	}
	return pod
}

func (w *podWorker) run(ctx context.Context) {
	defer w.agent.addresses.release(w.ip)
	w.logger.Info("Running pod", "ip", w.ip)
	if !w.setup(ctx) {
		return
	}
	var wg sync.WaitGroup
	for _, r := range w.runners {
		wg.Go(func() { r.run(ctx) })
	}
	allExited := make(chan struct{})
	go func() {
		wg.Wait()
		close(allExited)
	}()
	w.supervise(ctx, allExited)
}

// setup prepares the pod's volumes and processes, retrying until it succeeds. It returns false
// when the pod went away (or the agent stops) first.
func (w *podWorker) setup(ctx context.Context) bool {
	for {
		pod := w.pod()
		switch {
		case ctx.Err() != nil:
			return false
		case pod == nil:
			return false
		case pod.DeletionTimestamp != nil:
			// Nothing ran: the pod can go at once.
			w.removePod(ctx)
			return false
		}
		runners, err := w.prepare(ctx, pod)
		if err == nil {
			w.mu.Lock()
			w.runners, w.setupWaiting = runners, nil
			w.mu.Unlock()
			w.writeStatus(ctx)
			return true
		}
		w.logger.Info("Pod not ready to start", "err", err)
		w.mu.Lock()
		w.setupWaiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		w.mu.Unlock()
		w.writeStatus(ctx)
		select {
		case <-ctx.Done():
		case <-w.vanished:
			return false
		case <-w.changed:
		case <-time.After(setupRetry):
		}
	}
}

// prepare makes the pod's volumes and a runner per container.
func (w *podWorker) prepare(ctx context.Context, pod *corev1.Pod) ([]*containerRunner, error) {
	if len(pod.Spec.InitContainers) > 0 {
		return nil, fmt.Errorf("pod has init containers, which the e2e agent does not run")
	}
	cfg := w.agent.cfg
	network := podNetwork{podIP: w.ip, hostIP: hostIP, nodeName: cfg.NodeName}
	dirs, err := prepareVolumes(ctx, cfg.Client, pod, network, w.dir, filepath.Join(cfg.RootDir, "claims"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(w.agent.LogFile(pod.Namespace, pod.Name, pod.UID, "")), 0o755); err != nil {
		return nil, fmt.Errorf("creating the log directory: %w", err)
	}
	var kubeconfig string
	if cfg.API != nil && mountsServiceAccountToken(pod) {
		if kubeconfig, err = serviceAccountKubeconfig(ctx, cfg.Client, cfg.API, pod, filepath.Join(w.dir, "serviceaccount")); err != nil {
			return nil, err
		}
	}
	runners := make([]*containerRunner, 0, len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		env, vars, err := containerEnv(ctx, pod, c, network, apiObjects{client: cfg.Client})
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		if kubeconfig != "" {
			env = append(env, "KUBECONFIG="+kubeconfig)
		}
		paths, err := newPathMapper(c, dirs)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		process, err := containerProcess(c, cfg.Images, containerContext{
			podName: pod.Name, env: env, vars: vars, paths: paths,
			workDir: filepath.Join(w.dir, "containers", c.Name), extra: cfg.ExtraArgs(w.ip),
		})
		if err != nil {
			return nil, err
		}
		logPath := w.agent.LogFile(pod.Namespace, pod.Name, pod.UID, c.Name)
		runners = append(runners, newContainerRunner(*c, process, pod, w.ip, logPath, w.logger, func() { poke(w.dirty) }))
	}
	return runners, nil
}

// supervise reports status while the containers run, and ends the pod when it is deleted.
func (w *podWorker) supervise(ctx context.Context, allExited <-chan struct{}) {
	terminating, vanished := false, false
	terminate := func(grace time.Duration) {
		terminating = true
		for _, r := range w.runners {
			r.stop(grace)
		}
	}
	vanishedCh := w.vanished // closed once: nil after it was handled, so the loop does not spin on it
	for {
		select {
		case <-ctx.Done():
			// The agent stops: the runners SIGKILL their processes; wait for them to be gone.
			<-allExited
			return
		case <-vanishedCh:
			vanishedCh, vanished = nil, true
			w.logger.Info("Pod vanished; stopping its containers")
			terminate(w.grace)
		case <-w.changed:
			pod := w.pod()
			if pod != nil && pod.DeletionTimestamp != nil {
				grace := secondsDuration(deletionGraceSeconds(pod))
				if !terminating {
					w.logger.Info("Pod deleted; stopping its containers", "grace", grace)
				}
				terminate(grace) // again on a later delete: a shorter grace period wins
			}
		case <-w.dirty:
			if !vanished {
				w.writeStatus(ctx)
			}
		case <-allExited:
			switch {
			case vanished:
			case terminating:
				w.writeStatus(ctx)
				w.removePod(ctx)
			default:
				// restartPolicy Never or OnFailure: the pod is done, and stays until deleted.
				w.writeStatus(ctx)
				w.awaitDeletion(ctx)
			}
			return
		}
	}
}

// awaitDeletion waits, for a pod whose containers have all ended, until the pod is deleted or
// vanishes, and removes it.
func (w *podWorker) awaitDeletion(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.vanished:
			return
		case <-w.changed:
			if pod := w.pod(); pod != nil && pod.DeletionTimestamp != nil {
				w.removePod(ctx)
				return
			}
		}
	}
}

// removePod deletes the pod object at once, as the kubelet does once its containers are gone,
// so the StatefulSet controller can create its successor. The UID precondition keeps it from
// deleting a successor of the same name.
func (w *podWorker) removePod(ctx context.Context) {
	err := retry.OnError(retry.DefaultBackoff, func(err error) bool { return !apierrors.IsNotFound(err) && ctx.Err() == nil }, func() error {
		return w.agent.cfg.Client.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &w.uid},
		})
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.logger.Error("Removing the pod failed", "err", err)
		return
	}
	w.logger.Info("Removed pod")
}

// writeStatus writes the pod's status when it differs from what the API server has.
func (w *podWorker) writeStatus(ctx context.Context) {
	if cached := w.pod(); cached != nil {
		status := cached.Status.DeepCopy()
		applyStatus(status, w.view(cached))
		if equality.Semantic.DeepEqual(*status, cached.Status) {
			return
		}
	}
	pods := w.agent.cfg.Client.CoreV1().Pods(w.namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != w.uid {
			return nil
		}
		updated := pod.DeepCopy()
		applyStatus(&updated.Status, w.view(pod))
		if equality.Semantic.DeepEqual(updated.Status, pod.Status) {
			return nil
		}
		_, err = pods.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		w.logger.Error("Writing the pod's status failed", "err", err)
	}
}

func (w *podWorker) view(pod *corev1.Pod) podView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := podView{
		podIP:          w.ip.String(),
		hostIP:         hostIP.String(),
		imageID:        "e2e-agent://" + w.agent.cfg.Images.Executable,
		setupDone:      w.runners != nil,
		setupWaiting:   w.setupWaiting,
		containers:     pod.Spec.Containers,
		readinessGates: pod.Spec.ReadinessGates,
		now:            time.Now(),
	}
	if w.runners != nil {
		v.states = make([]containerState, len(w.runners))
		for i, r := range w.runners {
			v.states[i] = r.snapshot()
		}
	}
	return v
}

// deletionGraceSeconds is the grace period of a deleted pod: the deletion's, else the spec's.
func deletionGraceSeconds(pod *corev1.Pod) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	return specGraceSeconds(pod)
}

// specGraceSeconds is the pod's terminationGracePeriodSeconds, or the API's default.
func specGraceSeconds(pod *corev1.Pod) int64 {
	if pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }
