package registry

import (
	"context"
	"fmt"
	"net/netip"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/netparse"
)

// AddressBook says who uses an address in the cluster, as
// "Kind namespace/name" (for example "Pod shop/web-1").
type AddressBook interface {
	AddressHolders(addr string) []string
}

// poolPage is the page size of the pool list an address is looked up in.
const poolPage = 500

// checkAddresses refuses addresses a registration brings that another Pod
// or workload uses (it would be published and imported twice), or that lie
// in an allocator pool without being allocated to this workload (the
// allocator would hand it out again). The check reads caches and the
// allocator before the write, so two registrations racing for one address
// can both pass; repair reports the duplicate.
func (r *Registry) checkAddresses(ctx context.Context, reg Registration) error {
	self := workloadv1alpha1.KindExternalWorkload + " " + reg.Namespace + "/" + reg.Name
	for _, a := range reg.Addresses {
		if r.book != nil {
			for _, h := range r.book.AddressHolders(a) {
				if h != self {
					return fmt.Errorf("%s is used by %s: %w", a, h, ErrAddressInUse)
				}
			}
		}
		if r.alloc != nil {
			if err := r.checkPools(ctx, reg, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPools refuses addr when a pool holds it and has not allocated it to
// this workload.
func (r *Registry) checkPools(ctx context.Context, reg Registration, addr string) error {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, ErrInvalid)
	}
	req := &allocatorv1.ListPoolsRequest{PageSize: poolPage}
	for {
		resp, err := r.alloc.ListPools(ctx, req)
		if err != nil {
			return allocatorError("list pools", err)
		}
		for _, p := range resp.GetPools() {
			if !poolHolds(p, ip) {
				continue
			}
			name := p.GetName() + "/allocations/" + ip.String()
			got, err := r.alloc.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: name})
			switch {
			case apierr.Reason(err) == reasonAllocationNotFound:
				return fmt.Errorf("%s lies in %s and is not allocated: %w", addr, p.GetName(), ErrAddressInPool)
			case err != nil:
				return allocatorError("get allocation "+name, err)
			}
			o := got.GetAllocation().GetOwner()
			if o.GetKind() != workloadv1alpha1.KindExternalWorkload || o.GetCluster() != r.cluster ||
				o.GetNamespace() != reg.Namespace || o.GetName() != reg.Name {
				return fmt.Errorf("%s is allocated in %s to %s %s/%s: %w", addr, p.GetName(), o.GetKind(), o.GetNamespace(), o.GetName(), ErrAddressInPool)
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return nil
		}
	}
}

// poolHolds reports whether the pool may hand out ip: one of its CIDRs
// contains it and none of its reserved ranges does (the allocator never
// hands those out, so they are free for addresses brought along).
func poolHolds(p *allocatorv1.Pool, ip netip.Addr) bool {
	for _, r := range p.GetReserved() {
		if rg, err := netparse.ParseRange(r, netparse.AllowMapped()); err == nil && rg.Contains(ip) {
			return false
		}
	}
	for _, c := range p.GetCidrs() {
		if pre, err := netip.ParsePrefix(c); err == nil && pre.Contains(ip) {
			return true
		}
	}
	return false
}
