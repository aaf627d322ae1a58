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
)

// DesiredReplicas is spec.replicas, or the schema's default when the field is absent (an object
// built in Go rather than read from the API server).
func (c *BloomCluster) DesiredReplicas() int32 {
	if c.Spec.Replicas == nil {
		return 1
	}
	return *c.Spec.Replicas
}

// NetworkPolicyEnabled is spec.networkPolicy.enabled, or the schema's default (true) when the
// field is absent.
func (c *BloomCluster) NetworkPolicyEnabled() bool {
	return c.Spec.NetworkPolicy.Enabled == nil || *c.Spec.NetworkPolicy.Enabled
}

// ClientServiceName is the name of the Service applications call: the cluster's own.
func (c *BloomCluster) ClientServiceName() string { return clientServiceName(c.Name) }

// ClientURL is the base URL applications call: the client Service, without a cluster domain.
func (c *BloomCluster) ClientURL() string { return clientURL(c.Namespace, c.Name) }

// URL is where applications call the filter: on the client Service of the cluster it names,
// whether or not that cluster exists yet.
func (f *BloomFilter) URL() string {
	return clientURL(f.Namespace, f.Spec.ClusterRef.Name) + wire.FilterPath(f.Name)
}

func clientServiceName(cluster string) string { return cluster }

func clientURL(namespace, cluster string) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", clientServiceName(cluster), namespace, APIPort)
}
