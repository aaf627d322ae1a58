package cluster_test

import (
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/cluster"
)

// expirations are the filter's expiration on every pod ("" for never), or false when a pod
// does not hold it.
func expirations(t *testing.T, c *cluster.Cluster, name string) ([]string, bool) {
	t.Helper()
	var out []string
	for _, p := range c.Pods() {
		f, err := p.Client.Get(t.Context(), name)
		if err != nil {
			return nil, false
		}
		out = append(out, f.Expiration)
	}
	return out, true
}

// Changes of expiry made on both sides of a partition, each acknowledged by its own side only,
// converge after the partition heals: anti-entropy compares the overrides, and every pod keeps
// the later change, here the one made second.
func TestConflictingChangesOfExpiryConverge(t *testing.T) {
	c := cluster.New(t, cluster.Options{Configure: func(_ string, cfg *config.Config) {
		cfg.AntiEntropyInterval = 200 * time.Millisecond
	}})
	a, b := c.Pod(0), c.Pod(1)
	create(t, a, "f", client.CreateOptions{})
	create(t, a, "g", client.CreateOptions{})

	c.Partition(a)
	ctx := t.Context()
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := a.With(wire.ConsistencyOne).SetExpiration(ctx, "f", deadline); err != nil {
		t.Fatal(err)
	}
	if _, err := b.With(wire.ConsistencyQuorum).RemoveExpiration(ctx, "f"); err != nil { // later: wins
		t.Fatal(err)
	}
	if _, err := b.With(wire.ConsistencyQuorum).RemoveExpiration(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	// a's change of g comes later, by a's clock too.
	time.Sleep(time.Millisecond)
	if _, err := a.With(wire.ConsistencyOne).SetExpiration(ctx, "g", deadline); err != nil { // later: wins
		t.Fatal(err)
	}
	if got, _ := expirations(t, c, "f"); got[0] == got[1] {
		t.Fatalf("the partition let the changes through: %v", got)
	}

	c.Heal()
	want := map[string]string{"f": "", "g": deadline.Format(wire.TimeFormat)}
	for name, expiration := range want {
		await.True(t, cluster.WaitTimeout, "every pod to hold "+name+"'s later change", func() bool {
			got, ok := expirations(t, c, name)
			return ok && got[0] == expiration && got[1] == expiration && got[2] == expiration
		})
	}
}
