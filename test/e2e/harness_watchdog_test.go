//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"
)

// watchdog tears everything down when the run is interrupted, or a minute before go test's
// -timeout, which would otherwise end the binary with a panic and leave etcd and kube-apiserver
// running (envtest starts them without a parent-death signal). It prints the goroutines first,
// as the timeout's panic would.
func (hs *harness) watchdog() (stop func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	deadline := time.NewTimer(time.Duration(math.MaxInt64))
	if f := flag.Lookup("test.timeout"); f != nil {
		if timeout, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && timeout > 2*time.Minute {
			deadline.Reset(timeout - time.Minute)
		}
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-quit:
			return
		case s := <-signals:
			fmt.Fprintf(os.Stderr, "e2e: %v: tearing down\n", s)
		case <-deadline.C:
			fmt.Fprintln(os.Stderr, "e2e: a minute before -timeout: tearing down; goroutines:")
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1) // best effort, as the panic's dump
		}
		if err := hs.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: tearing down:", err)
		}
		fmt.Fprintln(os.Stderr, "e2e: run directory kept:", hs.workDir)
		os.Exit(1)
	}()
	return func() {
		signal.Stop(signals)
		deadline.Stop()
		close(quit)
		<-done
	}
}
