package controller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API server's refusal to create in a terminating namespace is told
// apart through the wrapping the reconciler adds, and nothing else is
// taken for it.
func TestNamespaceTerminating(t *testing.T) {
	gr := schema.GroupResource{Group: "multicluster.x-k8s.io", Resource: "serviceimports"}
	refused := apierrors.NewForbidden(gr, "hello", errors.New("unable to create new content in namespace shop because it is being terminated"))
	refused.ErrStatus.Details.Causes = append(refused.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace"})
	require.True(t, namespaceTerminating(fmt.Errorf("create ServiceImport shop/hello: %w", refused)))
	require.False(t, namespaceTerminating(fmt.Errorf("create ServiceImport shop/hello: %w", apierrors.NewForbidden(gr, "hello", errors.New("RBAC")))))
	require.False(t, namespaceTerminating(errors.New("connection refused")))
}

// A conflict is told apart through wrapping, but not when it is one of
// several errors joined.
func TestConflict(t *testing.T) {
	gr := schema.GroupResource{Group: "multicluster.x-k8s.io", Resource: "serviceexports"}
	c := apierrors.NewConflict(gr, "hello", errors.New("the object has been modified"))
	require.True(t, conflict(fmt.Errorf("update status of ServiceExport shop/hello: %w", c)))
	require.False(t, conflict(errors.Join(c, errors.New("write slices: connection refused"))))
	require.True(t, conflict(errors.Join(nil, c)), "a join of one")
	require.False(t, conflict(apierrors.NewForbidden(gr, "hello", errors.New("RBAC"))))
}
