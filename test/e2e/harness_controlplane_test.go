//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// kubeControllers are the controllers of kube-controller-manager the product depends on: pods of
// StatefulSets, the garbage collector that deletes a BloomCluster's children, the PDB's status,
// claim protection and namespace deletion. No scheduler runs (the node agent binds pods) and no
// node lifecycle controller (the agent's node never goes stale). The EndpointSlice controller
// runs when pods have addresses the API server accepts in EndpointSlices (harness_network_test.go).
var kubeControllers = []string{
	"statefulset-controller",
	"garbage-collector-controller",
	"disruption-controller",
	"persistentvolumeclaim-protection-controller",
	"namespace-controller",
}

// endpointSliceController publishes the ready pods behind each Service, which the service proxy
// forwards to.
const endpointSliceController = "endpointslice-controller"

// controlPlane is etcd and kube-apiserver (from envtest, with the CRDs installed) and
// kube-controller-manager, with an administrator's kubeconfig for everything else.
type controlPlane struct {
	env            *envtest.Environment
	config         *rest.Config // the administrator's
	kubeconfigPath string
	controllers    *process
	apiServerLog   *os.File
}

// startControlPlane starts the control plane from the binaries in assets, with the CRDs of crdDirs
// and the given controllers, logging into workDir.
func startControlPlane(assets string, crdDirs, controllers []string, workDir string) (*controlPlane, error) {
	cp := &controlPlane{env: &envtest.Environment{
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}}
	apiServer := cp.env.ControlPlane.GetAPIServer()
	apiServer.Configure().Set("service-cluster-ip-range", serviceNetwork)
	apiServerLog, err := os.Create(filepath.Join(workDir, "kube-apiserver.log"))
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver's log: %w", err)
	}
	cp.apiServerLog = apiServerLog
	apiServer.Out, apiServer.Err = apiServerLog, apiServerLog
	envtestConfig, err := cp.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver (binaries from %s; `make envtest-assets` builds them): %w", assets, err)
	}
	// envtest's own config is a client certificate of envtest's; every component here (kubectl
	// included) uses one administrator, a member of system:masters, as a cluster's admin would.
	admin, err := cp.env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, envtestConfig)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("adding the administrator: %w", err), cp.stop())
	}
	cp.config = admin.Config()
	if err := awaitCRDsServed(cp.config, cp.env.CRDs); err != nil {
		return nil, errors.Join(err, cp.stop())
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("writing the administrator's kubeconfig: %w", err), cp.stop())
	}
	cp.kubeconfigPath = filepath.Join(workDir, "kubeconfig")
	if err := os.WriteFile(cp.kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("writing the kubeconfig: %w", err), cp.stop())
	}
	cp.controllers, err = startProcess("kube-controller-manager", filepath.Join(workDir, "kube-controller-manager.log"), nil,
		filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig", cp.kubeconfigPath,
		"--controllers", strings.Join(controllers, ","),
		"--leader-elect=false",
		// The controllers act as the administrator: no service account tokens exist to act as.
		"--use-service-account-credentials=false",
		// Nothing scrapes or probes it; no port to collide with another run's.
		"--secure-port=0",
	)
	if err != nil {
		return nil, errors.Join(err, cp.stop())
	}
	return cp, nil
}

// stop stops kube-controller-manager, then kube-apiserver and etcd.
func (cp *controlPlane) stop() error {
	var errs []error
	if cp.controllers != nil {
		// kube-controller-manager exits with an error on SIGTERM when its informers are cut off;
		// only its stopping matters here.
		_ = cp.controllers.stop(10 * time.Second)
	}
	if err := cp.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
	}
	if cp.apiServerLog != nil {
		errs = append(errs, cp.apiServerLog.Close())
	}
	return errors.Join(errs...)
}

// awaitCRDsServed waits until the API server takes writes of every kind of crds. envtest waits for
// them to be in discovery, and the API server may still answer a create of one with 503 ("Resource
// kind ... not found. There can be a delay") for a moment: the first test to apply a sample met it.
// A server-side dry run of an empty object of each kind tells: refused as invalid, the kind is
// served.
func awaitCRDsServed(config *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			probe := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": crd.Spec.Group + "/" + v.Name, "kind": crd.Spec.Names.Kind,
				"metadata": map[string]any{"name": "served-probe", "namespace": "default"},
			}}
			for {
				var resource dynamic.ResourceInterface = client.Resource(gvr)
				if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
					resource = client.Resource(gvr).Namespace("default")
				}
				_, err := resource.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil || !(apierrors.IsServiceUnavailable(err) || apierrors.IsNotFound(err)) {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the API server does not serve %s yet: %w", gvr, err)
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
	return nil
}
