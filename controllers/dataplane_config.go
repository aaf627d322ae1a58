package controllers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"go.yaml.in/yaml/v3"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// dataPlaneConfig renders config.yaml from the spec. Keys are sorted (yaml.v3 sorts map keys), so
// the same spec always gives the same bytes and the same hash.
func dataPlaneConfig(c *bloomeryv1alpha1.BloomCluster) (string, error) {
	p := c.Spec.Persistence
	triggers := p.SnapshotTriggers
	if triggers == nil {
		// The schema defaults the list; this keeps a spec built in code (or by an older API
		// server) on the same documented default rather than on the data plane's.
		triggers = []bloomeryv1alpha1.SnapshotTrigger{{PeriodSeconds: 300, UpdatesMoreThan: 100}}
	}
	criteria := make([]map[string]any, 0, len(triggers)) // an explicit empty list turns periodic snapshots off
	for _, t := range triggers {
		criteria = append(criteria, map[string]any{"periodInSeconds": t.PeriodSeconds, "updatesMoreThan": t.UpdatesMoreThan})
	}
	cfg := map[string]any{
		"triggerPersistenceCriteria": criteria,
		"logSync":                    logSyncValue(p.LogSync),
		"allowRecoverFromCorruptedPersistentFile": p.AllowRecoveryFromCorruptSnapshot == nil || *p.AllowRecoveryFromCorruptSnapshot,
		// Filters the operator manages carry their own expiry; one an application creates
		// without an expiry must not vanish after filter-service's default of a day.
		"defaultValidSecondsAfterCreate": 0,
		"logFormat":                      "json",
		"shutdownDrainDelayMillis":       shutdownDrainDelayMillis,
		"gracefulShutdownTimeoutMillis":  shutdownTimeoutMillis,
		"writeConsistency":               consistencyValue(c.Spec.Replication.WriteConsistency),
		// A pod reports ready only once the operator has told it its peers and it has caught
		// up from them: before that it could answer false for a value another pod acknowledged.
		"awaitMembership": true,
	}
	if q := c.Spec.Limits.MaxFilterBytes; q != nil {
		cfg["maxFilterBytes"] = max(q.Value(), 0)
	}
	if q := c.Spec.Limits.MaxTotalBytes; q != nil {
		cfg["maxTotalBytes"] = max(q.Value(), 0)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Written by the bloomery operator from BloomCluster %s/%s; edits are overwritten.\n", c.Namespace, c.Name)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return "", fmt.Errorf("encoding config.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encoding config.yaml: %w", err)
	}
	return buf.String(), nil
}

// logSyncValue maps the API's enum onto the data plane's spelling (Redis's appendfsync values).
func logSyncValue(p bloomeryv1alpha1.LogSyncPolicy) string {
	switch p {
	case bloomeryv1alpha1.LogSyncAlways:
		return "always"
	case bloomeryv1alpha1.LogSyncNo:
		return "no"
	default:
		return "everysec"
	}
}

// consistencyValue maps the API's enum onto the data plane's spelling, which is also that of the
// ?consistency= query parameter.
func consistencyValue(c bloomeryv1alpha1.Consistency) string {
	switch c {
	case bloomeryv1alpha1.ConsistencyOne:
		return string(wire.ConsistencyOne)
	case bloomeryv1alpha1.ConsistencyAll:
		return string(wire.ConsistencyAll)
	default:
		return string(wire.ConsistencyQuorum)
	}
}

// configHash identifies a configuration in the pod template's annotation.
func configHash(configYAML string) string {
	sum := sha256.Sum256([]byte(configYAML))
	return hex.EncodeToString(sum[:])
}
