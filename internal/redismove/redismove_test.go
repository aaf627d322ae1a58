package redismove_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/internal/redismove"
	"github.com/bloomery/bloomery/test/dataplane"
)

// Every filter of the source, whether made over RESP (RedisBloom's layout) or over HTTP
// (bits-and-blooms', partitioned), arrives at the destination answering every value as at the
// source; a filter the destination holds already is skipped, or replaced when asked.
func TestMoveBetweenDataPlanes(t *testing.T) {
	t.Parallel()
	src, dst := dataplane.Start(t, nil), dataplane.Start(t, nil)
	ctx := t.Context()
	from, to := dataplane.RedisClient(t, src), dataplane.RedisClient(t, dst)
	values := make([]any, 3000)
	for i := range values {
		values[i] = fmt.Sprintf("v%d", i)
	}
	for i := range 5 {
		name := fmt.Sprintf("resp-%d", i)
		if err := from.BFReserve(ctx, name, 0.01, 500).Err(); err != nil {
			t.Fatal(err)
		}
		if err := from.BFMAdd(ctx, name, values[:1000*(i%3+1)]...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	partitions := 3
	dataplane.Create(t, src, "http", client.CreateOptions{Partitions: &partitions})
	strs := make([]string, len(values))
	for i, v := range values {
		strs[i] = v.(string)
	}
	if err := src.Client.MultiSet(ctx, "http", strs); err != nil {
		t.Fatal(err)
	}
	if err := to.BFAdd(ctx, "resp-0", "other").Err(); err != nil { // already at the destination
		t.Fatal(err)
	}

	rep, err := redismove.Move(ctx, from, to, redismove.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 5 || !slices.Equal(rep.Skipped, []string{"resp-0"}) {
		t.Errorf("moved %d, skipped %v; want 5 and resp-0", rep.Moved, rep.Skipped)
	}
	probes := make([]string, 5000)
	for i := range probes {
		probes[i] = fmt.Sprintf("probe%d", i)
	}
	check := func(name string) {
		t.Helper()
		if got, want := dataplane.MultiCheck(t, dst, name, append(strs, probes...)), dataplane.MultiCheck(t, src, name, append(strs, probes...)); !slices.Equal(got, want) {
			t.Errorf("%s answers otherwise at the destination", name)
		}
		if got, want := dataplane.Get(t, dst, name), dataplane.Get(t, src, name); got.Items != want.Items || got.Layers != want.Layers || got.Layout != want.Layout {
			t.Errorf("%s: %+v at the destination, %+v at the source", name, got, want)
		}
	}
	for _, name := range []string{"resp-1", "resp-2", "resp-3", "resp-4", "http"} {
		check(name)
	}
	if rep, err := redismove.Move(ctx, from, to, redismove.Options{Match: "resp-0", Replace: true}); err != nil || rep.Moved != 1 {
		t.Fatalf("replacing resp-0: %+v, %v", rep, err)
	}
	check("resp-0")
}
