//go:build e2e

package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func condition(s *corev1.PodStatus, typ corev1.PodConditionType) corev1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.PodCondition{}
}

func TestApplyStatusFollowsTheContainer(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	view := podView{podIP: "127.0.1.7", hostIP: "127.0.0.1", containers: []corev1.Container{{Name: "dataplane", Image: "bloomery"}}, now: start}
	// Set by the binding: the agent must keep it.
	status := &corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}

	view.setupWaiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: "no ConfigMap"}
	applyStatus(status, view)
	if status.Phase != corev1.PodPending || status.ContainerStatuses[0].State.Waiting.Reason != "CreateContainerConfigError" {
		t.Errorf("before setup: phase %s, state %+v", status.Phase, status.ContainerStatuses[0].State)
	}

	view.setupDone, view.now = true, start.Add(time.Second)
	view.states = []containerState{{pid: 42, startedAt: start, started: true, ready: true}}
	applyStatus(status, view)
	cs := status.ContainerStatuses[0]
	if status.Phase != corev1.PodRunning || !cs.Ready || cs.ContainerID != "process://42" || cs.State.Running == nil {
		t.Errorf("running and ready: phase %s, container %+v", status.Phase, cs)
	}
	if c := condition(status, corev1.PodReady); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Time.Equal(start.Add(time.Second)) {
		t.Errorf("Ready condition %+v", c)
	}
	if c := condition(status, corev1.PodScheduled); c.Status != corev1.ConditionTrue {
		t.Errorf("the binding's PodScheduled condition was lost: %+v", status.Conditions)
	}
	if status.PodIP != "127.0.1.7" || status.HostIP != "127.0.0.1" || status.StartTime == nil {
		t.Errorf("addresses %s %s, start %v", status.PodIP, status.HostIP, status.StartTime)
	}

	// Killed: restarting, with the previous run's end; Ready moves, PodInitialized does not.
	view.now = start.Add(2 * time.Second)
	killed := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", ContainerID: "process://42", FinishedAt: metav1.NewTime(view.now)}
	view.states = []containerState{{restarts: 1, last: killed, waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	applyStatus(status, view)
	cs = status.ContainerStatuses[0]
	if status.Phase != corev1.PodRunning || cs.Ready || cs.RestartCount != 1 || cs.LastTerminationState.Terminated.ExitCode != 137 {
		t.Errorf("restarting: phase %s, container %+v", status.Phase, cs)
	}
	if c := condition(status, corev1.PodReady); c.Status != corev1.ConditionFalse || !c.LastTransitionTime.Time.Equal(view.now) || c.Reason != "ContainersNotReady" {
		t.Errorf("Ready condition after the kill %+v", c)
	}
	if c := condition(status, corev1.PodInitialized); !c.LastTransitionTime.Time.Equal(start) {
		t.Errorf("Initialized moved: %+v", c)
	}
}

func TestApplyStatusEndsThePodWhenEveryContainerStopped(t *testing.T) {
	view := podView{podIP: "127.0.1.7", hostIP: "127.0.0.1", containers: []corev1.Container{{Name: "a"}, {Name: "b"}}, setupDone: true, now: time.Now()}
	ok := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	failed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	for _, tc := range []struct {
		states []containerState
		want   corev1.PodPhase
	}{
		{[]containerState{{current: ok}, {current: ok}}, corev1.PodSucceeded},
		{[]containerState{{current: ok}, {current: failed}}, corev1.PodFailed},
		{[]containerState{{current: ok}, {pid: 7}}, corev1.PodRunning},
	} {
		view.states = tc.states
		status := &corev1.PodStatus{}
		applyStatus(status, view)
		if status.Phase != tc.want {
			t.Errorf("containers %+v: phase %s, want %s", tc.states, status.Phase, tc.want)
		}
	}
}
