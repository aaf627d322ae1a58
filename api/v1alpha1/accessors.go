/*
Copyright 2026 The Bloomery Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"fmt"
	"time"

	"github.com/bloomery/bloomery/dataplane/wire"
)

// The data plane's ports, in its pods and on its Services.
const (
	// APIPort serves the public API to applications, through the client Service.
	APIPort = 8080
	// InternalPort serves the endpoints the operator and the peer pods call, with the cluster's
	// token.
	InternalPort = 8090
	// OpsPort serves the probes and /metrics, for the kubelet and Prometheus.
	OpsPort = 9090
	// DefaultRESPPort is spec.resp.port's default: Redis's.
	DefaultRESPPort = 6379
	// DefaultRESPPasswordKey is spec.resp.passwordSecret.key's default.
	DefaultRESPPasswordKey = "password"
)

// DesiredReplicas is spec.replicas, or the schema's default when the field is absent (an object
// built in Go rather than read from the API server).
func (c *BloomCluster) DesiredReplicas() int32 {
	if c.Spec.Replicas == nil {
		return 1
	}
	return *c.Spec.Replicas
}

// DefaultHomeLeaseSeconds is spec.replication.homeLeaseSeconds when a spec built in code (or stored
// by an API server without the CRD's default) leaves it out; the CRD's default says the same.
const DefaultHomeLeaseSeconds = 10

// HomeLease is the duration of the pods' home leases; 0 means the cluster has none.
func (c *BloomCluster) HomeLease() time.Duration {
	s := int32(DefaultHomeLeaseSeconds)
	if p := c.Spec.Replication.HomeLeaseSeconds; p != nil {
		s = *p
	}
	return time.Duration(max(s, 0)) * time.Second
}

// NetworkPolicyEnabled is spec.networkPolicy.enabled, or the schema's default (true) when the
// field is absent.
func (c *BloomCluster) NetworkPolicyEnabled() bool {
	return c.Spec.NetworkPolicy.Enabled == nil || *c.Spec.NetworkPolicy.Enabled
}

// RESPEnabled is spec.resp.enabled, or the schema's default (true) when the field is absent.
func (c *BloomCluster) RESPEnabled() bool {
	return c.Spec.RESP.Enabled == nil || *c.Spec.RESP.Enabled
}

// RESPPort is spec.resp.port, or the schema's default (6379) when the field is absent.
func (c *BloomCluster) RESPPort() int32 {
	if c.Spec.RESP.Port == nil {
		return DefaultRESPPort
	}
	return *c.Spec.RESP.Port
}

// RESPPasswordKey is the key of spec.resp.passwordSecret, or its default; "" without a
// passwordSecret.
func (c *BloomCluster) RESPPasswordKey() string {
	switch ps := c.Spec.RESP.PasswordSecret; {
	case ps == nil:
		return ""
	case ps.Key == "":
		return DefaultRESPPasswordKey
	default:
		return ps.Key
	}
}

// ClientServiceName is the name of the Service applications call: the cluster's own.
func (c *BloomCluster) ClientServiceName() string { return clientServiceName(c.Name) }

// TLSEnabled reports whether the pods serve TLS (spec.tls).
func (c *BloomCluster) TLSEnabled() bool { return c.Spec.TLS != nil }

// ClientURL is the base URL applications call: the client Service, without a cluster domain,
// over https when the pods serve TLS.
func (c *BloomCluster) ClientURL() string { return clientURL(c.Namespace, c.Name, c.TLSEnabled()) }

// URL is where applications call the filter: on the client Service of the cluster it names, over
// https when that cluster has spec.tls. cluster is nil while it does not exist: the URL is then
// plain HTTP's, until the cluster says otherwise.
func (f *BloomFilter) URL(cluster *BloomCluster) string {
	tls := cluster != nil && cluster.TLSEnabled()
	return clientURL(f.Namespace, f.Spec.ClusterRef.Name, tls) + wire.FilterPath(f.Name)
}

func clientServiceName(cluster string) string { return cluster }

func clientURL(namespace, cluster string, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s.%s.svc:%d", scheme, clientServiceName(cluster), namespace, APIPort)
}
