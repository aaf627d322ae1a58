package controllers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// dataPlaneConfig renders config.yaml from the spec. It sets only the keys the spec decides; the
// data plane takes the others from its defaults. Keys come in the order of config.File's fields,
// so the same spec always gives the same bytes and the same hash.
func dataPlaneConfig(c *bloomeryv1alpha1.BloomCluster) (string, error) {
	p := c.Spec.Persistence
	f := config.File{
		TriggerPersistenceCriteria:              snapshotCriteria(p.SnapshotTriggers),
		LogSync:                                 new(logSyncValue(p.LogSync)),
		AllowRecoverFromCorruptedPersistentFile: new(p.AllowRecoveryFromCorruptSnapshot == nil || *p.AllowRecoveryFromCorruptSnapshot),
		// Filters the operator manages carry their own expiry; one an application creates
		// without an expiry must not vanish after filter-service's default of a day.
		DefaultValidAfterCreate: new(config.Seconds(0)),
		LogFormat:               new(config.LogFormatJSON),
		ShutdownDrainDelay:      new(config.Millis(shutdownDrainDelayMillis * time.Millisecond)),
		GracefulShutdownTimeout: new(config.Millis(shutdownTimeoutMillis * time.Millisecond)),
		WriteConsistency:        new(consistencyValue(c.Spec.Replication.WriteConsistency)),
		// A pod reports ready only once the operator has told it its peers and it has caught
		// up from them: before that it could answer false for a value another pod acknowledged.
		AwaitMembership: new(true),
		// Always written, 0 too: the pods renew their leases exactly when the operator watches them.
		HomeLease: new(config.Seconds(c.HomeLease())),
	}
	// The password file's path is an argument, beside its mount, as the token's and the TLS
	// files' are (buildStatefulSet).
	if c.RESPEnabled() {
		f.RESPPort = new(int(c.RESPPort()))
	}
	limits := limitsOf(c)
	if c.Spec.Limits.MaxFilterBytes != nil {
		f.MaxFilterBytes = new(config.ByteSize(limits.filter))
	}
	// A derived maxTotalBytes is written too: the pod would derive its own from GOMEMLIMIT,
	// which the operator sets below the container's limit, and give the filters less.
	if c.Spec.Limits.MaxTotalBytes != nil || limits.derived {
		f.MaxTotalBytes = new(config.ByteSize(limits.total))
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Written by the bloomery operator from BloomCluster %s/%s; edits are overwritten.\n", c.Namespace, c.Name)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return "", fmt.Errorf("encoding config.yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encoding config.yaml: %w", err)
	}
	return buf.String(), nil
}

// snapshotCriteria is always a list, so that the file always sets the key: an explicit empty list
// turns periodic snapshots off.
func snapshotCriteria(triggers []bloomeryv1alpha1.SnapshotTrigger) *[]config.FileCriterion {
	if triggers == nil {
		// The schema defaults the list; this keeps a spec built in code (or by an older API
		// server) on the same documented default rather than on the data plane's.
		triggers = []bloomeryv1alpha1.SnapshotTrigger{{PeriodSeconds: 300, UpdatesMoreThan: 100}}
	}
	criteria := make([]config.FileCriterion, 0, len(triggers))
	for _, t := range triggers {
		criteria = append(criteria, config.FileCriterion{
			Period:          config.Seconds(time.Duration(t.PeriodSeconds) * time.Second),
			UpdatesMoreThan: t.UpdatesMoreThan,
		})
	}
	return &criteria
}

// The API's enums in the data plane's spelling (for log sync, Redis's appendfsync values; for
// consistency, that of the ?consistency= query parameter). An unset field takes the API's default.
var (
	logSyncValues = map[bloomeryv1alpha1.LogSyncPolicy]config.LogSync{
		bloomeryv1alpha1.LogSyncAlways:      config.LogSyncAlways,
		bloomeryv1alpha1.LogSyncEverySecond: config.LogSyncEverySecond,
		bloomeryv1alpha1.LogSyncNo:          config.LogSyncNo,
	}
	consistencyValues = map[bloomeryv1alpha1.Consistency]wire.Consistency{
		bloomeryv1alpha1.ConsistencyOne:    wire.ConsistencyOne,
		bloomeryv1alpha1.ConsistencyQuorum: wire.ConsistencyQuorum,
		bloomeryv1alpha1.ConsistencyAll:    wire.ConsistencyAll,
	}
)

func logSyncValue(p bloomeryv1alpha1.LogSyncPolicy) config.LogSync {
	return valueOr(logSyncValues, p, config.LogSyncEverySecond)
}

func consistencyValue(c bloomeryv1alpha1.Consistency) wire.Consistency {
	return valueOr(consistencyValues, c, wire.ConsistencyQuorum)
}

// valueOr is m[k], or def when m has no k.
func valueOr[K comparable, V any](m map[K]V, k K, def V) V {
	if v, ok := m[k]; ok {
		return v
	}
	return def
}

// configHash identifies a configuration in the pod template's annotation.
func configHash(configYAML string) string {
	sum := sha256.Sum256([]byte(configYAML))
	return hex.EncodeToString(sum[:])
}
