package node

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// The scenarios run in this order when the package runs whole; each sets up what it needs.

// TestHelmInstallRunsTheOperator installs the chart with the image imported into the node and
// checks the operator's Deployment as a user would: rolled out, its pod scheduled on the node
// and run by containerd.
func TestHelmInstallRunsTheOperator(t *testing.T) {
	c := installed(t)
	out := c.kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/bloomery-operator", "--timeout=2m")
	if !strings.Contains(out, "successfully rolled out") {
		t.Errorf("rollout status: %s", out)
	}
	pod := c.kubectl(t, "-n", systemNamespace, "get", "pods", "-l", "app.kubernetes.io/component=operator",
		"-o", `jsonpath={range .items[*]}{.spec.nodeName} {.spec.containers[0].image} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].ready}{"\n"}{end}`)
	fields := strings.Fields(pod)
	if len(fields) != 4 {
		t.Fatalf("the operator's pods: %q, want one", pod)
	}
	if fields[0] != nodeName || fields[1] != image || !strings.HasPrefix(fields[2], "containerd://") || fields[3] != "true" {
		t.Errorf("the operator's pod: node %s, image %s, container %s, ready %s; want %s, %s, a containerd container, true",
			fields[0], fields[1], fields[2], fields[3], nodeName, image)
	}
}

// columns runs kubectl get and answers its one row by column name.
func columns(t *testing.T, c *cluster, args ...string) map[string]string {
	t.Helper()
	lines := strings.Split(c.kubectl(t, append([]string{"get"}, args...)...), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get %s: %q, want a header and one row", strings.Join(args, " "), lines)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	got := map[string]string{}
	for i, h := range header {
		if i < len(row) {
			got[h] = row[i]
		}
	}
	return got
}

// TestBloomClusterOfThreeOnVolumes applies the samples and checks what kubectl shows: three
// ready replicas, each pod's claim bound to a local volume, and the pods run by the kubelet as
// the image's non-root user with a read-only root file system.
func TestBloomClusterOfThreeOnVolumes(t *testing.T) {
	c := withSample(t)
	bc := columns(t, c, "-n", appNamespace, "bloomclusters", clusterName)
	if bc["REPLICAS"] != "3" || bc["READY"] != "3" || bc["STATUS"] != "AllReplicasReady" || bc["FILTERS"] != "1" {
		t.Errorf("kubectl get bloomclusters: %v; want REPLICAS 3, READY 3, FILTERS 1, STATUS AllReplicasReady", bc)
	}
	bf := columns(t, c, "-n", appNamespace, "bloomfilters", filterName)
	if bf["READY"] != "True" || bf["CLUSTER"] != clusterName {
		t.Errorf("kubectl get bloomfilters: %v; want READY True on %s", bf, clusterName)
	}
	claims := c.kubectl(t, "-n", appNamespace, "get", "pvc", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.volumeName}{"\n"}{end}`)
	bound := 0
	for line := range strings.Lines(claims) {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "Bound" && strings.HasPrefix(f[2], "local-pv") {
			bound++
		} else {
			t.Errorf("claim %q: want Bound to a local volume", line)
		}
	}
	if bound != 3 {
		t.Errorf("%d claims bound, want 3:\n%s", bound, claims)
	}
	for i := range 3 {
		pod := fmt.Sprintf("%s-%d", clusterName, i)
		pid := containerPID(t, c, appNamespace, pod)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "\nUid:\t65532\t65532\t65532\t65532\n") {
			t.Errorf("%s's process does not run as uid 65532:\n%s", pod, status)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", pid))
		if err != nil {
			t.Fatal(err)
		}
		if root := rootMount(string(mounts)); !strings.HasPrefix(root, "ro") {
			t.Errorf("%s's root file system is mounted %q, want read-only", pod, root)
		}
	}
}

// rootMount returns the options of the last mount on / in a /proc/PID/mounts.
func rootMount(mounts string) string {
	opts := ""
	for line := range strings.Lines(mounts) {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "/" {
			opts = f[3]
		}
	}
	return opts
}

// containerPID returns the host's pid of the first container of a pod, from containerd.
func containerPID(t *testing.T, c *cluster, namespace, pod string) int {
	t.Helper()
	id := c.kubectl(t, "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	id = strings.TrimPrefix(id, "containerd://")
	for line := range strings.Lines(c.ctr(t, "tasks", "ls")) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("no running task of %s's container %q in containerd", pod, id)
	return 0
}

// TestServiceTrafficThroughKubeProxy calls the filter over REST and RESP at the client Service's
// ClusterIP, which only kube-proxy's rules send to a pod.
func TestServiceTrafficThroughKubeProxy(t *testing.T) {
	c := withSample(t)
	ip := c.serviceIP(t, appNamespace, clusterName)
	rules, err := c.run(t, "iptables", "-t", "nat", "-S", "KUBE-SERVICES")
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"8080", "6379"} {
		if !strings.Contains(rules, ip+"/32") || !strings.Contains(rules, "--dport "+port) {
			t.Errorf("kube-proxy has no rule for %s:%s:\n%s", ip, port, rules)
		}
	}
	api := c.bloomery(ip + ":8080")
	ctx := t.Context()
	value := fmt.Sprintf("alice-%d", time.Now().UnixNano())
	if seen, err := api.CheckAndSet(ctx, filterName, value); err != nil || seen {
		t.Fatalf("REST check-and-set of a new value: %v, %v; want false", seen, err)
	}
	if seen, err := api.Check(ctx, filterName, value); err != nil || !seen {
		t.Errorf("REST check of the value set: %v, %v; want true", seen, err)
	}
	resp := ip + ":6379"
	if got, err := c.resp(ctx, resp, "BF.EXISTS", filterName, value); err != nil || got != ":1" {
		t.Errorf("RESP BF.EXISTS of the value set over REST: %q, %v; want :1", got, err)
	}
	other := value + "-resp"
	if got, err := c.resp(ctx, resp, "BF.ADD", filterName, other); err != nil || got != ":1" {
		t.Errorf("RESP BF.ADD of a new value: %q, %v; want :1", got, err)
	}
	if seen, err := api.Check(ctx, filterName, other); err != nil || !seen {
		t.Errorf("REST check of the value added over RESP: %v, %v; want true", seen, err)
	}
}

// TestKubeletRestartsAKilledContainer kills a data-plane pod's process under a writer and
// watches the kubelet restart its container, its probes mark it ready again, and nothing
// acknowledged go missing.
func TestKubeletRestartsAKilledContainer(t *testing.T) {
	c := withSample(t)
	pod := clusterName + "-1"
	restarts := func() int {
		n, err := strconv.Atoi(c.kubectl(t, "-n", appNamespace, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := restarts()
	w := startWriter(t, c.bloomery(c.serviceIP(t, appNamespace, clusterName)+":8080"), filterName)
	await.True(t, time.Minute, "the writer's first acknowledged adds", func() bool { return w.acknowledged() >= 20 })
	pid := containerPID(t, c, appNamespace, pod)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	sawUnready := false
	await.Until(t, 3*time.Minute, pod+" restarted and ready", func() (bool, string) {
		state := c.kubectl(t, "-n", appNamespace, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}")
		f := strings.Fields(state)
		if len(f) == 2 && f[1] == "false" {
			sawUnready = true
		}
		return len(f) == 2 && f[0] == strconv.Itoa(before+1) && f[1] == "true", state
	})
	t.Logf("%s: restarted by the kubelet and ready %v after the kill (seen unready in between: %v)", pod, time.Since(killed).Round(100*time.Millisecond), sawUnready)
	acked := w.acknowledged()
	await.True(t, time.Minute, "adds acknowledged after the restart", func() bool { return w.acknowledged() >= acked+20 })
	w.stopAndCheck(t)
	bc := columns(t, c, "-n", appNamespace, "bloomclusters", clusterName)
	if bc["READY"] != "3" {
		t.Errorf("kubectl get bloomclusters after the restart: %v; want READY 3", bc)
	}
}

// TestReadinessProbeTakesAFrozenPodOutAndBack freezes a data-plane pod's process (SIGSTOP) under
// a writer: the process still exists, so only the kubelet's probes can tell. The readiness probe
// marks the pod unready and its address leaves the Service's ready endpoints; once the process
// runs again (SIGCONT) the probe marks it ready and it is back, without a restart, and nothing
// acknowledged is lost.
func TestReadinessProbeTakesAFrozenPodOutAndBack(t *testing.T) {
	c := withSample(t)
	pod := clusterName + "-2"
	state := func() (restarts, ready string) {
		f := strings.Fields(c.kubectl(t, "-n", appNamespace, "get", "pod", pod, "-o",
			"jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}"))
		if len(f) != 2 {
			t.Fatalf("%s's container status: %q", pod, f)
		}
		return f[0], f[1]
	}
	podIP := c.kubectl(t, "-n", appNamespace, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
	inService := func() (bool, string) {
		ready := c.kubectl(t, "-n", appNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name="+clusterName, "-o",
			`jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{" "}{end}`)
		return slices.Contains(strings.Fields(ready), podIP), "ready endpoints: " + ready
	}
	await.Until(t, 2*time.Minute, pod+" ready and in the Service", func() (bool, string) {
		in, detail := inService()
		_, ready := state()
		return in && ready == "true", detail + ", ready " + ready
	})
	before, _ := state()
	w := startWriter(t, c.bloomery(c.serviceIP(t, appNamespace, clusterName)+":8080"), filterName)
	await.True(t, time.Minute, "the writer's first acknowledged adds", func() bool { return w.acknowledged() >= 20 })
	pid := containerPID(t, c, appNamespace, pod)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	t.Cleanup(func() {
		if !continued {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	frozen := time.Now()
	await.Until(t, 2*time.Minute, pod+" unready, its container not restarted", func() (bool, string) {
		restarts, ready := state()
		return ready == "false" && restarts == before, "restarts " + restarts + ", ready " + ready
	})
	t.Logf("%s: unready %v after the freeze", pod, time.Since(frozen).Round(100*time.Millisecond))
	await.Until(t, time.Minute, pod+"'s address out of the Service's ready endpoints", func() (bool, string) {
		in, detail := inService()
		return !in, detail
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	continued = true
	thawed := time.Now()
	await.Until(t, 2*time.Minute, pod+" ready again and back in the Service", func() (bool, string) {
		in, detail := inService()
		_, ready := state()
		return in && ready == "true", detail + ", ready " + ready
	})
	t.Logf("%s: ready and in the Service %v after it ran again", pod, time.Since(thawed).Round(100*time.Millisecond))
	if restarts, _ := state(); restarts != before {
		t.Errorf("%s restarted (%s restarts, %s before): the readiness probe alone was to act", pod, restarts, before)
	}
	events := c.kubectl(t, "-n", appNamespace, "get", "events", "--field-selector", "involvedObject.name="+pod+",reason=Unhealthy", "-o", "jsonpath={.items[*].message}")
	if !strings.Contains(events, "Readiness probe failed") {
		t.Errorf("%s has no event of a failed readiness probe: %q", pod, events)
	}
	acked := w.acknowledged()
	await.True(t, time.Minute, "adds acknowledged after the pod came back", func() bool { return w.acknowledged() >= acked+20 })
	w.stopAndCheck(t)
}

// TestRollingUpdateUnderAWriter upgrades the release to a second tag of the image under a writer:
// the operator rolls the data plane's StatefulSet pod by pod, kubectl rollout status sees it
// complete, and nothing acknowledged is lost.
func TestRollingUpdateUnderAWriter(t *testing.T) {
	c := withSample(t)
	second := imageRepository() + ":" + imageTag() + "-rollout"
	c.ctr(t, "images", "tag", "--force", image, second)
	w := startWriter(t, c.bloomery(c.serviceIP(t, appNamespace, clusterName)+":8080"), filterName)
	await.True(t, time.Minute, "the writer's first acknowledged adds", func() bool { return w.acknowledged() >= 20 })
	start := time.Now()
	c.helm(t, "upgrade", release, repoRoot+"/charts/bloomery", "--namespace", systemNamespace, "--reuse-values",
		"--set", "image.tag="+imageTag()+"-rollout", "--wait", "--timeout", "3m")
	await.Until(t, 2*time.Minute, "the StatefulSet on the second tag", func() (bool, string) {
		got := c.kubectl(t, "-n", appNamespace, "get", "statefulset", clusterName, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		return got == second, got
	})
	out := c.kubectl(t, "-n", appNamespace, "rollout", "status", "statefulset/"+clusterName, "--timeout=5m")
	if !strings.Contains(out, "roll out complete") {
		t.Errorf("rollout status: %s", out)
	}
	t.Logf("rolled to %s in %v", second, time.Since(start).Round(100*time.Millisecond))
	images := c.kubectl(t, "-n", appNamespace, "get", "pods", "-o", `jsonpath={range .items[*]}{.spec.containers[0].image}{"\n"}{end}`)
	if strings.Count(images, second) != 3 {
		t.Errorf("the pods' images after the rollout:\n%s\nwant %s three times", images, second)
	}
	w.stopAndCheck(t)
	await.Until(t, 2*time.Minute, "the BloomCluster ready after the rollout", func() (bool, string) {
		bc := columns(t, c, "-n", appNamespace, "bloomclusters", clusterName)
		return bc["READY"] == "3" && bc["STATUS"] == "AllReplicasReady", fmt.Sprint(bc)
	})
}

// TestCheckAndSetRateServiceVersusPod measures, in the same run, the check-and-set rate through
// the client Service's ClusterIP (kube-proxy's iptables rules, masquerading included) and
// straight to one pod, and logs both (docs/performance.md); what it asserts is that every
// check-and-set of a new value answered false on both paths.
func TestCheckAndSetRateServiceVersusPod(t *testing.T) {
	c := withSample(t)
	podIP := c.kubectl(t, "-n", appNamespace, "get", "pod", clusterName+"-0", "-o", "jsonpath={.status.podIP}")
	paths := []struct{ name, addr string }{
		{"ClusterIP Service", c.serviceIP(t, appNamespace, clusterName) + ":8080"},
		{"pod " + clusterName + "-0", podIP + ":8080"},
	}
	const workers, period = 8, 5 * time.Second
	for _, p := range paths {
		api := c.bloomery(p.addr)
		var mu sync.Mutex
		done, wrong := 0, 0
		var wg sync.WaitGroup
		deadline := time.Now().Add(period)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					seen, err := api.CheckAndSet(t.Context(), filterName, fmt.Sprintf("rate-%s-%d-%d-%d", p.name, start.UnixNano(), w, i))
					mu.Lock()
					if err != nil || seen {
						wrong++
						if wrong <= 5 {
							t.Errorf("%s: check-and-set of a new value: %v, %v; want false", p.name, seen, err)
						}
					} else {
						done++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		t.Logf("%s: %d check-and-sets in %v by %d clients: %.0f/s", p.name, done, elapsed.Round(time.Millisecond), workers, float64(done)/elapsed.Seconds())
		if done == 0 {
			t.Errorf("%s: no check-and-set answered", p.name)
		}
	}
}

// TestHelmUninstall uninstalls the release: the operator goes, the CRDs stay (crds.keep), and
// with them the user's BloomCluster.
func TestHelmUninstall(t *testing.T) {
	c := installed(t)
	c.helm(t, "uninstall", release, "--namespace", systemNamespace, "--wait")
	if out := c.helm(t, "list", "--all-namespaces", "--short"); out != "" {
		t.Errorf("helm list after the uninstall: %q", out)
	}
	if out := c.kubectl(t, "-n", systemNamespace, "get", "deployments", "-o", "name"); out != "" {
		t.Errorf("deployments left in %s: %s", systemNamespace, out)
	}
	crds := c.kubectl(t, "get", "crds", "-o", "name")
	for _, crd := range []string{"bloomclusters.bloomery.io", "bloomfilters.bloomery.io"} {
		if !strings.Contains(crds, crd) {
			t.Errorf("CRD %s deleted by the uninstall; the chart keeps it", crd)
		}
	}
}
