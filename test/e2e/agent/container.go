//go:build e2e

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restart backoff of a container whose process exited: shorter than the kubelet's (10 s doubling
// to 5 min) so that tests of crash recovery take seconds, with the same shape.
const (
	restartBackoffInitial = 500 * time.Millisecond
	restartBackoffMax     = 10 * time.Second
	// A run that lasted this long resets the backoff, as the kubelet's does after 10 minutes.
	restartBackoffReset = 10 * time.Second
)

// containerRunner runs one container of a pod as a local process: it starts it, probes it,
// restarts it by the pod's restart policy, and stops it with SIGTERM, the grace period and
// SIGKILL. Its state is what the pod's containerStatuses report.
type containerRunner struct {
	spec          corev1.Container
	process       processSpec
	restartPolicy corev1.RestartPolicy
	grace         time.Duration // the pod's termination grace period, for restarts after a failed probe
	podIP         netip.Addr
	logPath       string
	logger        *slog.Logger
	changed       func() // called after every change of state

	stopCh chan time.Duration // a graceful stop with this grace period; buffered

	mu    sync.Mutex
	state containerState
}

// containerState is a container as its status reports it.
type containerState struct {
	restarts  int32
	pid       int // of the running process; 0 when none runs
	startedAt time.Time
	started   bool // the startup probe passed (or there is none)
	ready     bool
	waiting   *corev1.ContainerStateWaiting
	current   *corev1.ContainerStateTerminated // set once the runner stopped for good
	last      *corev1.ContainerStateTerminated // the previous run's end
}

func newContainerRunner(spec corev1.Container, process processSpec, pod *corev1.Pod, podIP netip.Addr, logPath string, logger *slog.Logger, changed func()) *containerRunner {
	return &containerRunner{
		spec:          spec,
		process:       process,
		restartPolicy: pod.Spec.RestartPolicy,
		grace:         secondsDuration(specGraceSeconds(pod)),
		podIP:         podIP,
		logPath:       logPath,
		logger:        logger.With("container", spec.Name),
		changed:       changed,
		stopCh:        make(chan time.Duration, 1),
		state:         containerState{waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
	}
}

// snapshot returns the container's state.
func (r *containerRunner) snapshot() containerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *containerRunner) update(f func(*containerState)) {
	r.mu.Lock()
	f(&r.state)
	r.mu.Unlock()
	r.changed()
}

// stop asks the runner to stop the process gracefully within grace and not to restart it. It
// does not wait: run returns once the process is gone. A later stop with a shorter grace period
// shortens the wait, as a second delete with a shorter --grace-period does.
func (r *containerRunner) stop(grace time.Duration) {
	select {
	case r.stopCh <- grace:
	default:
		select {
		case old := <-r.stopCh:
			r.stopCh <- min(old, grace)
		default:
			r.stopCh <- grace
		}
	}
}

// run is the container's life: start, wait, restart, until stopped or ctx ends (the agent shuts
// down, and SIGKILLs the process).
func (r *containerRunner) run(ctx context.Context) {
	backoff := restartBackoffInitial
	for {
		ran, stopped := r.runOnce(ctx)
		if stopped || ctx.Err() != nil {
			return
		}
		last := r.snapshot().last
		if !r.shouldRestart(last) {
			r.update(func(s *containerState) { s.current, s.last = s.last, nil })
			return
		}
		if ran >= restartBackoffReset {
			backoff = restartBackoffInitial
		}
		r.update(func(s *containerState) {
			s.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %v restarting failed container %s", backoff, r.spec.Name)}
		})
		select {
		case <-ctx.Done():
			return
		case <-r.stopCh: // nothing runs: stopping is immediate
			r.update(func(s *containerState) { s.waiting, s.current, s.last = nil, s.last, nil })
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, restartBackoffMax)
		r.update(func(s *containerState) { s.restarts++ })
	}
}

// shouldRestart applies the pod's restart policy to the end of a run.
func (r *containerRunner) shouldRestart(end *corev1.ContainerStateTerminated) bool {
	switch r.restartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return end == nil || end.ExitCode != 0
	}
	return true
}

// runOnce runs the process once. It returns how long it ran and whether the runner was stopped
// (by stop or ctx) rather than the process ending by itself or by a failed probe.
func (r *containerRunner) runOnce(ctx context.Context) (time.Duration, bool) {
	cmd, logFile, err := r.start(ctx)
	if err != nil {
		r.logger.Error("Starting the container failed", "err", err)
		now := metav1.Now()
		r.update(func(s *containerState) {
			s.waiting = nil
			s.last = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now}
		})
		return 0, false
	}
	started := time.Now()
	r.logger.Info("Started container", "pid", cmd.Process.Pid)
	r.update(func(s *containerState) {
		s.pid, s.startedAt, s.waiting, s.started, s.ready = cmd.Process.Pid, started, nil, false, false
	})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	probeCtx, stopProbes := context.WithCancel(ctx)
	probeFailed := make(chan string, 1)
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		r.runProbes(probeCtx, probeFailed)
	}()

	var stopping bool
	var waitErr error
	var term termination
	agentDone := ctx.Done()
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case <-agentDone:
			// The agent shuts down: nothing waits for a graceful stop. exec.CommandContext
			// SIGKILLs the process.
			agentDone, stopping = nil, true
		case grace := <-r.stopCh:
			stopping = true
			term.begin(cmd, grace, r.logger)
		case reason := <-probeFailed:
			// A failed liveness or startup probe restarts the container, gracefully.
			r.logger.Info("Restarting container after a failed probe", "reason", reason)
			term.begin(cmd, r.grace, r.logger)
		case <-term.deadline():
			_ = cmd.Process.Signal(syscall.SIGKILL) // fails only if it already exited
			term.timer = nil
		}
	}
	term.stop()
	stopProbes()
	<-probesDone
	finished := time.Now()
	end := terminated(cmd.ProcessState, waitErr, started, finished)
	end.ContainerID = processContainerID(cmd.Process.Pid)
	writeMarker(logFile, fmt.Sprintf("exited: code %d (%s) after %v", end.ExitCode, end.Reason, finished.Sub(started).Round(time.Millisecond)))
	_ = logFile.Close() // written through the process and writeMarker; nothing buffered
	r.logger.Info("Container exited", "exitCode", end.ExitCode, "reason", end.Reason)
	r.update(func(s *containerState) {
		s.pid, s.ready, s.started, s.last = 0, false, false, end
		if stopping {
			s.current, s.last = end, nil
		}
	})
	return finished.Sub(started), stopping
}

// start opens the run's log and starts the process in a process group of its own, so that the
// terminal's Ctrl-C reaches the test, which stops it, and not the process directly. The process
// is SIGKILLed when ctx (the agent's) ends.
func (r *containerRunner) start(ctx context.Context) (*exec.Cmd, *os.File, error) {
	logFile, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the log: %w", err)
	}
	writeMarker(logFile, fmt.Sprintf("start (restart %d): %s %s", r.snapshot().restarts, r.process.path, strings.Join(r.process.args, " ")))
	cmd := exec.CommandContext(ctx, r.process.path, r.process.args...)
	cmd.Env = r.process.env
	cmd.Dir = r.process.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig: if the test binary dies without stopping it (a panic, a timeout), so does the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		_ = logFile.Close() // nothing was written through it yet but the marker
		return nil, nil, fmt.Errorf("creating the working directory: %w", err)
	}
	if err := cmd.Start(); err != nil {
		writeMarker(logFile, "start failed: "+err.Error())
		_ = logFile.Close() // as above
		return nil, nil, fmt.Errorf("starting %s: %w", r.process.path, err)
	}
	return cmd, logFile, nil
}

// minimumGrace is the least time a container gets between SIGTERM and SIGKILL, even when its pod
// is force-deleted with a grace period of 0: the kubelet's minimumGracePeriodInSeconds.
const minimumGrace = 2 * time.Second

// termination is a graceful stop in progress: SIGTERM was sent once, SIGKILL follows at killAt.
type termination struct {
	killAt time.Time // zero until the stop begins
	timer  *time.Timer
}

// begin sends SIGTERM, or, for a stop already under way, brings SIGKILL forward when grace ends
// sooner. SIGTERM goes only once: a second one may end a process in the middle of its graceful
// stop (Go programs commonly exit at once on a second signal), which the kubelet never does.
func (t *termination) begin(cmd *exec.Cmd, grace time.Duration, logger *slog.Logger) {
	killAt := time.Now().Add(max(grace, minimumGrace))
	switch {
	case t.killAt.IsZero():
		logger.Info("Stopping container", "pid", cmd.Process.Pid, "grace", max(grace, minimumGrace))
		_ = cmd.Process.Signal(syscall.SIGTERM) // fails only if it already exited
	case killAt.Before(t.killAt):
		logger.Info("Stopping container sooner", "pid", cmd.Process.Pid, "grace", max(grace, minimumGrace))
	default:
		return
	}
	t.killAt = killAt
	t.stop()
	t.timer = time.NewTimer(time.Until(killAt))
}

// deadline fires when SIGKILL is due; nil (never) before the stop begins and after it fired.
func (t *termination) deadline() <-chan time.Time {
	if t.timer == nil {
		return nil
	}
	return t.timer.C
}

func (t *termination) stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

// runProbes runs the container's startup probe, then its readiness and liveness probes, and
// reports through failed a probe failure that must restart the container.
func (r *containerRunner) runProbes(ctx context.Context, failed chan<- string) {
	fail := func(reason string) {
		select {
		case failed <- reason:
		default:
		}
	}
	if p := r.spec.StartupProbe; p != nil {
		var passed bool
		prober{probe: p, container: &r.spec, podIP: r.podIP}.run(ctx, func(ok bool, err error) bool {
			passed = ok
			if !ok {
				fail(fmt.Sprintf("startup probe failed: %v", err))
			}
			return true
		})
		if !passed {
			return
		}
	}
	r.update(func(s *containerState) {
		s.started = true
		s.ready = r.spec.ReadinessProbe == nil
	})
	var wg sync.WaitGroup
	if p := r.spec.ReadinessProbe; p != nil {
		wg.Go(func() {
			prober{probe: p, container: &r.spec, podIP: r.podIP}.run(ctx, func(ok bool, err error) bool {
				if !ok {
					r.logger.Info("Readiness probe failed", "err", err)
				}
				r.update(func(s *containerState) { s.ready = ok })
				return false
			})
		})
	}
	if p := r.spec.LivenessProbe; p != nil {
		wg.Go(func() {
			prober{probe: p, container: &r.spec, podIP: r.podIP}.run(ctx, func(ok bool, err error) bool {
				if !ok {
					fail(fmt.Sprintf("liveness probe failed: %v", err))
				}
				return !ok
			})
		})
	}
	wg.Wait()
}

// terminated describes how a process ended, in the kubelet's terms: exit code 128+n for a
// signal, reason Completed for 0 and Error otherwise.
func terminated(ps *os.ProcessState, waitErr error, started, finished time.Time) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished)}
	if ps == nil {
		t.ExitCode, t.Reason, t.Message = 128, "Error", fmt.Sprint(waitErr)
		return t
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.ExitCode, t.Signal = 128+int32(ws.Signal()), int32(ws.Signal())
		t.Message = "killed by " + ws.Signal().String()
	} else {
		t.ExitCode = int32(ps.ExitCode())
	}
	t.Reason = "Error"
	if t.ExitCode == 0 {
		t.Reason = "Completed"
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		t.Message = waitErr.Error()
	}
	return t
}

// writeMarker writes one line of the agent's own into a container's log, so that a log read
// after a failure shows where each run started and how it ended.
func writeMarker(f *os.File, line string) {
	_, _ = fmt.Fprintf(f, "--- e2e-agent %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), line) // best effort: a log line
}
