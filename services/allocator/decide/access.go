package decide

import (
	"errors"
	"fmt"

	"github.com/plexusnet/plexus/internal/mcsnames"
)

// Refusals of a caller's rights over allocations (see Access). Each is a
// PERMISSION_DENIED with its own reason.
var (
	// ErrOwnerOutsideCluster refuses a cluster-bound caller an owner of
	// another cluster.
	ErrOwnerOutsideCluster = errors.New("owner is outside the caller's cluster")
	// ErrFleetRightsRequired refuses a cluster-bound caller what only a
	// fleet identity may do: release a clusterset VIP, watch every owner.
	ErrFleetRightsRequired = errors.New("fleet rights required")
	// ErrClustersetMismatch refuses an identity of another clusterset.
	ErrClustersetMismatch = errors.New("caller belongs to another clusterset")
	// ErrSharedIdentityRefused refuses a shared identity (or an anonymous
	// caller) once the allocator requires cluster-bound ones.
	ErrSharedIdentityRefused = errors.New("shared identity refused; use a cluster-bound or fleet identity")
)

// Caller is who makes a call, as far as Access needs it: the fields of the
// caller's identity (package auth's Identity).
type Caller struct {
	Principal string
	// Clusterset is empty for a shared identity.
	Clusterset string
	// Cluster is the member cluster the caller acts for; empty for a fleet
	// or shared identity.
	Cluster string
	// Shared marks a shared identity, a principal that names no identity
	// Plexus knows, and an anonymous caller (Principal empty).
	Shared bool
}

// Bound reports whether the caller acts for one member cluster only.
func (c Caller) Bound() bool { return c.Cluster != "" }

// Access is the allocator's rule of who may touch which allocations, in
// the manner of Kubernetes' NodeRestriction: a cluster-bound caller acts
// only on owners of its cluster, and reads and allocates (never releases)
// clusterset VIPs, whose owner names no cluster; a fleet identity acts on
// every owner; a shared identity has fleet rights until
// RequireClusterIdentities. No guard of a request (etag, uid) lifts it.
type Access struct {
	// Clusterset, when set, refuses identities of any other clusterset;
	// empty accepts every clusterset.
	Clusterset string
	// RequireClusterIdentities refuses shared identities and anonymous
	// callers every call on allocations.
	RequireClusterIdentities bool
}

// Refusal is a refused call: the caller, the owner it was refused (when
// the call named or reached one) and the rule (one of the errors above).
type Refusal struct {
	Caller   Caller
	Owner    Owner
	HasOwner bool
	Err      error
}

func (r *Refusal) Error() string {
	who := r.Caller.Principal
	if who == "" {
		who = "anonymous caller"
	}
	if r.HasOwner {
		return fmt.Sprintf("%s may not act on owner %s: %v", Clip(who), Clip(r.Owner.Key()), r.Err)
	}
	return fmt.Sprintf("%s: %v", Clip(who), r.Err)
}

// Unwrap returns the rule that refused.
func (r *Refusal) Unwrap() error { return r.Err }

// admit checks what every call on allocations needs: an identity of the
// allocator's clusterset, and no shared one when they are refused.
func (a Access) admit(c Caller) error {
	switch {
	case c.Clusterset != "" && a.Clusterset != "" && c.Clusterset != a.Clusterset:
		return &Refusal{Caller: c, Err: ErrClustersetMismatch}
	case c.Shared && a.RequireClusterIdentities:
		return &Refusal{Caller: c, Err: ErrSharedIdentityRefused}
	}
	return nil
}

// vip reports whether o is a clusterset VIP's owner.
func vip(o Owner) bool { return o.Cluster == "" && o.Kind == mcsnames.OwnerKindClusterSetService }

// Allocate decides whether c may allocate for o: its own cluster's
// owners, or a clusterset VIP, when c is cluster-bound.
func (a Access) Allocate(c Caller, o Owner) error {
	if err := a.admit(c); err != nil {
		return err
	}
	if c.Bound() && o.Cluster != c.Cluster && !vip(o) {
		return &Refusal{Caller: c, Owner: o, HasOwner: true, Err: ErrOwnerOutsideCluster}
	}
	return nil
}

// Release decides whether c may release o's allocation: a cluster-bound
// caller its own cluster's only; an owner of no cluster (a clusterset
// VIP) needs fleet rights.
func (a Access) Release(c Caller, o Owner) error {
	if err := a.admit(c); err != nil {
		return err
	}
	switch {
	case !c.Bound():
		return nil
	case o.Cluster == "":
		return &Refusal{Caller: c, Owner: o, HasOwner: true, Err: ErrFleetRightsRequired}
	case o.Cluster != c.Cluster:
		return &Refusal{Caller: c, Owner: o, HasOwner: true, Err: ErrOwnerOutsideCluster}
	}
	return nil
}

// Read decides whether c may read o's allocation: a cluster-bound caller
// its own cluster's and those of no cluster (clusterset VIPs, which every
// member's importer needs).
func (a Access) Read(c Caller, o Owner) error {
	if err := a.admit(c); err != nil {
		return err
	}
	if c.Bound() && o.Cluster != "" && o.Cluster != c.Cluster {
		return &Refusal{Caller: c, Owner: o, HasOwner: true, Err: ErrOwnerOutsideCluster}
	}
	return nil
}

// List decides a listing of allocations whose owners are of cluster (any
// cluster when empty): it returns the cluster whose allocations, with
// those of no cluster, are all c may see ("" when c sees all), or a
// refusal when c asks for another cluster's by name.
func (a Access) List(c Caller, cluster string) (scope string, err error) {
	if err := a.admit(c); err != nil {
		return "", err
	}
	if !c.Bound() {
		return "", nil
	}
	if cluster != "" && cluster != c.Cluster {
		return "", &Refusal{Caller: c, Owner: Owner{Cluster: cluster}, HasOwner: true, Err: ErrOwnerOutsideCluster}
	}
	return c.Cluster, nil
}

// Watch decides whether c may watch allocations: a watch streams every
// owner of its pools, so it needs fleet rights.
func (a Access) Watch(c Caller) error {
	if err := a.admit(c); err != nil {
		return err
	}
	if c.Bound() {
		return &Refusal{Caller: c, Err: ErrFleetRightsRequired}
	}
	return nil
}

// ManagePools decides whether c may create, change or delete pools: a
// change to a pool reaches every cluster's allocations in it (a forced
// deletion releases them all), so it needs fleet rights.
func (a Access) ManagePools(c Caller) error {
	if err := a.admit(c); err != nil {
		return err
	}
	if c.Bound() {
		return &Refusal{Caller: c, Err: ErrFleetRightsRequired}
	}
	return nil
}
