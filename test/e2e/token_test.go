//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/bloomery/bloomery/internal/await"
)

// TestDeletedTokenSecretRotatesTheToken deletes the sample cluster's token Secret: the operator
// makes a new token, the pods roll onto it, take their membership again with it, and keep their
// values; the old token is refused from then on.
func TestDeletedTokenSecretRotatesTheToken(t *testing.T) {
	t.Parallel()
	n := newNamespace(t)
	n.applySamples()
	pods := podNames(sampleReplicas)
	values := n.api(samplePod).addValues("users", "before-rotation", 100)
	n.waitMembership(pods)
	oldToken, err := n.internalToken("example")
	if err != nil {
		t.Fatal(err)
	}
	oldUIDs := n.podUIDs()

	// The client port serves no internal endpoint, token or not.
	public := n.api(samplePod)
	public.token = oldToken
	if status, _, err := public.call(http.MethodGet, "/internal/v1/membership", nil); err != nil || status != http.StatusNotFound {
		t.Errorf("GET /internal/v1/membership on the client port: %d, %v; want 404", status, err)
	}

	n.run("delete", "secret", "example-internal-token")
	await.Until(t, waitTimeout, "a new token", func() (bool, string) {
		token, err := n.internalToken("example")
		return err == nil && token != oldToken, fmt.Sprint(err)
	})
	await.Until(t, waitTimeout, "every pod replaced", func() (bool, string) {
		uids := n.podUIDs()
		for _, pod := range pods {
			if uids[pod] == "" || uids[pod] == oldUIDs[pod] {
				return false, fmt.Sprintf("pod %s: UID %q", pod, uids[pod])
			}
		}
		return true, ""
	})
	n.run("rollout", "status", "statefulset/example", "--timeout="+waitTimeout.String())
	n.wait("condition=Ready", "bloomcluster/example", "bloomfilter/users")
	n.waitMembership(pods) // with the new token, read from the new Secret

	for _, pod := range pods {
		stale := n.internalAPI(pod)
		stale.token = oldToken
		status, body, err := stale.call(http.MethodGet, "/internal/v1/membership", nil)
		var answer struct{ Code int }
		if err != nil || status != http.StatusUnauthorized || json.Unmarshal(body, &answer) != nil || answer.Code != 10 {
			t.Errorf("pod %s with the old token: %d %s, %v; want 401 code 10", pod, status, body, err)
		}
	}
	requireEverywhere(t, "users", values, n.apis(pods...))
}
