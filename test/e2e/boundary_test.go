//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTrustBoundaryIsInPlace checks what the node agent does not enforce: the NetworkPolicy the
// operator made for the sample cluster, admitting each port only its callers, and the pods'
// configuration: four named ports (RESP's included), the probes on the ops port, the token mounted and required.
func TestTrustBoundaryIsInPlace(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	n.waitMembership(pods)

	var policy struct {
		Spec struct {
			PolicyTypes []string `json:"policyTypes"`
			Ingress     []struct {
				Ports []struct{ Port int } `json:"ports"`
				From  []json.RawMessage    `json:"from"`
			} `json:"ingress"`
			Egress []struct {
				Ports []struct {
					Port     int
					Protocol string
				} `json:"ports"`
				To []struct {
					IPBlock *struct{ CIDR string } `json:"ipBlock"`
				} `json:"to"`
			} `json:"egress"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(n.run("get", "networkpolicy", "example", "-o", "json")), &policy); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(policy.Spec.PolicyTypes, []string{"Ingress", "Egress"}) {
		t.Errorf("policy types %v, want Ingress and Egress", policy.Spec.PolicyTypes)
	}
	var ingressPorts []int
	for _, rule := range policy.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("an ingress rule with no from admits everyone: %+v", rule)
		}
		for _, p := range rule.Ports {
			ingressPorts = append(ingressPorts, p.Port)
		}
	}
	slices.Sort(ingressPorts)
	if !slices.Equal(ingressPorts, []int{6379, 8080, 8090, 9090}) {
		t.Errorf("ingress ports %v, want the client ports 8080 and 6379 (RESP), 8090 and 9090", ingressPorts)
	}
	// The pods renew their home leases (spec.replication.homeLeaseSeconds, on by default): the
	// API server, at the address and port of the default/kubernetes endpoints, and nothing else
	// on its port.
	api := strings.Fields(n.run("get", "endpoints", "kubernetes", "--namespace", "default", "-o",
		`jsonpath={.subsets[0].addresses[0].ip} {.subsets[0].ports[0].port}`))
	if len(api) != 2 {
		t.Fatalf("the default/kubernetes endpoints: %q", api)
	}
	var egress []string
	for _, rule := range policy.Spec.Egress {
		for _, p := range rule.Ports {
			egress = append(egress, p.Protocol+"/"+strconv.Itoa(p.Port))
			if strconv.Itoa(p.Port) == api[1] && (len(rule.To) != 1 || rule.To[0].IPBlock == nil || rule.To[0].IPBlock.CIDR != api[0]+"/32") {
				t.Errorf("egress to the API server's port %s goes to %+v, want %s/32 alone", api[1], rule.To, api[0])
			}
		}
	}
	slices.Sort(egress)
	want := []string{"TCP/53", "TCP/8090", "TCP/" + api[1], "UDP/53"}
	slices.Sort(want)
	if !slices.Equal(egress, want) {
		t.Errorf("egress %v, want %v: the peers' internal port, DNS and the API server", egress, want)
	}

	ports := n.jsonpath("statefulset/example", `{range .spec.template.spec.containers[0].ports[*]}{.name}={.containerPort} {end}`)
	if ports != "http=8080 internal=8090 ops=9090 resp=6379 " {
		t.Errorf("container ports %q", ports)
	}
	probes := n.jsonpath("statefulset/example", `{.spec.template.spec.containers[0].readinessProbe.httpGet.port} `+
		`{.spec.template.spec.containers[0].livenessProbe.httpGet.port} {.spec.template.spec.containers[0].startupProbe.httpGet.port}`)
	if probes != "ops ops ops" {
		t.Errorf("probes on ports %q, want ops for all three", probes)
	}
	if args := n.jsonpath("statefulset/example", `{.spec.template.spec.containers[0].args}`); !strings.Contains(args, "--internal-token-file") {
		t.Errorf("the data plane is not given the token file: args %s", args)
	}
	for _, pod := range pods {
		stranger := n.internalAPI(pod)
		stranger.token = ""
		status, body, err := stranger.call(http.MethodGet, "/internal/v1/membership", nil)
		var answer struct{ Code int }
		if err != nil || status != http.StatusUnauthorized || json.Unmarshal(body, &answer) != nil || answer.Code != 10 {
			t.Errorf("pod %s without the token: %d %s, %v; want 401 code 10", pod, status, body, err)
		}
	}
}
