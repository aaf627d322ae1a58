package controllers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// With spec.resp the pods open the Redis protocol's port (dataplane/resp): on the container as the
// port named resp, on the client Service, and in the NetworkPolicy for the client port's sources.
// With spec.resp.passwordSecret the pods require its password: the user's Secret is mounted
// read-only and the data plane reads the file at start, so the password's hash is in the pod
// template and a new password rolls the pods.
const (
	respPortName = "resp"
	// respMountPath is the directory the password Secret is mounted at; the password is the file
	// respMountPath/password whatever the Secret's key.
	respMountPath    = "/var/run/secrets/bloomery-resp"
	respPasswordFile = "password"
	respVolume       = "resp-password"
	// respPasswordHashAnnotation on the pod template identifies the password, so that a new one
	// rolls the pods. It is an HMAC keyed with the cluster's internal token rather than a plain
	// hash: a password, unlike the token, may be guessable, and the StatefulSet is readable by more
	// than the Secrets are.
	respPasswordHashAnnotation = "bloomery.io/resp-password-hash"
	// minRESPPasswordLength is the data plane's own minimum: a shorter password would stop the
	// pods at start.
	minRESPPasswordLength = 8
)

// errNoRESPPassword is the answer for a cluster whose spec.resp.passwordSecret cannot be used.
var errNoRESPPassword = errors.New("no usable RESP password")

// reconcileRESPPassword reads spec.resp.passwordSecret. One the operator cannot use makes the
// cluster Degraded, with a Warning event, and leaves its ConfigMap and StatefulSet as they are: no
// pod starts without the password the spec asks for, and running pods keep serving as before.
// The Secret is read again at every pass, so that a new password is seen within the resync period.
func (r *BloomClusterReconciler) reconcileRESPPassword(ctx context.Context, st *clusterState) (ctrl.Result, error) {
	c := st.cluster
	if !c.RESPEnabled() || c.Spec.RESP.PasswordSecret == nil {
		return ctrl.Result{}, nil
	}
	password, err := respPassword(ctx, r.apiReader(), c)
	if errors.Is(err, errNoRESPPassword) {
		msg := err.Error() + ". The ConfigMap and the StatefulSet are left as they are until it can be used"
		st.respRefused = true
		st.notApplied = append(st.notApplied, degradation{ReasonRESPPasswordSecretNotUsable, msg})
		r.event(c, nil, corev1.EventTypeWarning, ReasonRESPPasswordSecretNotUsable, "ReadRESPPassword", "%s", msg)
		return ctrl.Result{RequeueAfter: tlsRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	st.respPasswordHash = respPasswordHash(st.token, password)
	return ctrl.Result{}, nil
}

// respPassword reads the password of spec.resp.passwordSecret from the API server, by name: the
// operator's cache holds only its own Secrets, and keeps no copy of the users' credentials. Its
// error wraps errNoRESPPassword, naming the Secret and what is wrong, when it cannot be used.
func respPassword(ctx context.Context, reader client.Reader, c *bloomeryv1alpha1.BloomCluster) (string, error) {
	name, key := c.Spec.RESP.PasswordSecret.Name, c.RESPPasswordKey()
	var secret corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &secret)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: Secret %s (spec.resp.passwordSecret) does not exist", errNoRESPPassword, name)
	}
	if err != nil {
		return "", fmt.Errorf("getting Secret %s (spec.resp.passwordSecret): %w", name, err)
	}
	raw, ok := secret.Data[key]
	if !ok {
		return "", fmt.Errorf("%w: Secret %s (spec.resp.passwordSecret) has no key %s", errNoRESPPassword, name, key)
	}
	// The data plane trims the file as it reads it; so is the password measured here.
	password := strings.TrimSpace(string(raw))
	if len(password) < minRESPPasswordLength {
		return "", fmt.Errorf("%w: Secret %s (spec.resp.passwordSecret) holds a password of %d characters under key %s, fewer than the %d the pods require",
			errNoRESPPassword, name, len(password), key, minRESPPasswordLength)
	}
	return password, nil
}

// respPasswordHash identifies a password in the pod template without revealing it: an HMAC keyed
// with the internal token, which only the operator and the pods hold.
func respPasswordHash(token, password string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(password))
	return hex.EncodeToString(mac.Sum(nil))
}

// respPasswordPath is where the pods read the password.
func respPasswordPath() string { return respMountPath + "/" + respPasswordFile }

// buildRESPPasswordVolume mounts the password's key alone, as the file respPasswordFile.
func buildRESPPasswordVolume(ps *bloomeryv1alpha1.RESPPasswordSecret, key string) corev1.Volume {
	return corev1.Volume{
		Name: respVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ps.Name,
			Items:      []corev1.KeyToPath{{Key: key, Path: respPasswordFile}},
			// Readable by the data plane's user and group alone.
			DefaultMode: new(int32(0o440)),
		}},
	}
}
