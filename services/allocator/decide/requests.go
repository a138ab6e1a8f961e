package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/plexusnet/plexus/internal/netparse"
)

// ValidatePoolID checks a pool id: a DNS label that starts with a letter.
func ValidatePoolID(field, id string) error {
	if !isPoolID(id) {
		return Invalid(field, "INVALID_POOL_ID", "pool id %s must be 1-63 lowercase letters, digits or '-', starting with a letter and not ending with '-'", Clip(id))
	}
	return nil
}

// isPoolID reports whether id matches ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$.
// It runs on every call, so it is a loop rather than a regular expression
// (which cost a tenth of the allocator's CPU per call under load).
func isPoolID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] < 'a' || id[0] > 'z' || id[len(id)-1] == '-' {
		return false
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Request asks for one address.
type Request struct {
	Pool  string
	Owner Owner
	// Address, when valid, asks for this address.
	Address   netip.Addr
	RequestID string
	// Creator is the member cluster of the caller that asks, empty for a
	// fleet or shared caller: the allocation records it, and a clusterset
	// VIP's counts against its cluster quota (ChargedCluster).
	Creator string
}

// Validate checks a request; prefix goes before the fields it names
// ("requests[3]." in a batch).
func (r Request) Validate(prefix string) error {
	if err := ValidatePoolID(prefix+"pool", r.Pool); err != nil {
		return err
	}
	if r.Owner.Kind == "" {
		return Invalid(prefix+"owner.kind", "REQUIRED", "owner kind is required")
	}
	if r.Owner.Name == "" {
		return Invalid(prefix+"owner.name", "REQUIRED", "owner name is required")
	}
	for _, f := range []struct{ name, v string }{{"cluster", r.Owner.Cluster}, {"kind", r.Owner.Kind}, {"namespace", r.Owner.Namespace}, {"name", r.Owner.Name}, {"uid", r.Owner.UID}} {
		if err := validateOwnerField(prefix+"owner."+f.name, f.v); err != nil {
			return err
		}
	}
	if len(r.RequestID) > 128 {
		return Invalid(prefix+"request_id", "INVALID_REQUEST_ID", "request_id must be at most 128 characters")
	}
	return nil
}

// PoolSpec is what a user sets on a pool.
type PoolSpec struct {
	CIDRs        []string
	Reserved     []string
	ReuseDelay   time.Duration
	Labels       map[string]string
	AllowOverlap bool
	// ClusterQuota is the most allocations the owners of one member
	// cluster, with the clusterset VIPs its callers created, may hold in
	// the pool (CheckClusterQuota); 0: no quota.
	ClusterQuota uint32
}

// MaxPoolCIDRs is the most CIDRs a pool holds. It bounds the conditions
// of a pool update's transaction (one per range the update removes).
const MaxPoolCIDRs = 32

// Normalize parses the spec strictly and returns canonical text forms.
func (p PoolSpec) Normalize() (PoolSpec, error) {
	out := p
	out.CIDRs = nil
	out.Reserved = nil
	if len(p.CIDRs) == 0 {
		return out, Invalid("pool.cidrs", "REQUIRED", "at least one CIDR is required")
	}
	if len(p.CIDRs) > MaxPoolCIDRs {
		return out, Invalid("pool.cidrs", "TOO_MANY_CIDRS", "%d CIDRs, at most %d", len(p.CIDRs), MaxPoolCIDRs)
	}
	var fam int
	for i, c := range p.CIDRs {
		pfx, err := netparse.ParsePrefix(c)
		if err != nil {
			return out, &FieldError{Field: fmt.Sprintf("pool.cidrs[%d]", i), Reason: "INVALID_CIDR", Message: err.Error(), Err: err}
		}
		f := 4
		if pfx.Addr().Is6() {
			f = 6
		}
		if fam != 0 && f != fam {
			return out, &FieldError{Field: fmt.Sprintf("pool.cidrs[%d]", i), Reason: "ADDRESS_FAMILY_MISMATCH", Message: "all CIDRs of a pool must be of one family", Err: ErrFamilyMismatch}
		}
		fam = f
		out.CIDRs = append(out.CIDRs, pfx.String())
	}
	if len(p.Reserved) > MaxReserved {
		return out, Invalid("pool.reserved", "TOO_MANY_RESERVED", "%d reserved entries, at most %d", len(p.Reserved), MaxReserved)
	}
	if err := ValidateLabels(p.Labels); err != nil {
		return out, err
	}
	for i, r := range p.Reserved {
		rg, err := netparse.ParseRange(r)
		if err != nil {
			return out, &FieldError{Field: fmt.Sprintf("pool.reserved[%d]", i), Reason: "INVALID_RANGE", Message: err.Error(), Err: err}
		}
		if (fam == 4) != rg.First.Is4() {
			return out, &FieldError{Field: fmt.Sprintf("pool.reserved[%d]", i), Reason: "ADDRESS_FAMILY_MISMATCH", Message: "reserved ranges must be of the pool's family", Err: ErrFamilyMismatch}
		}
		out.Reserved = append(out.Reserved, rg.String())
	}
	if p.ReuseDelay < 0 {
		return out, Invalid("pool.reuse_delay", "INVALID_DURATION", "reuse delay must not be negative")
	}
	return out, nil
}

// PoolRequestKey is what a CreatePool's request record holds, in place of
// the allocation keys an Allocate's holds: the pool and a digest of its
// normalized spec.
func PoolRequestKey(id string, spec PoolSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %d %t\n", spec.CIDRs, spec.Reserved, spec.ReuseDelay, spec.AllowOverlap)
	if spec.ClusterQuota > 0 { // so the keys of specs without one stay as they were
		fmt.Fprintf(h, "quota %d\n", spec.ClusterQuota)
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Labels)) {
		fmt.Fprintf(h, "%q=%q\n", k, spec.Labels[k])
	}
	return PoolRequestPrefix + id + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// PoolRequestPrefix marks a request record of a pool creation.
const PoolRequestPrefix = "pool:"

// UpdateMask lists the pool fields an update replaces.
type UpdateMask struct {
	CIDRs, Reserved, ReuseDelay, Labels, AllowOverlap, ClusterQuota bool
}
