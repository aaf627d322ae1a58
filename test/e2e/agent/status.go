//go:build e2e

package agent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is what a pod worker knows of its pod, from which the fields of the pod's status that a
// kubelet owns are computed.
type podView struct {
	podIP, hostIP string
	imageID       string
	// setupDone: the volumes exist and containers can start (PodReadyToStartContainers).
	setupDone bool
	// setupWaiting is the reason containers wait before setup is done.
	setupWaiting   *corev1.ContainerStateWaiting
	containers     []corev1.Container
	readinessGates []corev1.PodReadinessGate
	states         []containerState // one per container once setup is done; nil before
	now            time.Time
}

// applyStatus overwrites the kubelet's fields of status with the view, and keeps the others (the
// scheduler's PodScheduled, the disruption controller's DisruptionTarget, the QoS class). A
// condition's transition time changes only when its status does.
func applyStatus(status *corev1.PodStatus, v podView) {
	now := metav1.NewTime(v.now)
	status.HostIP, status.HostIPs = v.hostIP, []corev1.HostIP{{IP: v.hostIP}}
	status.PodIP, status.PodIPs = v.podIP, []corev1.PodIP{{IP: v.podIP}}
	if status.StartTime == nil {
		status.StartTime = &now
	}
	status.ContainerStatuses = make([]corev1.ContainerStatus, len(v.containers))
	allReady, anyRan, allEnded, allSucceeded := len(v.containers) > 0, false, v.states != nil, true
	var unready []string
	for i, c := range v.containers {
		var s containerState
		if v.states != nil {
			s = v.states[i]
		} else {
			s.waiting = v.setupWaiting
		}
		cs := containerStatus(c, s, v.imageID)
		status.ContainerStatuses[i] = cs
		if !cs.Ready {
			allReady = false
			unready = append(unready, c.Name)
		}
		anyRan = anyRan || s.pid != 0 || s.last != nil || s.current != nil || s.restarts > 0
		allEnded = allEnded && s.current != nil
		allSucceeded = allSucceeded && s.current != nil && s.current.ExitCode == 0
	}

	switch {
	case allEnded && allSucceeded:
		status.Phase = corev1.PodSucceeded
	case allEnded:
		status.Phase = corev1.PodFailed
	case anyRan:
		status.Phase = corev1.PodRunning
	default:
		status.Phase = corev1.PodPending
	}

	notReady := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	setCondition(status, corev1.PodReadyToStartContainers, v.setupDone, "", "", now)
	setCondition(status, corev1.PodInitialized, true, "", "", now)
	if allReady {
		setCondition(status, corev1.ContainersReady, true, "", "", now)
	} else {
		setCondition(status, corev1.ContainersReady, false, "ContainersNotReady", notReady, now)
	}
	switch {
	case !allReady:
		setCondition(status, corev1.PodReady, false, "ContainersNotReady", notReady, now)
	case !readinessGatesPass(status, v.readinessGates):
		setCondition(status, corev1.PodReady, false, "ReadinessGatesNotReady", "the pod's readiness gates are not all True", now)
	default:
		setCondition(status, corev1.PodReady, true, "", "", now)
	}
}

func containerStatus(c corev1.Container, s containerState, imageID string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:         c.Name,
		Image:        c.Image,
		ImageID:      imageID,
		Ready:        s.ready,
		Started:      new(s.started),
		RestartCount: s.restarts,
	}
	switch {
	case s.current != nil:
		cs.State.Terminated = s.current
		cs.ContainerID = s.current.ContainerID
	case s.pid != 0:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(s.startedAt)}
		cs.ContainerID = processContainerID(s.pid)
	case s.waiting != nil:
		cs.State.Waiting = s.waiting
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	if s.last != nil {
		cs.LastTerminationState.Terminated = s.last
	}
	return cs
}

// ContainerIDScheme prefixes the container IDs the agent reports: process://<pid> names the
// process that runs the container, so a test can signal it as a user would kill a container.
const ContainerIDScheme = "process://"

func processContainerID(pid int) string { return fmt.Sprintf("%s%d", ContainerIDScheme, pid) }

// readinessGatesPass reports whether every condition the pod's readiness gates name is True.
func readinessGatesPass(status *corev1.PodStatus, gates []corev1.PodReadinessGate) bool {
	for _, gate := range gates {
		ok := false
		for _, c := range status.Conditions {
			if c.Type == gate.ConditionType {
				ok = c.Status == corev1.ConditionTrue
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// setCondition sets a condition the kubelet owns, keeping its transition time unless the status
// changed.
func setCondition(status *corev1.PodStatus, typ corev1.PodConditionType, ok bool, reason, message string, now metav1.Time) {
	want := corev1.ConditionFalse
	if ok {
		want = corev1.ConditionTrue
	}
	c := corev1.PodCondition{Type: typ, Status: want, Reason: reason, Message: message, LastTransitionTime: now}
	for i := range status.Conditions {
		if status.Conditions[i].Type != typ {
			continue
		}
		if status.Conditions[i].Status == want {
			c.LastTransitionTime = status.Conditions[i].LastTransitionTime
			c.LastProbeTime = status.Conditions[i].LastProbeTime
		}
		status.Conditions[i] = c
		return
	}
	status.Conditions = append(status.Conditions, c)
}
