// Command pause is the node's sandbox image (hack/node.sh builds it FROM scratch): the process
// that holds a pod's namespaces, waiting for SIGTERM or SIGINT, as Kubernetes' own pause does.
// Built here because the node pulls no image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the sandbox, it has no children to reap that outlive their parent: the pod's
	// containers have namespaces of their own for PIDs unless shareProcessNamespace is set, which
	// the node's pods do not set.
	<-stop
}
