package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the scenarios install, as the README tells a user to.
const (
	release         = "bloomery"
	systemNamespace = "bloomery-system" // the operator's
	appNamespace    = "demo"            // the sample BloomCluster's and BloomFilter's
	clusterName     = "example"         // config/samples' BloomCluster
	filterName      = "users"           // config/samples' BloomFilter
	nodeName        = "node1"           // hack/node.sh's, which makes local volumes local-pv0...
)

// once runs a setup step the first time a test needs it; a step that failed fails every test
// that needs it, with its error.
type once struct {
	mu   sync.Mutex
	done bool
	err  error
}

func (o *once) do(t *testing.T, what string, step func() error) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		o.done = true
		o.err = step()
	}
	if o.err != nil {
		t.Fatalf("%s: %v", what, o.err)
	}
}

var (
	installStep, sampleStep once
	// installStarted is when helm install started, for the time a user waits until the first
	// filter answers.
	installStarted time.Time
)

// imageRepository and imageTag split the image under test.
func imageRepository() string { r, _, _ := strings.Cut(image, ":"); return r }
func imageTag() string        { _, tag, _ := strings.Cut(image, ":"); return tag }

// installed installs the chart with the image under test, once, waiting for the operator.
func installed(t *testing.T) *cluster {
	t.Helper()
	c := nodeCluster(t)
	installStep.do(t, "helm install", func() error {
		installStarted = time.Now()
		_, err := c.run(t, helmPath(), "install", release, filepath.Join(repoRoot, "charts", "bloomery"),
			"--namespace", systemNamespace, "--create-namespace",
			"--set", "image.repository="+imageRepository(), "--set", "image.tag="+imageTag(),
			// The image was imported into the node; nothing may be pulled.
			"--set", "image.pullPolicy=Never",
			"--wait", "--timeout", "3m")
		if err != nil {
			return err
		}
		fmt.Printf("node: helm install --wait returned after %v\n", time.Since(installStarted).Round(100*time.Millisecond))
		return nil
	})
	return c
}

// withSample applies config/samples (a BloomCluster of three with RESP, a BloomFilter), once,
// as the README does, waits for both to be Ready and for the filter to answer through the
// client Service, and records how long a user waited since helm install.
func withSample(t *testing.T) *cluster {
	t.Helper()
	c := installed(t)
	sampleStep.do(t, "the sample BloomCluster and BloomFilter", func() error {
		if _, err := c.run(t, "kubectl", "create", "namespace", appNamespace); err != nil {
			return err
		}
		if _, err := c.run(t, "kubectl", "-n", appNamespace, "apply", "-k", filepath.Join(repoRoot, "config", "samples")); err != nil {
			return err
		}
		for _, obj := range []string{"bloomcluster/" + clusterName, "bloomfilter/" + filterName} {
			if _, err := c.run(t, "kubectl", "-n", appNamespace, "wait", obj, "--for=condition=Ready", "--timeout=5m"); err != nil {
				return err
			}
		}
		ip, err := c.run(t, "kubectl", "-n", appNamespace, "get", "service", clusterName, "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			return err
		}
		api := c.bloomery(ip + ":8080")
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := api.Check(t.Context(), filterName, "first")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return errors.Join(errors.New("the filter does not answer through the Service"), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Printf("node: helm install -> first filter answering through the Service: %v\n", time.Since(installStarted).Round(100*time.Millisecond))
		return nil
	})
	return c
}
