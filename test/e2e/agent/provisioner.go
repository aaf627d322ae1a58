//go:build e2e

package agent

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// Provisioner is the name StorageClasses give to have the agent provision and expand their
// claims, as a CSI driver with the external provisioner and resizer would. A claim of such a
// class is bound to a PersistentVolume of its own (its directory, named as every claim's is) at
// the size it asks for; a larger request of a bound claim grows the volume and the claim's
// capacity at once, as an online expansion does. Claims of other classes, or of none, stay
// Pending, as before: the pods use their directories all the same.
const Provisioner = "e2e.bloomery.io/claim-directory"

// provisionedLabel marks the PersistentVolumes the agent made, so that it deletes them with their
// claims (reclaim policy Delete): nothing else would, as no PersistentVolume controller runs.
const provisionedLabel = "e2e.bloomery.io/provisioned"

// provisioner binds and grows the claims of the agent's StorageClasses.
type provisioner struct {
	agent   *Agent
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister
	resync  chan struct{}
}

// runProvisioner provisions until ctx ends. Every change of a claim, volume or class resyncs
// all of them: the suite has few.
func (a *Agent) runProvisioner(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(a.cfg.Client, 0)
	claims := factory.Core().V1().PersistentVolumeClaims()
	volumes := factory.Core().V1().PersistentVolumes()
	classes := factory.Storage().V1().StorageClasses()
	p := &provisioner{agent: a, claims: claims.Lister(), volumes: volumes.Lister(), classes: classes.Lister(), resync: make(chan struct{}, 1)}
	poke := func() {
		select {
		case p.resync <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{claims.Informer(), volumes.Informer(), classes.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("agent: watching volumes: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), claims.Informer().HasSynced, volumes.Informer().HasSynced, classes.Informer().HasSynced) {
		return fmt.Errorf("agent: volume caches did not sync: %w", context.Cause(ctx))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.resync:
			if err := p.sync(ctx); err != nil {
				a.cfg.Logger.Error("Provisioning volumes failed; retrying on the next change", "err", err)
			}
		}
	}
}

func (p *provisioner) sync(ctx context.Context) error {
	claims, err := p.claims.List(labels.Everything())
	if err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for _, pvc := range claims {
		live[pvc.UID] = true
		if err := p.syncClaim(ctx, pvc); err != nil {
			return fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
	}
	ours, err := p.volumes.List(labels.SelectorFromSet(labels.Set{provisionedLabel: "true"}))
	if err != nil {
		return err
	}
	for _, pv := range ours {
		if pv.Spec.ClaimRef != nil && !live[pv.Spec.ClaimRef.UID] && pv.DeletionTimestamp == nil {
			err := p.agent.cfg.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting volume %s of a deleted claim: %w", pv.Name, err)
			}
			p.agent.cfg.Logger.Info("Deleted the volume of a deleted claim", "volume", pv.Name)
		}
	}
	return nil
}

// syncClaim binds a pending claim of one of the agent's classes, or grows a bound one.
func (p *provisioner) syncClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.DeletionTimestamp != nil {
		return nil
	}
	class, err := p.class(pvc)
	if err != nil || class == nil || class.Provisioner != Provisioner {
		return err
	}
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if pvc.Spec.VolumeName == "" {
		return p.bind(ctx, pvc, class, request)
	}
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	if pvc.Status.Phase == corev1.ClaimBound && request.Cmp(capacity) > 0 {
		return p.grow(ctx, pvc, request)
	}
	return nil
}

// class is the claim's StorageClass: the one it names, or the default one when it names none.
func (p *provisioner) class(pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	if name := pvc.Spec.StorageClassName; name != nil {
		if *name == "" {
			return nil, nil
		}
		c, err := p.classes.Get(*name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return c, err
	}
	all, err := p.classes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return c, nil
		}
	}
	return nil, nil
}

// bind makes the claim's volume, at the claim's directory, and binds the two.
func (p *provisioner) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, size resource.Quantity) error {
	client := p.agent.cfg.Client.CoreV1()
	name := "pvc-" + string(pvc.UID)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{provisionedLabel: "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              class.Name,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(p.agent.cfg.RootDir, "claims", pvc.Namespace, pvc.Name+"-"+string(pvc.UID)),
			}},
		},
	}
	created, err := client.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		if created, err = client.PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("creating its volume: %w", err)
	}
	if created.Status.Phase != corev1.VolumeBound {
		created.Status.Phase = corev1.VolumeBound
		if _, err := client.PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking volume %s bound: %w", name, err)
		}
	}
	claim := pvc.DeepCopy()
	claim.Spec.VolumeName = name
	claim, err = client.PersistentVolumeClaims(pvc.Namespace).Update(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("naming its volume %s: %w", name, err)
	}
	claim.Status.Phase = corev1.ClaimBound
	claim.Status.AccessModes = pvc.Spec.AccessModes
	claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
	if _, err := client.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking it bound: %w", err)
	}
	p.agent.cfg.Logger.Info("Provisioned and bound a volume", "claim", pvc.Namespace+"/"+pvc.Name, "volume", name, "size", size.String())
	return nil
}

// grow expands a bound claim's volume to its request.
func (p *provisioner) grow(ctx context.Context, pvc *corev1.PersistentVolumeClaim, size resource.Quantity) error {
	client := p.agent.cfg.Client.CoreV1()
	pv, err := client.PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading its volume: %w", err)
	}
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
	if _, err := client.PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("growing volume %s: %w", pv.Name, err)
	}
	claim := pvc.DeepCopy()
	was := claim.Status.Capacity[corev1.ResourceStorage]
	claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
	if _, err := client.PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting its new capacity: %w", err)
	}
	p.agent.cfg.Logger.Info("Expanded a volume", "claim", pvc.Namespace+"/"+pvc.Name, "volume", pv.Name, "from", was.String(), "to", size.String())
	return nil
}
