//go:build e2e

// Package agent is the node agent of the end-to-end tests: a test harness that plays a kubelet's
// part just far enough for the operator and the StatefulSet controller to work for real. It
// registers one Ready Node, binds pending Pods to it, and runs every container of every Pod as a
// local process of the bloomery binary, each Pod on its own loopback address. It reports Pod IP,
// phase, container states and readiness from the Pod's own probes, restarts processes that exit,
// and stops them with SIGTERM, the grace period and SIGKILL when their Pod is deleted.
//
// It is not a kubelet: there are no images, no container runtime, no isolation and no resource
// limits; every image runs the one local binary, as the test's user, whatever the security
// context says; affinity, tolerations and topology spread are ignored (there is one node);
// only httpGet and tcpSocket probes run; ConfigMap, Secret and downward API volumes are written
// once at start. `kubectl logs` and `kubectl exec` do not work: each container's output goes to
// a file per pod incarnation under RootDir/logs (see LogFiles).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config configures an Agent.
type Config struct {
	// Client is the agent's access to the API server; it needs to manage Nodes, Pods, their
	// status and bindings, and to read ConfigMaps, Secrets and PersistentVolumeClaims.
	Client kubernetes.Interface
	// API is where pods reach the API server, when they mount their ServiceAccount's token
	// (serviceaccount.go); nil: they get none.
	API      *rest.Config
	NodeName string
	Images   Images
	// RootDir holds every pod's directories, the claims' directories and the logs.
	RootDir string
	// Addresses is the network pods get their addresses from, such as 127.0.1.0/24: addresses
	// of this host, which the pods' processes listen on.
	Addresses netip.Prefix
	// ExtraArgs are appended to every container's arguments, given the pod's address: a process
	// on the host must be told to listen on its pod's address only.
	ExtraArgs func(podIP netip.Addr) []string
	Logger    *slog.Logger
}

// Agent runs the pods of one node. Create it with New and run it with Run.
type Agent struct {
	cfg       Config
	addresses *addressPool
	pods      corelisters.PodLister
	queue     workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// workers by pod UID. Two incarnations of one name may run at once, as on a kubelet: a pod
	// force-deleted from the API still stops within its grace period while its successor starts.
	workers  map[types.UID]*podWorker
	finished map[types.UID]bool // incarnations whose worker ended: never run again
	workerWG sync.WaitGroup
}

// New checks cfg and returns an agent that does nothing until Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.RootDir == "" || cfg.Images.Executable == "" {
		return nil, errors.New("agent: Client, NodeName, RootDir and Images.Executable are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ExtraArgs == nil {
		cfg.ExtraArgs = func(netip.Addr) []string { return nil }
	}
	pool, err := newAddressPool(cfg.Addresses)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Agent{
		cfg:       cfg,
		addresses: pool,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "e2e-node-agent"}),
		workers:  map[types.UID]*podWorker{},
		finished: map[types.UID]bool{},
	}, nil
}

// Run registers the node and runs pods until ctx ends; it returns once every process it started
// has exited (they are SIGKILLed: the control plane is going away too).
func (a *Agent) Run(ctx context.Context) error {
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(a.cfg.Client, 0)
	podInformer := factory.Core().V1().Pods()
	a.pods = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	}); err != nil {
		return fmt.Errorf("agent: watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return fmt.Errorf("agent: pod cache did not sync: %w", context.Cause(ctx))
	}
	a.cfg.Logger.Info("Node agent running", "node", a.cfg.NodeName, "addresses", a.cfg.Addresses)

	var loop sync.WaitGroup
	loop.Go(func() {
		for a.processNext(ctx) {
		}
	})
	loop.Go(func() {
		if err := a.runProvisioner(ctx); err != nil {
			a.cfg.Logger.Error("Volume provisioner stopped", "err", err)
		}
	})
	<-ctx.Done()
	a.queue.ShutDown()
	loop.Wait()
	a.workerWG.Wait()
	return nil
}

// LogFile is the log of one container of one pod incarnation: the output of every run of its
// process, each run's start and end marked by a line of the agent's.
func (a *Agent) LogFile(namespace, pod string, uid types.UID, container string) string {
	return filepath.Join(a.cfg.RootDir, "logs", namespace, fmt.Sprintf("%s_%s_%s.log", pod, uid, container))
}

// LogFiles lists the log files (LogFile) of every pod incarnation of a namespace.
func (a *Agent) LogFiles(namespace string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(a.cfg.RootDir, "logs", namespace, "*.log"))
	if err != nil {
		return nil, fmt.Errorf("listing logs of namespace %s: %w", namespace, err)
	}
	return files, nil
}

func (a *Agent) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		a.cfg.Logger.Error("Ignored a pod event without a key", "err", err)
		return
	}
	a.queue.Add(key)
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		a.cfg.Logger.Error("Syncing pod failed; retrying", "pod", key, "err", err)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync brings one pod name in line: bind it if pending, run it if bound here, stop what runs for
// a pod that is gone or was replaced by another incarnation.
func (a *Agent) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("pod key %q: %w", key, err)
	}
	pod, err := a.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		a.stopWorker(key, "")
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod %s from the cache: %w", key, err)
	}
	switch pod.Spec.NodeName {
	case "":
		return a.bind(ctx, pod)
	case a.cfg.NodeName:
	default:
		return nil
	}
	a.stopWorker(key, pod.UID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.workers[pod.UID]; w != nil {
		w.notify()
		return nil
	}
	if a.finished[pod.UID] || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	return a.startWorkerLocked(ctx, key, pod)
}

// stopWorker tells the workers of key's incarnations other than keep that their pod is gone.
func (a *Agent) stopWorker(key string, keep types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.workers {
		if w.key == key && w.uid != keep {
			w.gone()
		}
	}
}

func (a *Agent) startWorkerLocked(ctx context.Context, key string, pod *corev1.Pod) error {
	var ports []int32
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports = append(ports, p.ContainerPort)
			}
		}
	}
	ip, err := a.addresses.allocate(key, ports)
	if err != nil {
		return fmt.Errorf("pod %s: %w", key, err)
	}
	w := &podWorker{
		agent:     a,
		key:       key,
		namespace: pod.Namespace,
		name:      pod.Name,
		uid:       pod.UID,
		ip:        ip,
		dir:       filepath.Join(a.cfg.RootDir, "pods", pod.Namespace, pod.Name+"_"+string(pod.UID)),
		grace:     secondsDuration(specGraceSeconds(pod)),
		logger:    a.cfg.Logger.With("pod", key, "uid", pod.UID),
		changed:   make(chan struct{}, 1),
		dirty:     make(chan struct{}, 1),
		vanished:  make(chan struct{}),
	}
	a.workers[pod.UID] = w
	a.workerWG.Go(func() {
		w.run(ctx)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.finished[w.uid] = true
		delete(a.workers, w.uid)
	})
	return nil
}
