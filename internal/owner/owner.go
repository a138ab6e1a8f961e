// Package owner is the holder of an allocation, as the allocator stores it
// and as repair judges it: the Kubernetes object (or clusterset service)
// of one member cluster, and the uid of its incarnation. Pure: no I/O.
package owner

// Owner identifies the holder of an allocation or of a claim.
type Owner struct {
	Cluster   string
	Kind      string
	Namespace string
	Name      string
	UID       string
}

// Identity names an owner independently of its uid.
type Identity struct {
	Cluster   string
	Kind      string
	Namespace string
	Name      string
}

// Identity returns the owner without its uid.
func (o Owner) Identity() Identity {
	return Identity{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

// Key identifies the owner independently of its uid, as
// cluster/kind/namespace/name: the allocator's Allocate is idempotent per
// (pool, Key), and its stores index owners by it.
func (o Owner) Key() string { return o.Identity().String() }

// String returns cluster/kind/namespace/name(uid).
func (o Owner) String() string { return o.Key() + "(" + o.UID + ")" }

// String returns cluster/kind/namespace/name.
func (i Identity) String() string {
	return i.Cluster + "/" + i.Kind + "/" + i.Namespace + "/" + i.Name
}

// Same reports whether a and b are the same owner. A missing uid on either
// side cannot tell two incarnations apart, so identity alone decides then.
func Same(a, b Owner) bool {
	return a.Identity() == b.Identity() && (a.UID == "" || b.UID == "" || a.UID == b.UID)
}
