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
	empty, err := operator.FilterStatuses(t.Context(), "", 0, false)
	if err != nil || len(empty.Filters) != 0 || empty.Version == "" {
		t.Fatalf("an empty pod: %+v, %v; want no filters and a version", empty, err)
	}
	for _, name := range []string{"b", "a"} {
		dataplane.Create(t, ts, name, client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	}
	two, err := operator.FilterStatuses(t.Context(), "", 0, false)
	if err != nil || !slices.Equal(names(two), []string{"a", "b"}) || two.Version == empty.Version {
		t.Fatalf("after two creates: %v (version %q, before %q), %v", names(two), two.Version, empty.Version, err)
	}
	if err := ts.Client.MultiSet(t.Context(), "a", []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	written, err := operator.FilterStatuses(t.Context(), "", 0, false)
	if err != nil || written.Version != two.Version || written.Filters[0].Items != 2 {
		t.Errorf("after two sets: version %q (before %q), items of a %d, %v; want the same version and 2 items",
			written.Version, two.Version, written.Filters[0].Items, err)
	}
	if err := ts.Client.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	one, err := operator.FilterStatuses(t.Context(), "", 0, false)
	if err != nil || !slices.Equal(names(one), []string{"a"}) || one.Version == two.Version {
		t.Errorf("after a delete: %v (version %q, before %q), %v", names(one), one.Version, two.Version, err)
	}
}

// A long poll with the pod's version answers only once the filters change, even past the request
// timeout that bounds every other request; with an older version it answers at once.
func TestFilterStatusesLongPollAnswersTheChange(t *testing.T) {
	ts := dataplane.Start(t, func(cfg *config.Config) { cfg.RequestTimeout = time.Second })
	operator := ts.Internal.Client
	before, err := operator.FilterStatuses(t.Context(), "", 0, false)
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
		st, err := once.FilterStatuses(t.Context(), before.Version, 30*time.Second, false)
		polled <- answer{st, err}
	}()
	// Past the request timeout, so that the poll outlives the server's deadlines, then a create.
	time.Sleep(1500 * time.Millisecond)
	dataplane.Create(t, ts, "new", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	got := <-polled
	if got.err != nil || !slices.Equal(names(got.st), []string{"new"}) || got.st.Version == before.Version {
		t.Fatalf("the long poll answered %v (version %q, held %q), %v; want the new filter", names(got.st), got.st.Version, before.Version, got.err)
	}
	if st, err := operator.FilterStatuses(t.Context(), before.Version, 30*time.Second, false); err != nil || st.Version != got.st.Version {
		t.Errorf("a poll with an old version: %q, %v; want %q at once", st.Version, err, got.st.Version)
	}
}

// A long poll whose version stays answers when its wait is over, with the same version.
func TestFilterStatusesLongPollEndsWithItsWait(t *testing.T) {
	ts := dataplane.Start(t, nil)
	operator := ts.Internal.Client
	before, err := operator.FilterStatuses(t.Context(), "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := operator.FilterStatuses(t.Context(), before.Version, time.Second, false)
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

// With changes=true an answer to a change carries what changed since the caller's version: the
// filters created or changed, and the names gone, a filter created and deleted in between too. An
// answer at the end of the wait carries every filter, for their counts.
func TestFilterStatusesAnswerWhatChanged(t *testing.T) {
	ts := dataplane.Start(t, nil)
	operator := ts.Internal.Client
	for _, name := range []string{"a", "b"} {
		dataplane.Create(t, ts, name, client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	}
	before, err := operator.FilterStatuses(t.Context(), "", 0, true)
	if err != nil || before.Changes || !slices.Equal(names(before), []string{"a", "b"}) {
		t.Fatalf("without a version: %+v, %v; want every filter", before, err)
	}
	dataplane.Create(t, ts, "c", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	dataplane.Create(t, ts, "d", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
	for _, name := range []string{"a", "d"} {
		if err := ts.Client.Delete(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.Client.MultiSet(t.Context(), "b", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	changed, err := operator.FilterStatuses(t.Context(), before.Version, 0, true)
	removed := slices.Sorted(slices.Values(changed.Removed))
	if err != nil || !changed.Changes || !slices.Equal(names(changed), []string{"c"}) || !slices.Equal(removed, []string{"a", "d"}) ||
		changed.Version == before.Version {
		t.Fatalf("since the version before: %+v, %v; want c changed, a and d removed, and a new version", changed, err)
	}
	same, err := operator.FilterStatuses(t.Context(), changed.Version, 0, true)
	if err != nil || !same.Changes || len(same.Filters) != 0 || len(same.Removed) != 0 || same.Version != changed.Version {
		t.Errorf("since the current version: %+v, %v; want no change", same, err)
	}
	waited, err := operator.FilterStatuses(t.Context(), changed.Version, time.Second, true)
	if err != nil || waited.Changes || !slices.Equal(names(waited), []string{"b", "c"}) || waited.Filters[0].Items != 1 {
		t.Errorf("at the end of the wait: %+v, %v; want every filter with its counts", waited, err)
	}
	for _, held := range []string{"another.1", "garbage", before.Version + "0"} {
		full, err := operator.FilterStatuses(t.Context(), held, 0, true)
		if err != nil || full.Changes || !slices.Equal(names(full), []string{"b", "c"}) {
			t.Errorf("since %q, a version the pod cannot answer changes since: %+v, %v; want every filter", held, full, err)
		}
	}
}
