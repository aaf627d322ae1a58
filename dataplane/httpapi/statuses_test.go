package httpapi_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

// names lists the filters of an answer of FilterStatusesPath, in its order.
func names(st wire.FilterStatuses) []string {
	out := make([]string, len(st.Filters))
	for i, f := range st.Filters {
		out[i] = f.Name
	}
	return out
}

// The statuses of every filter come in one answer, sorted, with counts; the version moves with a
// create or a delete and not with writes.
func TestFilterStatusesListEveryFilter(t *testing.T) {
	ts := dataplane.Start(t, nil)
	operator := ts.Internal.Client
	empty, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil || len(empty.Filters) != 0 || empty.Version == "" {
		t.Fatalf("an empty pod: %+v, %v; want no filters and a version", empty, err)
	}
	for _, name := range []string{"b", "a"} {
		dataplane.Create(t, ts, name, client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	}
	two, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil || !slices.Equal(names(two), []string{"a", "b"}) || two.Version == empty.Version {
		t.Fatalf("after two creates: %v (version %q, before %q), %v", names(two), two.Version, empty.Version, err)
	}
	if err := ts.Client.MultiSet(t.Context(), "a", []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	written, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil || written.Version != two.Version || written.Filters[0].Items != 2 {
		t.Errorf("after two sets: version %q (before %q), items of a %d, %v; want the same version and 2 items",
			written.Version, two.Version, written.Filters[0].Items, err)
	}
	if err := ts.Client.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	one, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil || !slices.Equal(names(one), []string{"a"}) || one.Version == two.Version {
		t.Errorf("after a delete: %v (version %q, before %q), %v", names(one), one.Version, two.Version, err)
	}
}

// A long poll with the pod's version answers only once the filters change, even past the request
// timeout that bounds every other request; with an older version it answers at once.
func TestFilterStatusesLongPollAnswersTheChange(t *testing.T) {
	ts := dataplane.Start(t, func(cfg *config.Config) { cfg.RequestTimeout = time.Second })
	operator := ts.Internal.Client
	before, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		st  wire.FilterStatuses
		err error
	}
	polled := make(chan answer, 1)
	go func() {
		// On a connection of its own: the client would send a GET again on a new connection if
		// the server closed a reused one, which would hide a poll cut at the server's deadline.
		once := client.New(ts.Internal.URL, client.Internal(dataplane.Token),
			client.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}))
		st, err := once.FilterStatuses(t.Context(), before.Version, 30*time.Second)
		polled <- answer{st, err}
	}()
	// Past the request timeout, so that the poll outlives the server's deadlines, then a create.
	time.Sleep(1500 * time.Millisecond)
	dataplane.Create(t, ts, "new", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	got := <-polled
	if got.err != nil || !slices.Equal(names(got.st), []string{"new"}) || got.st.Version == before.Version {
		t.Fatalf("the long poll answered %v (version %q, held %q), %v; want the new filter", names(got.st), got.st.Version, before.Version, got.err)
	}
	if st, err := operator.FilterStatuses(t.Context(), before.Version, 30*time.Second); err != nil || st.Version != got.st.Version {
		t.Errorf("a poll with an old version: %q, %v; want %q at once", st.Version, err, got.st.Version)
	}
}

// A long poll whose version stays answers when its wait is over, with the same version.
func TestFilterStatusesLongPollEndsWithItsWait(t *testing.T) {
	ts := dataplane.Start(t, nil)
	operator := ts.Internal.Client
	before, err := operator.FilterStatuses(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := operator.FilterStatuses(t.Context(), before.Version, time.Second)
	if err != nil || st.Version != before.Version {
		t.Errorf("after its wait: version %q, %v; want %q", st.Version, err, before.Version)
	}
}

// A wait outside 0 to wire.MaxStatusesWait whole seconds is refused with the reason.
func TestFilterStatusesRefuseABadWait(t *testing.T) {
	ts := dataplane.Start(t, nil)
	for _, wait := range []string{"-1", "61", "1.5", "soon"} {
		r := ts.Internal.Send(t, http.MethodGet, wire.FilterStatusesPath+"?wait="+wait, "")
		r.WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
	}
}
