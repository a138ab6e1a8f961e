package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the ExternalWorkload API.
const GroupName = "workload.plexus.dev"

// Resource names of the API, as they appear in URLs and RBAC rules.
const (
	// ResourceExternalWorkloads is the plural resource name.
	ResourceExternalWorkloads = "externalworkloads"
	// KindExternalWorkload is the kind of a single object.
	KindExternalWorkload = "ExternalWorkload"
)

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// ExternalWorkloadsResource is the group, version and resource, for dynamic
// clients and RBAC checks.
var ExternalWorkloadsResource = SchemeGroupVersion.WithResource(ResourceExternalWorkloads)

// ExternalWorkloadKind is the group, version and kind of an ExternalWorkload.
var ExternalWorkloadKind = SchemeGroupVersion.WithKind(KindExternalWorkload)

var (
	// SchemeBuilder collects the functions that add this package's types to
	// a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource qualifies a resource name of this API with its group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ExternalWorkload{}, &ExternalWorkloadList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
