//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a long-running program of the harness (kube-controller-manager, the operator) with
// its output in a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process exited; err is then set
	err     error
}

// startProcess starts path with args and env added to the test's environment, output appended to
// logPath.
// The process gets a process group of its own, so the terminal's Ctrl-C reaches only the test,
// which stops it; and it is SIGKILLed if the test binary dies without stopping it.
func startProcess(name, logPath string, env []string, path string, args ...string) (*process, error) {
	// Appended to: a process started again (the cluster-wide operator) keeps one log.
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: creating its log: %w", name, err)
	}
	cmd := exec.Command(path, args...) //nolint:noctx // stop ends it, SIGTERM first; a context could only SIGKILL it
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close() // nothing was written
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close() // the process, its only writer, is gone
		close(p.exited)
	}()
	return p, nil
}

// running returns an error when the process has exited.
func (p *process) running() error {
	if !p.hasExited() {
		return nil
	}
	return fmt.Errorf("%s exited: %w (log: %s)", p.name, p.err, p.logPath)
}

func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, and SIGKILL after grace; it returns once the process is gone. An exit
// caused by the signal is not an error.
func (p *process) stop(grace time.Duration) error {
	if p.hasExited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only if it exited meanwhile
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill() // as above
		<-p.exited
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, grace)
	}
	var exitErr *exec.ExitError
	if p.err != nil && !(errors.As(p.err, &exitErr) && exitErr.Sys().(syscall.WaitStatus).Signaled()) {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
}
