package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
)

// A status write that meets a conflict requeues the pass; the third in a row is logged at info,
// and a write that lands starts the count again.
func TestRepeatedStatusConflictsAreLogged(t *testing.T) {
	var infos []string
	logger := funcr.New(func(prefix, args string) { infos = append(infos, args) }, funcr.Options{Verbosity: 0})
	ctx := log.IntoContext(t.Context(), logger)
	bf := &bloomeryv1alpha1.BloomFilter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: t.Name()}}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "bloomfilters"}, bf.Name, errors.New("changed"))
	write := func(perr error) ctrl.Result {
		t.Helper()
		result, err := statusPatched(ctx, "BloomFilter", bf, ctrl.Result{}, nil, perr)
		if err != nil {
			t.Fatalf("a conflict or a write that landed is no error: %v", err)
		}
		return result
	}
	for i := range repeatedConflicts - 1 {
		if r := write(conflict); r.RequeueAfter != time.Second {
			t.Errorf("conflict %d: requeued after %v, want 1s", i+1, r.RequeueAfter)
		}
	}
	if len(infos) != 0 {
		t.Fatalf("logged at info before %d conflicts in a row: %v", repeatedConflicts, infos)
	}
	write(conflict)
	if len(infos) != 1 || !strings.Contains(infos[0], `"conflictsInARow"=3`) {
		t.Fatalf("the third conflict in a row logged %v, want one line with conflictsInARow 3", infos)
	}
	write(nil)
	write(conflict)
	if len(infos) != 1 {
		t.Errorf("a conflict after a write that landed logged at info: %v", infos[1:])
	}
}
