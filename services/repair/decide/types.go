package decide

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/plexusnet/plexus/internal/owner"
)

// Errors of the package. Callers test them with errors.Is.
var (
	// ErrInvalidInput means the input cannot be judged safely (a malformed
	// address, an allocation listed twice, an allocation without an etag,
	// a bad configuration). Nothing is decided.
	ErrInvalidInput = errors.New("repair: invalid input")
	// ErrChangedHands is what an adapter reports for a guarded release
	// the allocator refused because the allocation is no longer the one
	// the pass saw: its etag or owner uid differs, or it is gone.
	ErrChangedHands = errors.New("repair: allocation changed hands")
	// ErrUnknownRelease means a release outcome was recorded for an
	// allocation the pass did not plan to release.
	ErrUnknownRelease = errors.New("repair: outcome for a release that was not planned")
)

// ImporterManagedBy is the endpointslice.kubernetes.io/managed-by value of
// the slices the importer writes; slices of any other manager are never
// touched.
const ImporterManagedBy = "importer.plexus.dev"

// Identity names an owner independently of its uid.
type Identity = owner.Identity

// Owner is the holder of an allocation or of a claim.
type Owner = owner.Owner

// same reports whether a and b are the same owner (owner.Same).
func same(a, b Owner) bool { return owner.Same(a, b) }

// Allocation is one allocated address as the allocator listed it.
type Allocation struct {
	Pool    string
	Address netip.Addr
	Owner   Owner
	// Etag is the allocation's etag (the allocator's revision of it, in
	// decimal); a guarded release must present it.
	Etag       string
	CreateTime time.Time
}

// Key returns the key under which the allocation's strikes and release
// outcome are recorded.
func (a Allocation) Key() AllocationKey {
	return AllocationKey{Pool: a.Pool, Address: a.Address, Etag: a.Etag}
}

// AllocationKey identifies one allocation of one address: the same address
// allocated again has another etag and so another key.
type AllocationKey struct {
	Pool    string
	Address netip.Addr
	Etag    string
}

// String returns pool/address@etag.
func (k AllocationKey) String() string {
	return k.Pool + "/" + k.Address.String() + "@" + k.Etag
}

// Pool is a pool's id and the CIDRs it covers now.
type Pool struct {
	ID    string
	CIDRs []netip.Prefix
	// Deleting is set while a forced DeletePool releases the pool's
	// allocations in chunks, and after one was cut short.
	Deleting bool
	// Etag is the pool's etag; finishing a stalled deletion presents it.
	Etag string
	// UpdateTime is when the pool last changed: for a pool being deleted,
	// when it was marked deleting.
	UpdateTime time.Time
}

// Claim is a use of an address outside the allocator: a Service's
// clusterIP, a Pod's IP, an external workload's address.
type Claim struct {
	Address netip.Addr
	Owner   Owner
	// Source says where the claim was seen, for messages
	// (e.g. "Service.spec.clusterIPs").
	Source string
}

// Slice is an EndpointSlice together with what the adapter found of the
// objects it belongs to.
type Slice struct {
	Namespace string
	Name      string
	UID       string
	// ResourceVersion and UID let the adapter delete with preconditions,
	// so a slice rewritten since the pass read it is not deleted.
	ResourceVersion string
	// ManagedBy is the endpointslice.kubernetes.io/managed-by label.
	ManagedBy string
	// ServiceName is the kubernetes.io/service-name label.
	ServiceName string
	CreateTime  time.Time
	// ImportExists and ServiceExists say whether the ServiceImport and
	// the derived Service named ServiceName exist in Namespace.
	ImportExists  bool
	ServiceExists bool
}

// SliceRef names a slice and the version of it the pass saw.
type SliceRef struct {
	Namespace       string
	Name            string
	UID             string
	ResourceVersion string
	ServiceName     string
}

// Scope is a (kind, cluster) pair whose owners the view can resolve.
// ClusterSetService owners have no cluster: their scope has Cluster "".
type Scope struct {
	Kind    string
	Cluster string
}

// Config holds the rules of a pass.
type Config struct {
	// LeakStrikes is the number of consecutive passes a leak must be seen
	// in before it is released.
	LeakStrikes int
	// LeakGrace is the age an allocation must exceed before it is
	// released.
	LeakGrace time.Duration
	// MaxReleaseFraction bounds the releases of one pass per pool, as a
	// fraction of the pool's allocations (0 turns releases off).
	MaxReleaseFraction float64
	// Resolvable lists the owners the view can judge; owners outside it
	// are never reported as leaks.
	Resolvable []Scope
	// ClusterBound says the repair's identity is bound to its member
	// cluster: the allocator lets it release that cluster's allocations
	// only. Leaked clusterset VIPs (owners of no cluster) are then
	// reported, left to a repair with fleet rights, and so are stalled
	// pool deletions, whose finishing releases every cluster's addresses.
	ClusterBound bool
}

// Defaults of Config.
const (
	DefaultLeakStrikes        = 3
	DefaultLeakGrace          = 60 * time.Second
	DefaultMaxReleaseFraction = 0.10
)

// DefaultConfig returns the default rules, with no resolvable owners.
func DefaultConfig() Config {
	return Config{LeakStrikes: DefaultLeakStrikes, LeakGrace: DefaultLeakGrace, MaxReleaseFraction: DefaultMaxReleaseFraction}
}

// Validate reports a configuration that cannot be applied.
func (c Config) Validate() error {
	switch {
	case c.LeakStrikes < 1:
		return fmt.Errorf("leak strikes %d: must be at least 1: %w", c.LeakStrikes, ErrInvalidInput)
	case c.LeakGrace < 0:
		return fmt.Errorf("leak grace %s: must not be negative: %w", c.LeakGrace, ErrInvalidInput)
	case math.IsNaN(c.MaxReleaseFraction) || c.MaxReleaseFraction < 0 || c.MaxReleaseFraction > 1:
		return fmt.Errorf("max release fraction %v: must be within [0, 1]: %w", c.MaxReleaseFraction, ErrInvalidInput)
	}
	return nil
}

// releaseLimit is how many of n allocations of a pool one pass may release.
func (c Config) releaseLimit(n int) int {
	if c.MaxReleaseFraction <= 0 || n == 0 {
		return 0
	}
	// The epsilon keeps 0.29 × 100 at 29 despite binary rounding.
	limit := int(math.Floor(c.MaxReleaseFraction*float64(n) + 1e-9))
	return max(limit, 1)
}

// Input is everything one pass looks at.
type Input struct {
	Now         time.Time
	Pools       []Pool
	Allocations []Allocation
	// Owners answers which owners exist and who else claims an address.
	// It is consulted once per allocation; it may be backed by live
	// informer caches, as the guarded release covers what changes during
	// the pass.
	Owners OwnerView
	// Slices are EndpointSlices to judge; only those managed by the
	// importer are considered.
	Slices []Slice
	// Synced is false when the view is incomplete (an informer not
	// synced, a source unreachable); UnsyncedReason says which.
	Synced         bool
	UnsyncedReason string
	DryRun         bool
	// Strikes is Output.Strikes of the previous pass (zero on the first).
	Strikes Strikes
	Config  Config
}

// Kind is the kind of a finding.
type Kind string

// Finding kinds.
const (
	KindLeak          Kind = "LEAK"
	KindOwnerMismatch Kind = "OWNER_MISMATCH"
	KindDuplicate     Kind = "DUPLICATE"
	KindOutOfRange    Kind = "OUT_OF_RANGE"
	KindOrphanedSlice Kind = "ORPHANED_SLICE"
	// KindStalledDeletion: a pool marked deleting held as many
	// allocations as in the pass before.
	KindStalledDeletion Kind = "STALLED_DELETION"
)

// Kinds lists every finding kind, for metrics that must exist at zero.
var Kinds = []Kind{KindLeak, KindOwnerMismatch, KindDuplicate, KindOutOfRange, KindOrphanedSlice, KindStalledDeletion}

// Action is what a pass does, or did, about a finding.
type Action string

// Actions. The last three are set by Output.ApplyReleaseResults.
const (
	// ActionReported: nothing is done automatically.
	ActionReported Action = "REPORTED"
	// ActionWaitingStrikes: a leak candidate not yet seen in enough
	// consecutive passes.
	ActionWaitingStrikes Action = "WAITING_STRIKES"
	// ActionWaitingGrace: a leak candidate (or orphaned slice) younger
	// than the grace period.
	ActionWaitingGrace Action = "WAITING_GRACE"
	// ActionRelease: a guarded release is planned (Output.Releases).
	ActionRelease Action = "RELEASE"
	// ActionLimited: would be released, but the pool's release limit for
	// this pass is used up; strikes are kept.
	ActionLimited Action = "LIMITED"
	// ActionDryRun: a release or deletion would happen, but this is a
	// dry run.
	ActionDryRun Action = "DRY_RUN"
	// ActionDelete: the orphaned slice is to be deleted
	// (Output.SliceDeletes), or the pool's stalled deletion finished
	// (Output.PoolDeletes).
	ActionDelete Action = "DELETE"
	// ActionReleased: the guarded release succeeded.
	ActionReleased Action = "RELEASED"
	// ActionReleaseRefused: the allocator refused the guarded release:
	// the allocation changed hands since the pass read it.
	ActionReleaseRefused Action = "RELEASE_REFUSED"
	// ActionReleaseFailed: the release failed otherwise; it is tried
	// again by a later pass.
	ActionReleaseFailed Action = "RELEASE_FAILED"
)

// Actions lists every action, for metrics that must exist at zero.
var Actions = []Action{ActionReported, ActionWaitingStrikes, ActionWaitingGrace, ActionRelease, ActionLimited,
	ActionDryRun, ActionDelete, ActionReleased, ActionReleaseRefused, ActionReleaseFailed}

// Finding is one thing found wrong.
type Finding struct {
	Kind Kind
	// Pool, Address, Owner and Etag are those of the allocation the
	// finding is about (empty for ORPHANED_SLICE).
	Pool    string
	Address netip.Addr
	Owner   Owner
	Etag    string
	// Other is the other claimant of a DUPLICATE; OtherPool is set when
	// it is an allocation in another pool.
	Other     Owner
	OtherPool string
	// Slice is set for ORPHANED_SLICE.
	Slice SliceRef
	// Strikes is the number of consecutive passes a leak candidate has
	// been seen in, counting this one.
	Strikes   int
	Action    Action
	Message   string
	FirstSeen time.Time
}

// Release is a guarded release to perform: the adapter must pass both Etag
// and OwnerUID to the allocator.
type Release struct {
	Pool     string
	Address  netip.Addr
	Etag     string
	OwnerUID string
	Owner    Owner
}

// Key returns the key under which the release's outcome is recorded.
func (r Release) Key() AllocationKey {
	return AllocationKey{Pool: r.Pool, Address: r.Address, Etag: r.Etag}
}

// PoolDelete is a stalled deletion to finish: the adapter must delete the
// pool with force, guarded by Etag, so that a pool changed or created again
// since the pass read it is left alone.
type PoolDelete struct {
	Pool string
	Etag string
}

// PassState says whether a pass could act.
type PassState string

// Pass states.
const (
	// StateComplete: the view was complete and the pass could act.
	StateComplete PassState = "COMPLETE"
	// StateUnsynced: the view was incomplete; nothing was acted on.
	StateUnsynced PassState = "UNSYNCED"
)

// Stats counts what a pass looked at.
type Stats struct {
	Allocations int
	// Unresolved counts allocations whose owner is outside
	// Config.Resolvable and so could not be judged as leaks.
	Unresolved int
	// InDeletion counts allocations of pools being deleted: they go with
	// their pool and are not judged.
	InDeletion int
	Slices     int
}

// Output is the decision of one pass.
type Output struct {
	State  PassState
	Reason string
	DryRun bool
	// Findings, sorted by pool, address, kind.
	Findings []Finding
	// Releases to perform, sorted by pool and address.
	Releases []Release
	// SliceDeletes to perform, sorted by namespace and name.
	SliceDeletes []SliceRef
	// PoolDeletes are the stalled pool deletions to finish, sorted by
	// pool.
	PoolDeletes []PoolDelete
	// Strikes is to be passed to the next pass.
	Strikes Strikes
	Stats   Stats
}
