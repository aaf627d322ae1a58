package controllers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// The internal token is the bearer token of the pods' internal port: the pods of one cluster and
// the operator hold it, nobody else. Each BloomCluster owns one random token in a Secret. The
// operator never changes it: deleting the Secret is how the token is rotated, since the next pass
// creates a new one and its hash, in the pod template, rolls the pods onto it.
const (
	tokenSecretKey = "token"
	// tokenBytes of crypto/rand, written in hexadecimal.
	tokenBytes = 32
	// tokenMountPath is the directory the Secret is mounted at; the token is the file
	// tokenMountPath/token.
	tokenMountPath = "/var/run/secrets/bloomery"
	tokenVolume    = "internal-token"
	// tokenHashAnnotation on the pod template carries a hash of the token: the data plane reads
	// it only at start, so a new token must roll the pods.
	tokenHashAnnotation = "bloomery.io/internal-token-hash"
)

func tokenSecretName(cluster string) string { return cluster + "-internal-token" }

// TokenSecretSelector selects the Secrets the operator makes: its cache holds no others, so that
// the operator keeps no copy of the namespaces' other credentials.
func TokenSecretSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelName: appName, labelManagedBy: managerName})
}

// errNoToken is the answer for a cluster whose token Secret does not exist (yet) or holds no
// token the operator may use.
var errNoToken = errors.New("no usable internal token")

func (r *BloomClusterReconciler) reconcileTokenSecret(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	secret, err := r.ensureTokenSecret(ctx, st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	token, err := tokenOf(secret, st.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.token = token
	return ctrl.Result{}, nil
}

// ensureTokenSecret returns the cluster's token Secret, and creates it with a new token when it
// does not exist. An existing Secret is never updated (the operator may not: it only creates).
func (r *BloomClusterReconciler) ensureTokenSecret(ctx context.Context, c *bloomeryv1alpha1.BloomCluster) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: c.Namespace, Name: tokenSecretName(c.Name)}
	existing := &corev1.Secret{}
	err := r.Client.Get(ctx, key, existing)
	if err == nil {
		return existing, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting Secret %s: %w", key.Name, err)
	}
	desired, err := buildTokenSecret(c)
	if err != nil {
		return nil, err
	}
	if err := ctrl.SetControllerReference(c, desired, r.Scheme); err != nil {
		return nil, fmt.Errorf("setting owner of Secret %s: %w", key.Name, err)
	}
	err = r.Client.Create(ctx, desired)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("Created the internal token Secret of BloomCluster", "name", key.Name)
		r.event(c, desired, corev1.EventTypeNormal, "Created", "Create", "Created Secret %s", key.Name)
		return desired, nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, errNamespaceTerminating
	case apierrors.IsAlreadyExists(err):
		return r.uncachedTokenSecret(ctx, key)
	}
	r.event(c, desired, corev1.EventTypeWarning, "CreateFailed", "Create", "Creating Secret %s failed: %v", key.Name, err)
	return nil, fmt.Errorf("creating Secret %s: %w", key.Name, err)
}

// uncachedTokenSecret reads a Secret the cache does not hold but the API server does: one this
// operator created so recently that the cache has not seen it yet, or one without the labels the
// cache selects, which the operator cannot use.
func (r *BloomClusterReconciler) uncachedTokenSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := r.apiReader().Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s, which exists but is not in the operator's cache: %w", key.Name, err)
	}
	if !TokenSecretSelector().Matches(labels.Set(secret.Labels)) {
		return nil, fmt.Errorf("secret %s exists without the labels %s, so the operator does not watch it: delete it, and the operator creates a new one",
			key.Name, TokenSecretSelector())
	}
	return secret, nil
}

// buildTokenSecret is a new Secret holding a new random token.
func buildTokenSecret(c *bloomeryv1alpha1.BloomCluster) (*corev1.Secret, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: childMeta(c, tokenSecretName(c.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{tokenSecretKey: []byte(token)},
	}, nil
}

func newToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating the internal token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// tokenOf is the token a cluster's Secret holds. It refuses a Secret the cluster does not control
// (whoever made it would know the token) and a token the operator would not have made.
func tokenOf(secret *corev1.Secret, c *bloomeryv1alpha1.BloomCluster) (string, error) {
	if !metav1.IsControlledBy(secret, c) {
		return "", fmt.Errorf("secret %s is not this BloomCluster's (no controller reference to it): delete or rename it, and the operator creates its own",
			secret.Name)
	}
	token := string(secret.Data[tokenSecretKey])
	if b, err := hex.DecodeString(token); err != nil || len(b) != tokenBytes {
		return "", fmt.Errorf("secret %s holds no token of %d hexadecimal characters under key %q: delete it, and the operator creates a new one",
			secret.Name, 2*tokenBytes, tokenSecretKey)
	}
	return token, nil
}

// clusterToken reads the cluster's token through the cache. Its error wraps errNoToken when the
// Secret does not exist or is not usable.
func clusterToken(ctx context.Context, reader client.Reader, c *bloomeryv1alpha1.BloomCluster) (string, error) {
	name := tokenSecretName(c.Name)
	var secret corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &secret)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: Secret %s does not exist yet; the BloomCluster's reconciler creates it", errNoToken, name)
	}
	if err != nil {
		return "", fmt.Errorf("getting Secret %s: %w", name, err)
	}
	token, err := tokenOf(&secret, c)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoToken, err)
	}
	return token, nil
}

// tokenHash identifies a token in the pod template's annotation without revealing it.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
