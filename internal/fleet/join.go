package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
	inventoryv1alpha1 "github.com/plexusnet/plexus/api/inventory/v1alpha1"
	"github.com/plexusnet/plexus/internal/atomicfile"
)

// Manager is the cluster manager name Plexus puts on the ClusterProfiles
// it creates.
const Manager = "plexus"

// Join records m in the inventory: the ClusterProfile named m.Name in
// namespace, created when missing (by Manager), with the member's
// membership address, TLS identity, id and clusterSet (when given) in its
// status properties and Joined True. Joining again updates the profile:
// a member whose address changed is reconnected, not restarted.
func Join(ctx context.Context, client dynamic.Interface, namespace string, m Member, clusterSet string) (*inventoryv1alpha1.ClusterProfile, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	res := client.Resource(inventoryv1alpha1.ClusterProfilesResource).Namespace(namespace)
	u, err := res.Get(ctx, m.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cp := &inventoryv1alpha1.ClusterProfile{
			TypeMeta: metav1.TypeMeta{APIVersion: inventoryv1alpha1.SchemeGroupVersion.String(), Kind: "ClusterProfile"},
			ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: namespace,
				Labels: map[string]string{inventoryv1alpha1.LabelClusterManager: Manager}},
			Spec: inventoryv1alpha1.ClusterProfileSpec{DisplayName: m.Name, ClusterManager: inventoryv1alpha1.ClusterManager{Name: Manager}},
		}
		if u, err = toUnstructured(cp); err != nil {
			return nil, err
		}
		u, err = res.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	var cp inventoryv1alpha1.ClusterProfile
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cp); err != nil {
		return nil, err
	}
	now := metav1.NewTime(time.Now())
	set := func(name, value string) {
		cp.Status.Properties = slices.DeleteFunc(cp.Status.Properties, func(p inventoryv1alpha1.Property) bool { return p.Name == name })
		if value != "" {
			cp.Status.Properties = append(cp.Status.Properties, inventoryv1alpha1.Property{Name: name, Value: value, LastObservedTime: now})
		}
	}
	set(inventoryv1alpha1.PropertyMembershipAddress, m.Addr)
	set(inventoryv1alpha1.PropertyMembershipServerName, m.ServerName)
	set(inventoryv1alpha1.PropertyMembershipRanges, strings.Join(m.Ranges, ","))
	set(aboutv1alpha1.ClusterIDProperty, m.Name)
	if clusterSet != "" {
		set(aboutv1alpha1.ClusterSetProperty, clusterSet)
	}
	meta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{Type: inventoryv1alpha1.ConditionJoined, Status: metav1.ConditionTrue,
		Reason: "JoinedByPlexus", Message: "joined with plexusctl clusters join", ObservedGeneration: cp.Generation})
	if u, err = toUnstructured(&cp); err != nil {
		return nil, err
	}
	if u, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// Leave deletes the ClusterProfile of cluster from the inventory. It
// reports whether there was one.
func Leave(ctx context.Context, client dynamic.Interface, namespace, cluster string) (bool, error) {
	err := client.Resource(inventoryv1alpha1.ClusterProfilesResource).Namespace(namespace).Delete(ctx, cluster, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func toUnstructured(cp *inventoryv1alpha1.ClusterProfile) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// EditFile changes the members of a sources file through edit, and writes
// it back atomically (a reader never sees half a file). A missing file
// starts empty.
func EditFile(path string, edit func([]Member) ([]Member, error)) error {
	var members []Member
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		// A file that lists no clusters, marked empty or not, is one to
		// start from.
		if members, err = ParseFile(data); err != nil && !errors.Is(err, ErrNoMembers) {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if members, err = edit(members); err != nil {
		return err
	}
	if members, err = check(members); err != nil {
		return err
	}
	out, err := marshalFile(members)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, out, 0o644)
}
