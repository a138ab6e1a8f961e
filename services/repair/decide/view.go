package decide

import "net/netip"

// OwnerView is what a pass knows of the owners that exist and of the other
// uses of addresses. The adapter implements it over its informers and the
// membership snapshots; Snapshot is a ready-made implementation. A large
// pass calls it from several goroutines at once, so it must be safe for
// concurrent use (informer caches are).
type OwnerView interface {
	// UIDs returns the uids of the existing owners with identity id; none
	// means no such owner exists. An empty uid means an owner that exists
	// but has no uid to compare (a clusterset service): it keeps any
	// allocation of that identity alive.
	UIDs(id Identity) []string
	// Claims returns the claims on addr made outside the allocator.
	Claims(addr netip.Addr) []Claim
}

// Snapshot is an OwnerView held in memory: owners and claims are added once
// and then only read. It is safe for concurrent reads once filled.
type Snapshot struct {
	owners map[Identity][]string
	claims map[netip.Addr][]Claim
}

// NewSnapshot returns an empty snapshot; sizeHint is the expected number of
// owners.
func NewSnapshot(sizeHint int) *Snapshot {
	return &Snapshot{owners: make(map[Identity][]string, sizeHint), claims: make(map[netip.Addr][]Claim)}
}

// AddOwner records that o exists.
func (s *Snapshot) AddOwner(o Owner) {
	id := o.Identity()
	for _, u := range s.owners[id] {
		if u == o.UID {
			return
		}
	}
	s.owners[id] = append(s.owners[id], o.UID)
}

// AddClaim records a claim on an address.
func (s *Snapshot) AddClaim(c Claim) {
	s.claims[c.Address] = append(s.claims[c.Address], c)
}

// UIDs implements OwnerView.
func (s *Snapshot) UIDs(id Identity) []string { return s.owners[id] }

// Claims implements OwnerView.
func (s *Snapshot) Claims(addr netip.Addr) []Claim { return s.claims[addr] }
