//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bloomery/bloomery/test/e2e/agent"
	"github.com/bloomery/bloomery/test/e2e/serviceproxy"
)

const (
	nodeName = "e2e-node"
	// imageEntrypoint is the bloomery image's ENTRYPOINT (see the Dockerfile).
	imageEntrypoint = "/bloomery"
)

// runningAgent is the node agent running in the test process.
type runningAgent struct {
	*agent.Agent
	stop func() error
}

// startAgent runs the node agent until stop is called. Pods run binary with addresses of pods;
// everything the agent writes goes under workDir/node.
func startAgent(config *rest.Config, binary string, pods netip.Prefix, workDir string) (*runningAgent, error) {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("node agent client: %w", err)
	}
	root := filepath.Join(workDir, "node")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("node agent directory: %w", err)
	}
	logFile, err := os.Create(filepath.Join(workDir, "node-agent.log"))
	if err != nil {
		return nil, fmt.Errorf("node agent log: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := agent.New(agent.Config{
		Client:    client,
		API:       config,
		NodeName:  nodeName,
		Images:    agent.Images{Executable: binary, Entrypoint: imageEntrypoint},
		RootDir:   root,
		Addresses: pods,
		// The data plane listens on all interfaces by default: on the host, each pod must keep
		// to its own address, or the second pod's port 8080 would be taken.
		ExtraArgs: func(ip netip.Addr) []string { return []string{"--bind-address", ip.String()} },
		Logger:    logger,
	})
	if err != nil {
		_ = logFile.Close() // nothing written yet
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := a.Run(ctx)
		if err != nil {
			logger.Error("Node agent stopped", "err", err)
		}
		done <- err
	}()
	return &runningAgent{Agent: a, stop: func() error {
		cancel()
		err := <-done
		return errors.Join(err, logFile.Close())
	}}, nil
}

// runningProxy is the service proxy running in the test process.
type runningProxy struct {
	*serviceproxy.Proxy
	stop func() error
}

// startProxy runs the service proxy until stop is called, logging to workDir/service-proxy.log.
func startProxy(config *rest.Config, workDir string) (*runningProxy, error) {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("service proxy client: %w", err)
	}
	logFile, err := os.Create(filepath.Join(workDir, "service-proxy.log"))
	if err != nil {
		return nil, fmt.Errorf("service proxy log: %w", err)
	}
	p := serviceproxy.New(client, slog.New(slog.NewTextHandler(logFile, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return &runningProxy{Proxy: p, stop: func() error {
		cancel()
		err := <-done
		return errors.Join(err, logFile.Close())
	}}, nil
}
