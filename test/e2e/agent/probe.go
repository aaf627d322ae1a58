//go:build e2e

package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeHTTP is the client of HTTP probes. Like the kubelet's, it opens a new connection per probe,
// so a probe also tests that the process accepts connections.
var probeHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// probeOnce runs one probe against a container of the pod at podIP; nil means success.
func probeOnce(ctx context.Context, p *corev1.Probe, c *corev1.Container, podIP netip.Addr) error {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		return probeHTTPGet(ctx, p.HTTPGet, c, podIP)
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP.String()
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("tcp probe: %w", err)
		}
		_ = conn.Close() // the connection was the probe
		return nil
	}
	return fmt.Errorf("container %s: only httpGet and tcpSocket probes are supported by the e2e agent", c.Name)
}

func probeHTTPGet(ctx context.Context, g *corev1.HTTPGetAction, c *corev1.Container, podIP netip.Addr) error {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = podIP.String()
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + g.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("http probe %s: %w", url, err)
	}
	req.Header.Set("User-Agent", "e2e-node-agent-probe")
	for _, h := range g.HTTPHeaders {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := probeHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // body drained below; a close error changes nothing
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http probe %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// resolvePort turns a probe's port, a number or a container port's name, into a number.
func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

// prober runs one probe of a running container on its schedule and turns results into a state
// with the probe's thresholds, as the kubelet's probe workers do.
type prober struct {
	probe     *corev1.Probe
	container *corev1.Container
	podIP     netip.Addr
}

// run probes until ctx ends or stop returns true. onResult receives every change of the
// thresholded result (true: success), and the last error when it turns to failure. The first
// probe comes after initialDelaySeconds, or within a second of the start when there is none (the
// kubelet's first probe lands at a random point of the first period); then one every period.
func (p prober) run(ctx context.Context, onResult func(ok bool, lastErr error) (stop bool)) {
	period := time.Duration(max(p.probe.PeriodSeconds, 1)) * time.Second
	first := min(time.Second, period)
	if p.probe.InitialDelaySeconds > 0 {
		first = time.Duration(p.probe.InitialDelaySeconds) * time.Second
	}
	successNeeded, failuresNeeded := max(p.probe.SuccessThreshold, 1), max(p.probe.FailureThreshold, 1)
	timer := time.NewTimer(first)
	defer timer.Stop()
	var successes, failures int32
	var state *bool // nil until the thresholds first decide
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := probeOnce(ctx, p.probe, p.container, p.podIP)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		switch {
		case successes >= successNeeded && (state == nil || !*state):
			state = new(true)
			if onResult(true, nil) {
				return
			}
		case failures >= failuresNeeded && (state == nil || *state):
			state = new(false)
			if onResult(false, err) {
				return
			}
		}
		timer.Reset(period)
	}
}
