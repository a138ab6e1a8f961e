package slices

import (
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels of the Multi-Cluster Services API (sigs.k8s.io/mcs-api v1beta1),
// spelled out so the packing core, which the bench module also builds,
// depends on the Kubernetes API types only.
const (
	// LabelServiceImport names the ServiceImport a slice belongs to.
	LabelServiceImport = "multicluster.kubernetes.io/service-name"
	// LabelSourceCluster names the cluster a slice's endpoints come from.
	LabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
)

// ImportTemplate returns the template for the slices of one imported service
// from one source cluster. The kubernetes.io/service-name label names the
// derived Service, so kube-proxy and DNS read the slices as its endpoints;
// the multicluster labels name the ServiceImport and the source cluster; and
// the derived Service owns the slices, so the garbage collector removes them
// with it.
func ImportTemplate(namespace, derivedService string, derivedServiceUID types.UID, serviceImport, sourceCluster string) Template {
	controller := true
	return Template{
		Namespace:    namespace,
		GenerateName: derivedService + "-" + sourceCluster + "-",
		Labels: map[string]string{
			discovery.LabelServiceName: derivedService,
			LabelServiceImport:         serviceImport,
			LabelSourceCluster:         sourceCluster,
			discovery.LabelManagedBy:   ManagedBy,
		},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Service",
			Name:       derivedService,
			UID:        derivedServiceUID,
			Controller: &controller,
		}},
	}
}
