//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/bloomery/bloomery/internal/await"
)

// valuesReachEveryPod adds values through each pod's address and reads them through every pod:
// whichever pod an application lands on, it sees what was added through another (TestSamplesBecomeReady's cluster).
func valuesReachEveryPod(t *testing.T, n namespace, pods []string) {
	t.Helper()
	apis := n.apis(pods...)
	var added []string
	for i, api := range apis {
		next := apis[(i+1)%len(apis)]
		alice, bob, carol := api.pod+"-alice", api.pod+"-bob", api.pod+"-carol"
		if api.checkAndSet("users", alice) {
			t.Errorf("check-and-set of a new value through pod %s answered true", api.pod)
		}
		if !api.checkAndSet("users", alice) {
			t.Errorf("check-and-set through pod %s of a value just added through it answered false", api.pod)
		}
		// Check-and-set is decided by the filter's home pod, whichever pod receives it.
		if !next.checkAndSet("users", alice) {
			t.Errorf("check-and-set through pod %s of a value just added through pod %s answered false", next.pod, api.pod)
		}
		if got := api.multiCheckAndSet("users", []string{bob, bob, carol}); !slices.Equal(got, []bool{false, true, false}) {
			t.Errorf("multi-check-and-set [bob bob carol] through pod %s = %v, want [false true false]", api.pod, got)
		}
		if got := next.multiCheckAndSet("users", []string{carol, next.pod + "-dave"}); !slices.Equal(got, []bool{true, false}) {
			t.Errorf("multi-check-and-set through pod %s of [a value added through pod %s, a new one] = %v, want [true false]", next.pod, api.pod, got)
		}
		added = append(added, alice, bob, carol, next.pod+"-dave")
	}
	// The default write consistency is a quorum: a quorum read sees every value at once through
	// every pod; each pod's own copy, which the default read answers from, has them shortly after.
	requireEverywhere(t, "users", added, apis)

	// A write with ?consistency=all is on every pod once acknowledged: every pod's own copy has it.
	for _, api := range apis {
		values := newValues(api.pod+"-everywhere", 50)
		var present []bool
		api.post("users", "multi-check-and-set?consistency=all", map[string]any{"values": values}, &present)
		if slices.Contains(present, true) {
			t.Errorf("multi-check-and-set?consistency=all of new values through pod %s answered %v", api.pod, present)
		}
		for _, other := range apis {
			other.requirePresent("users", "", values)
		}
		added = append(added, values...)
	}
	// A value never added is absent everywhere, even when every pod is asked.
	for _, api := range apis {
		var present []bool
		api.post("users", "multi-check?consistency=all", map[string]any{"values": []string{"never-added"}}, &present)
		if !slices.Equal(present, []bool{false}) {
			t.Errorf("multi-check?consistency=all of a value never added through pod %s = %v", api.pod, present)
		}
	}
	// The operator reads the items back from the pods on its next pass.
	await.Until(t, waitTimeout, fmt.Sprintf("the ITEMS column shows the %d values added", len(added)), func() (bool, string) {
		out := n.run("get", "bloomfilter", "users")
		rows := parseTables(out)[0].rows
		return len(rows) == 1 && rows[0]["ITEMS"] == fmt.Sprint(len(added)), out
	})
}

// concurrentCheckAndSet sends check-and-sets of the same new values through every pod at once,
// to a filter created through the REST API rather than by a BloomFilter: of the pods' answers for
// one value, exactly one is false, since every check-and-set of the filter is decided by its home
// pod (docs/replication.md, "The home pod").
func concurrentCheckAndSet(t *testing.T, n namespace, pods []string) {
	t.Helper()
	apis := n.apis(pods...)
	status, body, err := apis[0].call(http.MethodPut, "/v1/bloomfilter/race?consistency=all", map[string]any{"expectedInsertions": 100000, "fpp": 0.001})
	if err != nil || status != http.StatusCreated {
		t.Fatalf("PUT /v1/bloomfilter/race?consistency=all through pod %s: %d %s %v", apis[0].pod, status, body, err)
	}
	for _, api := range apis {
		if status, f := api.filter("race"); status != http.StatusOK {
			t.Errorf("GET race on pod %s after its creation through pod %s: %d %v", api.pod, apis[0].pod, status, f)
		}
	}

	single := newValues("single", 200)
	answers := race(t, apis, func(api podAPI) ([]bool, error) {
		out := make([]bool, len(single))
		for i, v := range single {
			if err := api.decode(api.call(http.MethodPost, "/v1/bloomfilter/race/check-and-set", map[string]any{"value": v}))(&out[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
	requireOneFalseEach(t, "check-and-set", single, answers)

	multi := newValues("multi", 500)
	answers = race(t, apis, func(api podAPI) ([]bool, error) {
		var present []bool
		if err := api.decode(api.call(http.MethodPost, "/v1/bloomfilter/race/multi-check-and-set", map[string]any{"values": multi}))(&present); err != nil {
			return nil, err
		}
		if len(present) != len(multi) {
			return nil, fmt.Errorf("pod %s answered %d booleans for %d values", api.pod, len(present), len(multi))
		}
		return present, nil
	})
	requireOneFalseEach(t, "multi-check-and-set", multi, answers)

	requireEverywhere(t, "race", append(single, multi...), apis)
}

// race runs send for every pod at once and returns each pod's answers, one per value.
func race(t *testing.T, apis []podAPI, send func(podAPI) ([]bool, error)) [][]bool {
	t.Helper()
	answers := make([][]bool, len(apis))
	errs := make([]error, len(apis))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, api := range apis {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = send(api)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return answers
}

// requireOneFalseEach checks that, for each value, exactly one pod answered false (new).
func requireOneFalseEach(t *testing.T, what string, values []string, answers [][]bool) {
	t.Helper()
	wrong := 0
	for i, v := range values {
		var got []bool
		falses := 0
		for _, pod := range answers {
			got = append(got, pod[i])
			if !pod[i] {
				falses++
			}
		}
		if falses != 1 {
			if wrong < 5 {
				t.Errorf("concurrent %s of %q through %d pods answered %v: %d false, want exactly 1", what, v, len(answers), got, falses)
			}
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("concurrent %s: %d of %d values did not get exactly one false", what, wrong, len(values))
	} else {
		t.Logf("concurrent %s of %d values through %d pods: exactly one false for each", what, len(values), len(answers))
	}
}

// decode turns call's results into a decoder of a 200 answer's JSON, or the error.
func (p podAPI) decode(status int, data []byte, err error) func(out any) error {
	return func(out any) error {
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("pod %s: status %d: %s", p.pod, status, data)
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("pod %s: answer %q: %w", p.pod, data, err)
		}
		return nil
	}
}

// newValues returns n new values named prefix-i.
func newValues(prefix string, n int) []string {
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return values
}
