// Package vips asks the allocator for the clusterset VIPs of imported
// services and remembers its answers for the length of a leadership term.
package vips

import (
	"context"
	"fmt"
	"sync"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/materialize"
)

// Cache allocates clusterset VIPs and remembers them. An allocation is
// idempotent per owner, so asking again is always safe; the cache only
// saves the round trip on every reconcile. The importer never releases a
// VIP: repair does, once no cluster exports the service any more.
type Cache struct {
	client allocatorv1.AllocatorServiceClient
	pools  []string
	guard  func() error // nil: always allowed

	mu    sync.Mutex
	cache map[exports.Key][]string
	cidrs []string // of the pools, once read
}

// New returns a Cache that allocates from pools (at most one per family)
// through client; guard, when set, is asked before every call.
func New(client allocatorv1.AllocatorServiceClient, pools []string, guard func() error) *Cache {
	return &Cache{client: client, pools: pools, guard: guard, cache: map[exports.Key][]string{}}
}

// Enabled reports whether VIPs come from the allocator.
func (v *Cache) Enabled() bool { return len(v.pools) > 0 }

// Owner returns the allocator owner of a clusterset service's VIPs: no
// cluster, so every member cluster's importer gets the same addresses.
func Owner(key exports.Key) *allocatorv1.Owner {
	return &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: key.Namespace, Name: key.Name}
}

// Get returns the service's VIPs, IPv4 first, allocating them in one
// all-or-nothing batch: a dual-stack service gets both families or none.
func (v *Cache) Get(ctx context.Context, key exports.Key) ([]string, error) {
	v.mu.Lock()
	ips, ok := v.cache[key]
	v.mu.Unlock()
	if ok {
		return ips, nil
	}
	// A deposed leader must not allocate either: repair may just have
	// released the VIPs of a service the new leader withdrew.
	if v.guard != nil {
		if err := v.guard(); err != nil {
			return nil, fmt.Errorf("allocate the clusterset VIPs of %s refused: %w", key, err)
		}
	}
	req := &allocatorv1.BatchAllocateRequest{}
	for _, p := range v.pools {
		req.Requests = append(req.Requests, &allocatorv1.AllocateRequest{Pool: p, Owner: Owner(key)})
	}
	resp, err := v.client.BatchAllocate(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("allocate the clusterset VIPs of %s from %v: %w", key, v.pools, err)
	}
	for _, a := range resp.GetAllocations() {
		ips = append(ips, a.GetAddress())
	}
	ips = materialize.SortVIPs(ips)
	v.mu.Lock()
	v.cache[key] = ips
	v.mu.Unlock()
	return ips, nil
}

// Peek returns the cached VIPs, if any.
func (v *Cache) Peek(key exports.Key) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cache[key]
}

// Reset forgets every service: the cache holds what this replica learnt
// while it led, and another leader may since have removed an import whose
// VIPs repair then released and the allocator handed to another service.
func (v *Cache) Reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	clear(v.cache)
}

// Forget drops a service that is no longer imported, so a later import
// asks the allocator again (repair may have released the old VIPs).
func (v *Cache) Forget(key exports.Key) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.cache, key)
}

// CIDRs returns the CIDRs of the VIP pools, read from the allocator once:
// what a member cluster's API server must accept as Service ranges for the
// VIPs to be cluster IPs. (A pool that grows later is read again after a
// restart of the importer.)
func (v *Cache) CIDRs(ctx context.Context) ([]string, error) {
	v.mu.Lock()
	cidrs := v.cidrs
	v.mu.Unlock()
	if cidrs != nil {
		return cidrs, nil
	}
	for _, p := range v.pools {
		resp, err := v.client.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: p})
		if err != nil {
			return nil, fmt.Errorf("read VIP pool %s: %w", p, err)
		}
		cidrs = append(cidrs, resp.GetPool().GetCidrs()...)
	}
	v.mu.Lock()
	v.cidrs = cidrs
	v.mu.Unlock()
	return cidrs, nil
}
