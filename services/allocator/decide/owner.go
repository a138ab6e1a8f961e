package decide

// Owner identifies the holder of an allocation.
type Owner struct {
	Cluster   string
	Kind      string
	Namespace string
	Name      string
	UID       string
}

// Key identifies the owner independently of its uid: Allocate is
// idempotent per (pool, Key).
func (o Owner) Key() string {
	return o.Cluster + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
}
