package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// fakeAlloc hands out the lowest free address of one pool, idempotently
// per owner, as the allocator does for a small pool.
type fakeAlloc struct {
	allocatorv1.AllocatorServiceClient
	mu    sync.Mutex
	owned map[string]string // owner ns/name -> address
}

func (f *fakeAlloc) BatchAllocate(_ context.Context, req *allocatorv1.BatchAllocateRequest, _ ...grpc.CallOption) (*allocatorv1.BatchAllocateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &allocatorv1.BatchAllocateResponse{}
	for _, r := range req.GetRequests() {
		o := r.GetOwner().GetNamespace() + "/" + r.GetOwner().GetName()
		a, ok := f.owned[o]
		if !ok {
			// The lowest free address, as a small pool hands out.
			for i := 11; ; i++ {
				a = fmt.Sprintf("10.0.0.%d", i)
				if f.holderLocked(a) == "" {
					break
				}
			}
			f.owned[o] = a
		}
		out.Allocations = append(out.Allocations, &allocatorv1.Allocation{Address: a, Owner: r.GetOwner()})
	}
	return out, nil
}

// release is what repair does once no cluster exports the service.
func (f *fakeAlloc) release(owner string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.owned, owner)
}

func (f *fakeAlloc) holder(addr string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holderLocked(addr)
}

func (f *fakeAlloc) holderLocked(addr string) string {
	for o, a := range f.owned {
		if a == addr {
			return o
		}
	}
	return ""
}

// TestVIPsAskedAgainEachTerm: a replica that leads again asks the
// allocator for a service's VIPs instead of reusing what it learnt in an
// earlier term. Meanwhile another leader removed the import, repair
// released its VIP and the allocator gave it to another service.
func TestVIPsAskedAgainEachTerm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc, mcs := memberCluster(ctx, t)

	alloc := &fakeAlloc{owned: map[string]string{}}
	im := newImporter(ctx, t, kc, mcs, alloc, "a")
	ctrl, store := im.ctrl, im.store

	vips := func() []string {
		si, err := mcs.MulticlusterV1beta1().ServiceImports("ns").Get(ctx, "x", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return si.Spec.IPs
	}
	x := sourcetest.Endpoints("ns", "x", []string{"http=80"}, "192.168.1.1")
	_, err := store.Replace("a", exports.OriginWatch, []exports.Update{{Endpoints: x}})
	require.NoError(t, err)

	// Term 1: this replica leads and imports x.
	term1, end1 := context.WithCancel(ctx)
	done1 := make(chan struct{})
	go func() { ctrl.Run(term1); close(done1) }()
	require.Eventually(t, func() bool { return len(vips()) > 0 }, 30*time.Second, 20*time.Millisecond, "term 1: no VIP")
	vip1 := vips()[0]
	end1()
	<-done1

	// Another replica leads: x is withdrawn; that leader removes its
	// ServiceImport and derived Service; repair releases the VIP; the VIP
	// goes to another service y.
	store.Withdraw("a", exports.Key{Namespace: "ns", Name: "x"}, time.Time{}, nil)
	err = mcs.MulticlusterV1beta1().ServiceImports("ns").Delete(ctx, "x", metav1.DeleteOptions{})
	require.NoError(t, err)
	_ = kc.CoreV1().Services("ns").Delete(ctx, "derived-x", metav1.DeleteOptions{})
	alloc.release("ns/x")
	_, err = alloc.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{{Pool: "v4", Owner: &allocatorv1.Owner{Namespace: "other", Name: "y"}}}})
	require.NoError(t, err)
	// x is exported again, while the other replica still leads.
	store.Upsert("a", exports.OriginWatch, exports.Update{Endpoints: x})

	// Term 2: this replica leads again.
	term2, end2 := context.WithCancel(ctx)
	defer end2()
	go ctrl.Run(term2)
	require.Eventually(t, func() bool {
		ips := vips()
		return len(ips) > 0 && alloc.holder(ips[0]) == "ns/x"
	}, 30*time.Second, 20*time.Millisecond, "term 2: the ServiceImport of ns/x keeps %s, which the allocator now holds for %q", vip1, alloc.holder(vip1))
}
