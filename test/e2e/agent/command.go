//go:build e2e

package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// processSpec is what one run of a container executes.
type processSpec struct {
	path string
	args []string
	env  []string
	dir  string
}

// Images says how the agent runs images it cannot pull: every image is taken to be the bloomery
// image, whose entrypoint is Entrypoint, and runs as the local Executable.
type Images struct {
	Executable string
	Entrypoint string
}

// containerContext is what a container's process is made from besides its spec.
type containerContext struct {
	podName string
	env     []string          // resolved, in order (containerEnv)
	vars    map[string]string // the same, for $(VAR) expansion
	paths   pathMapper
	workDir string   // the pod's private directory, the default working directory
	extra   []string // arguments appended to every container's, such as the bind address
}

// containerProcess turns a container into a local process: the image's entrypoint becomes the
// executable, $(VAR) references are expanded, mount paths in arguments and environment become
// the volumes' host directories, and the extra arguments are appended.
func containerProcess(c *corev1.Container, img Images, cc containerContext) (processSpec, error) {
	command := expandAll(c.Command, cc.vars)
	args := expandAll(c.Args, cc.vars)
	if len(command) > 0 {
		if command[0] != img.Entrypoint {
			return processSpec{}, fmt.Errorf("container %s runs %q: the e2e agent runs only the image's entrypoint %s", c.Name, command[0], img.Entrypoint)
		}
		args = append(command[1:len(command):len(command)], args...)
	}
	args = append(cc.paths.all(args), cc.extra...)

	env := make([]string, 0, len(cc.env)+1)
	for _, kv := range cc.env {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, name+"="+cc.paths.path(value))
	}
	// The kubelet sets HOSTNAME to the pod's name; a process on the host must not inherit the host's.
	if _, ok := cc.vars["HOSTNAME"]; !ok {
		env = append(env, "HOSTNAME="+cc.podName)
	}

	dir := cc.workDir
	if c.WorkingDir != "" {
		dir = cc.paths.path(c.WorkingDir)
	}
	return processSpec{path: img.Executable, args: args, env: env, dir: dir}, nil
}

func expandAll(values []string, vars map[string]string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = expand(v, vars)
	}
	return out
}
