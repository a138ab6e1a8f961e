package decide

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/plexusnet/plexus/internal/netparse"
)

// Update returns the spec a pool update leaves: cur with the fields mask
// names taken from spec, normalized. A pool's family (is4) cannot change.
func Update(cur PoolSpec, is4 bool, spec PoolSpec, mask UpdateMask) (PoolSpec, error) {
	merged := cur
	if mask.CIDRs {
		merged.CIDRs = spec.CIDRs
	}
	if mask.Reserved {
		merged.Reserved = spec.Reserved
	}
	if mask.ReuseDelay {
		merged.ReuseDelay = spec.ReuseDelay
	}
	if mask.Labels {
		merged.Labels = spec.Labels
	}
	if mask.AllowOverlap {
		merged.AllowOverlap = spec.AllowOverlap
	}
	if mask.ClusterQuota {
		merged.ClusterQuota = spec.ClusterQuota
	}
	merged, err := merged.Normalize()
	if err != nil {
		return merged, err
	}
	if strings.Contains(merged.CIDRs[0], ":") == is4 {
		return merged, &FieldError{Field: "pool.cidrs", Reason: "ADDRESS_FAMILY_MISMATCH", Message: "a pool's family cannot change", Err: ErrFamilyMismatch}
	}
	return merged, nil
}

// Removed returns the address ranges that the CIDRs from cover and the
// CIDRs to do not: where an update that is not forced must find no
// allocation.
func Removed(from, to []netip.Prefix) []netparse.Range {
	rs := func(ps []netip.Prefix) []netparse.Range {
		out := make([]netparse.Range, len(ps))
		for i, p := range ps {
			out[i] = netparse.PrefixRange(p)
		}
		return out
	}
	return netparse.Subtract(rs(from), rs(to))
}

// Deletion is how a pool deletion goes.
type Deletion int

// Deletions.
const (
	// DeleteAtOnce: one commit deletes the pool with whatever it holds.
	DeleteAtOnce Deletion = iota + 1
	// DeleteInChunks: the pool is marked deleting and its allocations
	// are released a chunk per commit before the pool goes, so that no
	// commit is one revision of a million events that every replica and
	// watcher takes in at once.
	DeleteInChunks
)

// DeletePool decides how a pool that holds held allocations (and has
// inFlight more being committed) is deleted: refused without force while
// it holds any (ErrPoolNotEmpty); in chunks when forced beyond chunk
// allocations, or when a deletion in chunks is under way already (the
// call takes it over); at once otherwise.
func DeletePool(id string, held, inFlight int, force, underWay bool, chunk int) (Deletion, error) {
	if n := held + inFlight; n > 0 && !force {
		return 0, fmt.Errorf("pool %s holds %d allocations; use force: %w", id, n, ErrPoolNotEmpty)
	}
	if force && (underWay || held > chunk) {
		return DeleteInChunks, nil
	}
	return DeleteAtOnce, nil
}
