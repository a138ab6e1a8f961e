package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the Cluster Inventory API.
const GroupName = "multicluster.x-k8s.io"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// ClusterProfilesResource is the group, version and resource of
// ClusterProfiles, for dynamic clients and RBAC checks.
var ClusterProfilesResource = SchemeGroupVersion.WithResource("clusterprofiles")

var (
	// SchemeBuilder collects the functions that add this package's types to
	// a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ClusterProfile{}, &ClusterProfileList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
