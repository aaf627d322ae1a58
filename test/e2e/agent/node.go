//go:build e2e

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// hostIP is the node's address: the processes run on this machine.
var hostIP = netip.MustParseAddr("127.0.0.1")

func (a *Agent) nodeLabels() map[string]string {
	return map[string]string{
		corev1.LabelHostname:   a.cfg.NodeName,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
}

// registerNode creates the Node, or takes over one of the same name, and reports it Ready. Its
// status is written once: no node lifecycle controller runs in the test control plane, so
// nothing marks a node whose heartbeat stops NotReady or evicts its pods.
func (a *Agent) registerNode(ctx context.Context) error {
	nodes := a.cfg.Client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: a.nodeLabels()}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("agent: registering node %s: %w", a.cfg.NodeName, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "the e2e node agent runs pods as local processes (a test harness, not a kubelet)"),
			condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
			condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
			condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: hostIP.String()},
			{Type: corev1.NodeHostName, Address: a.cfg.NodeName},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          "e2e-node-agent",
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "process://",
		},
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("agent: reporting node %s Ready: %w", a.cfg.NodeName, err)
	}
	return nil
}

// bind assigns a pending pod to the node through the binding subresource, as the scheduler
// would. Of the scheduler's rules only the node selector applies: with one node and no taints,
// affinity, tolerations and topology spread have nothing to choose between.
func (a *Agent) bind(ctx context.Context, pod *corev1.Pod) error {
	if pod.Spec.SchedulerName != corev1.DefaultSchedulerName || pod.DeletionTimestamp != nil {
		return nil
	}
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(a.nodeLabels())) {
		a.cfg.Logger.Info("Pod left pending: its nodeSelector does not match the node", "pod", pod.Namespace+"/"+pod.Name, "nodeSelector", pod.Spec.NodeSelector)
		return nil
	}
	err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		a.cfg.Logger.Info("Bound pod", "pod", pod.Namespace+"/"+pod.Name, "node", a.cfg.NodeName)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Deleted meanwhile, or already bound: the next event says what happened.
		return nil
	}
	return fmt.Errorf("binding pod %s/%s: %w", pod.Namespace, pod.Name, err)
}
