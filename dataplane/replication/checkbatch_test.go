package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
)

// heldSends is a send for a checkBatcher whose requests each wait until the test lets that one
// go; each value ending in "+" is present.
type heldSends struct {
	mu       sync.Mutex
	requests [][]string
	releases []chan struct{}
	started  chan int // the index of each request sent
	err      error
}

func newHeldSends() *heldSends { return &heldSends{started: make(chan int, 100)} }

func (h *heldSends) send(_ checkRoute, values []string) ([]bool, error) {
	h.mu.Lock()
	i, release := len(h.requests), make(chan struct{})
	h.requests = append(h.requests, slices.Clone(values))
	h.releases = append(h.releases, release)
	h.mu.Unlock()
	h.started <- i
	<-release
	h.mu.Lock()
	err := h.err
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	answers := make([]bool, len(values))
	for i, v := range values {
		answers[i] = strings.HasSuffix(v, "+")
	}
	return answers, nil
}

// next waits for the next request and lets it go.
func (h *heldSends) next() { h.let(<-h.started) }

// let lets request i go.
func (h *heldSends) let(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.releases[i])
}

func (h *heldSends) sent() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// waiting is how many checks wait for r's request under way.
func (b *checkBatcher) waiting(r checkRoute) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.busy[r]; ok {
		return len(q.waiting)
	}
	return 0
}

type checkResult struct {
	answers []bool
	err     error
}

// startCheck checks values through b in the background.
func startCheck(ctx context.Context, b *checkBatcher, r checkRoute, values ...string) <-chan checkResult {
	out := make(chan checkResult, 1)
	go func() {
		answers, err := b.check(ctx, r, values)
		out <- checkResult{answers, err}
	}()
	return out
}

var testRoute = checkRoute{peer: wire.Member{Name: "peer"}, name: "f"}

// A check that finds no request under way goes at once; the checks that arrive while one is
// under way go together in the next request, and each gets the answers of its own values.
func TestChecksThatArriveDuringARequestGoTogether(t *testing.T) {
	h := newHeldSends()
	b := newCheckBatcher(1<<20, h.send)
	first := startCheck(t.Context(), b, testRoute, "a+")
	under := <-h.started
	var later []<-chan checkResult
	for i := range 20 {
		later = append(later, startCheck(t.Context(), b, testRoute, fmt.Sprintf("v%d+", i), fmt.Sprintf("w%d", i)))
	}
	await.True(t, 10*time.Second, "20 checks waiting", func() bool { return b.waiting(testRoute) == 20 })
	h.let(under)
	if got := <-first; got.err != nil || !slices.Equal(got.answers, []bool{true}) {
		t.Fatalf("the first check: %v, %v; want [true]", got.answers, got.err)
	}
	h.next()
	for i, c := range later {
		if got := <-c; got.err != nil || !slices.Equal(got.answers, []bool{true, false}) {
			t.Errorf("check %d: %v, %v; want [true false]", i, got.answers, got.err)
		}
	}
	if sent := lens(h.sent()); !slices.Equal(sent, []int{1, 40}) {
		t.Fatalf("requests of %v values; want one of 1 and one of 40", sent)
	}
	await.True(t, 10*time.Second, "the route to be idle", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.busy) == 0
	})
	// A later check finds the route idle and goes at once.
	next := startCheck(t.Context(), b, testRoute, "z")
	h.next()
	if got := <-next; got.err != nil || !slices.Equal(got.answers, []bool{false}) {
		t.Fatalf("a check after the others: %v, %v", got.answers, got.err)
	}
}

func lens(requests [][]string) []int {
	out := make([]int, len(requests))
	for i, r := range requests {
		out[i] = len(r)
	}
	return out
}

// A request's error is the answer of every check that went in it; other routes do not wait for
// it.
func TestARequestsErrorFailsEveryCheckInIt(t *testing.T) {
	h := newHeldSends()
	b := newCheckBatcher(1<<20, h.send)
	first := startCheck(t.Context(), b, testRoute, "a")
	underF := <-h.started
	second, third := startCheck(t.Context(), b, testRoute, "b"), startCheck(t.Context(), b, testRoute, "c")
	await.True(t, 10*time.Second, "2 checks waiting", func() bool { return b.waiting(testRoute) == 2 })

	other := testRoute
	other.name = "g"
	elsewhere := startCheck(t.Context(), b, other, "d+")
	h.next() // g's request did not wait for f's
	if got := <-elsewhere; got.err != nil || !slices.Equal(got.answers, []bool{true}) {
		t.Fatalf("a check of another filter: %v, %v", got.answers, got.err)
	}

	h.let(underF)
	if got := <-first; got.err != nil {
		t.Fatal(got.err)
	}
	h.mu.Lock()
	h.err = errors.New("peer gone")
	h.mu.Unlock()
	h.next()
	for _, c := range []<-chan checkResult{second, third} {
		if got := <-c; got.err == nil || got.err.Error() != "peer gone" {
			t.Errorf("a check in a failed request: %v, %v; want its error", got.answers, got.err)
		}
	}
}

// A caller that stops waiting gets its context's error, and its values are not sent.
func TestACheckWhoseCallerHasGoneIsNotSent(t *testing.T) {
	h := newHeldSends()
	b := newCheckBatcher(1<<20, h.send)
	first := startCheck(t.Context(), b, testRoute, "a")
	under := <-h.started
	ctx, cancel := context.WithCancel(t.Context())
	gone := startCheck(ctx, b, testRoute, "gone")
	await.True(t, 10*time.Second, "a check waiting", func() bool { return b.waiting(testRoute) == 1 })
	kept := startCheck(t.Context(), b, testRoute, "kept+")
	await.True(t, 10*time.Second, "2 checks waiting", func() bool { return b.waiting(testRoute) == 2 })
	cancel()
	if got := <-gone; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("a check whose caller has gone: %v, %v; want context.Canceled", got.answers, got.err)
	}
	h.let(under)
	<-first
	h.next()
	if got := <-kept; got.err != nil || !slices.Equal(got.answers, []bool{true}) {
		t.Fatalf("the check kept: %v, %v", got.answers, got.err)
	}
	if sent := h.sent(); len(sent) != 2 || !slices.Equal(sent[1], []string{"kept+"}) {
		t.Fatalf("requests %q; want the second without the gone check's value", sent)
	}
}

// Checks go together up to maxCheckBatchValues values and maxBytes bytes; a check larger than
// either goes alone, at once, even while a request is under way.
func TestChecksGoTogetherWithinBounds(t *testing.T) {
	h := newHeldSends()
	b := newCheckBatcher(100, h.send)
	first := startCheck(t.Context(), b, testRoute, "a")
	under := <-h.started

	large := make([]string, maxCheckBatchValues)
	for i := range large {
		large[i] = "x"
	}
	alone := startCheck(t.Context(), b, testRoute, large...)
	h.next() // not queued behind the request under way
	if got := <-alone; got.err != nil || len(got.answers) != maxCheckBatchValues {
		t.Fatalf("a check of %d values: %d answers, %v", maxCheckBatchValues, len(got.answers), got.err)
	}
	bulky := startCheck(t.Context(), b, testRoute, strings.Repeat("y", 100))
	h.next()
	if got := <-bulky; got.err != nil {
		t.Fatal(got.err)
	}

	var waiting []<-chan checkResult
	for i := range 3 { // 3 × 40 bytes: two go together, the third after them
		waiting = append(waiting, startCheck(t.Context(), b, testRoute, fmt.Sprintf("%040d", i)))
		await.True(t, 10*time.Second, "the check to wait", func() bool { return b.waiting(testRoute) == i+1 })
	}
	h.let(under)
	<-first
	h.next()
	h.next()
	for _, c := range waiting {
		if got := <-c; got.err != nil {
			t.Fatal(got.err)
		}
	}
	if got := lens(h.sent()); !slices.Equal(got, []int{1, maxCheckBatchValues, 1, 2, 1}) {
		t.Fatalf("requests of %v values; want [1 %d 1 2 1]", got, maxCheckBatchValues)
	}
}

// Checks sent to a peer by many callers at once, routed to a partition's owner or asked by a read
// at consistency all, go in fewer requests than checks, each caller answered for its
// own values.
func TestChecksShareRequestsToAPeer(t *testing.T) {
	ask := map[string]func(n *Node, to wire.Member, values []string) ([]bool, error){
		"routed": func(n *Node, to wire.Member, values []string) ([]bool, error) {
			return n.ServeOn(t.Context(), to, wire.OpMultiCheck, "f", values, wire.ConsistencyOne)
		},
		"read at consistency all": func(n *Node, _ wire.Member, values []string) ([]bool, error) {
			present := make([]bool, len(values))
			return present, n.CheckPeers(t.Context(), "f", values, wire.ConsistencyAll, present)
		},
	}
	for name, ask := range ask {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int32
			net := peer.NewNetwork()
			b := joinFake(net, "b", &fakePeer{}, func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				time.Sleep(5 * time.Millisecond) // a request under way gathers the checks behind it
				var body struct{ Values []string }
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != wire.InternalPath(wire.FilterOpPath("f", wire.OpMultiCheck)) {
					http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
					return
				}
				answers := make([]bool, len(body.Values))
				for i, v := range body.Values {
					answers[i] = strings.HasSuffix(v, "+")
				}
				_ = json.NewEncoder(w).Encode(answers)
			})
			n := nodeIn(t, net, "self", Options{}, 1, b)
			const callers = 64
			var wg sync.WaitGroup
			errs := make([]error, callers)
			for i := range callers {
				wg.Go(func() {
					got, err := ask(n, b, []string{fmt.Sprintf("in%d+", i), fmt.Sprintf("out%d", i)})
					if err == nil && !slices.Equal(got, []bool{true, false}) {
						err = fmt.Errorf("answers %v, want [true false]", got)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := requests.Load(); got >= callers || n.Stats().ForwardedRequests.Load() != int64(got) {
				t.Fatalf("%d callers' checks took %d requests (%d counted); want fewer, each counted", callers, got, n.Stats().ForwardedRequests.Load())
			}
			t.Logf("%d callers' checks took %d requests", callers, requests.Load())
		})
	}
}
