// Package mcsnames holds the names, labels and owner kinds that the
// importer writes and that repair reads, so the two agree by construction.
package mcsnames

import (
	"crypto/sha256"
	"encoding/hex"
)

// Labels and values on the EndpointSlices the importer manages.
const (
	// ManagedBy is the value of LabelManagedBy on the importer's slices;
	// nothing else is ever modified or deleted by the importer or repair.
	ManagedBy = "importer.plexus.dev"
	// LabelManagedBy is the standard EndpointSlice managed-by label.
	LabelManagedBy = "endpointslice.kubernetes.io/managed-by"
	// LabelServiceName is the standard label naming a slice's Service (the
	// derived Service).
	LabelServiceName = "kubernetes.io/service-name"
	// LabelMCSServiceName names the multi-cluster service a slice belongs
	// to (the exported Service's name).
	LabelMCSServiceName = "multicluster.kubernetes.io/service-name"
	// LabelSourceCluster names the cluster a slice's endpoints come from.
	LabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
	// LabelDerivedFrom marks the derived Service with the ServiceImport it
	// was derived from.
	LabelDerivedFrom = "multicluster.plexus.dev/derived-from"
	// LabelAppManagedBy marks the ServiceImports and derived Services the
	// importer manages (value ManagedBy); objects without it are never
	// modified or deleted.
	LabelAppManagedBy = "app.kubernetes.io/managed-by"
)

// Managed reports whether an object with these labels is one the importer
// manages (a ServiceImport or derived Service).
func Managed(labels map[string]string) bool { return labels[LabelAppManagedBy] == ManagedBy }

// OwnerKindClusterSetService is the allocator owner kind of a clusterset
// VIP: one allocation per (namespace, name), with no cluster, shared by
// every member cluster.
const OwnerKindClusterSetService = "ClusterSetService"

// DerivedServiceName returns the name of the Service the importer derives
// from the ServiceImport name: "derived-" + name, or, when that is longer
// than a DNS label allows, a shortened name with a hash so it stays unique.
func DerivedServiceName(name string) string {
	const prefix = "derived-"
	if len(prefix)+len(name) <= 63 {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:10]
	keep := 63 - len(prefix) - 1 - len(h)
	return prefix + name[:keep] + "-" + h
}
