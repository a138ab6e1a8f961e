// Package repairtest holds what the repair tests share: a real allocator
// served on loopback (memory store), an owner view held in memory that a
// test changes as it likes, and a source membership whose exports it
// changes.
package repairtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocdecide "github.com/plexusnet/plexus/services/allocator/decide"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
	"github.com/plexusnet/plexus/services/repair/decide"
)

// Allocator is an allocator server on a loopback port.
type Allocator struct {
	// Addr is the gRPC address.
	Addr string
	// Client is a client of it.
	Client allocatorv1.AllocatorServiceClient
	stop   func()
	once   sync.Once
}

// StartAllocator starts an allocator with a memory store; it stops when
// the test ends or on Stop.
func StartAllocator(t testing.TB) *Allocator {
	t.Helper()
	return StartAllocatorOn(t, memory.New())
}

// StartAllocatorOn starts an allocator on st, with what a test wrote there
// before; st is closed with it.
func StartAllocatorOn(t testing.TB, st store.Store) *Allocator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := allocation.New(ctx, st)
	if err != nil {
		cancel()
		t.Fatalf("allocator: %v", err)
	}
	gs := grpc.NewServer()
	allocserver.New(svc, nil).Register(gs)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = gs.Serve(lis) }()
	conn, err := dial.New(lis.Addr().String())
	if err != nil {
		cancel()
		t.Fatalf("dial allocator: %v", err)
	}
	a := &Allocator{Addr: lis.Addr().String(), Client: allocatorv1.NewAllocatorServiceClient(conn)}
	a.stop = func() {
		conn.Close()
		gs.Stop()
		cancel()
		st.Close()
	}
	t.Cleanup(a.Stop)
	return a
}

// StalledDeletion writes to st pool id (cidr) marked deleting an hour ago,
// holding n allocations from the first address of cidr on, to Pods
// cluster/ns/gone-0 .. gone-(n-1): what a forced deletion in chunks leaves
// when the replica doing it stops half way. Start an allocator on st
// after it.
func StalledDeletion(t testing.TB, st store.Store, id, cidr, cluster, ns string, n int) {
	t.Helper()
	marked := time.Now().Add(-time.Hour).UTC()
	txn := store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{
		ID: id, CIDRs: []string{cidr}, Deleting: true, CreateTime: marked, UpdateTime: marked}}}}
	addr := netip.MustParsePrefix(cidr).Addr()
	for i := range n {
		addr = addr.Next()
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
			Pool: id, Address: addr, CreateTime: marked,
			Owner: allocdecide.Owner{Cluster: cluster, Kind: "Pod", Namespace: ns, Name: "gone-" + strconv.Itoa(i), UID: "uid-gone-" + strconv.Itoa(i)}}})
	}
	if _, err := st.Commit(context.Background(), txn); err != nil {
		t.Fatalf("write a stalled deletion of pool %s: %v", id, err)
	}
}

// Stop stops the server; calls made afterwards fail with UNAVAILABLE.
func (a *Allocator) Stop() { a.once.Do(a.stop) }

// View is an owner view in memory, safe for concurrent use. The zero value
// is not usable; call NewView.
type View struct {
	mu       sync.RWMutex
	owners   map[decide.Identity][]string
	claims   map[netip.Addr][]decide.Claim
	slices   []decide.Slice
	synced   func() (bool, string)
	deleted  []decide.SliceRef
	deleteFn func(decide.SliceRef) error
}

// NewView returns an empty, synced view.
func NewView() *View {
	return &View{owners: map[decide.Identity][]string{}, claims: map[netip.Addr][]decide.Claim{}}
}

// AddOwner records that o exists.
func (v *View) AddOwner(o decide.Owner) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.owners[o.Identity()] = append(v.owners[o.Identity()], o.UID)
}

// RemoveOwner records that o no longer exists.
func (v *View) RemoveOwner(o decide.Owner) {
	v.mu.Lock()
	defer v.mu.Unlock()
	uids := v.owners[o.Identity()]
	for i, u := range uids {
		if u == o.UID {
			uids = append(uids[:i:i], uids[i+1:]...)
			break
		}
	}
	if len(uids) == 0 {
		delete(v.owners, o.Identity())
	} else {
		v.owners[o.Identity()] = uids
	}
}

// Exists reports whether o exists.
func (v *View) Exists(o decide.Owner) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, u := range v.owners[o.Identity()] {
		if u == o.UID {
			return true
		}
	}
	return false
}

// AddClaim records a claim outside the allocator.
func (v *View) AddClaim(c decide.Claim) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.claims[c.Address] = append(v.claims[c.Address], c)
}

// SetSlices replaces the slices.
func (v *View) SetSlices(s ...decide.Slice) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.slices = append([]decide.Slice(nil), s...)
}

// SetSynced replaces what Synced answers; fn is called on every Synced.
func (v *View) SetSynced(fn func() (bool, string)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.synced = fn
}

// SetDeleteSlice makes DeleteSlice answer with fn.
func (v *View) SetDeleteSlice(fn func(decide.SliceRef) error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.deleteFn = fn
}

// Deleted returns the slices DeleteSlice was asked to delete.
func (v *View) Deleted() []decide.SliceRef {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]decide.SliceRef(nil), v.deleted...)
}

// UIDs implements decide.OwnerView.
func (v *View) UIDs(id decide.Identity) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]string(nil), v.owners[id]...)
}

// Claims implements decide.OwnerView.
func (v *View) Claims(addr netip.Addr) []decide.Claim {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]decide.Claim(nil), v.claims[addr]...)
}

// Synced implements pass.View.
func (v *View) Synced() (bool, string) {
	v.mu.RLock()
	fn := v.synced
	v.mu.RUnlock()
	if fn == nil {
		return true, ""
	}
	return fn()
}

// Slices implements pass.View.
func (v *View) Slices() []decide.Slice {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]decide.Slice(nil), v.slices...)
}

// DeleteSlice implements pass.View.
func (v *View) DeleteSlice(_ context.Context, ref decide.SliceRef) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if ref.UID == "" || ref.ResourceVersion == "" {
		return errors.New("delete without preconditions")
	}
	v.deleted = append(v.deleted, ref)
	if v.deleteFn != nil {
		return v.deleteFn(ref)
	}
	return nil
}

// Reference implements pass.View: every existing owner is a Pod.
func (v *View) Reference(o decide.Owner) *corev1.ObjectReference {
	v.mu.RLock()
	defer v.mu.RUnlock()
	uids := v.owners[o.Identity()]
	if len(uids) == 0 {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.Namespace, Name: o.Name, UID: types.UID(uids[0])}
}

// Membership is a membership on a loopback port that serves WatchServices
// (exported_only) from a set the test changes: a snapshot on every call,
// then the changes.
type Membership struct {
	membershipv1.UnimplementedMembershipServiceServer
	mu       sync.Mutex
	exported map[string]bool
	subs     map[chan *membershipv1.WatchServicesResponse]struct{}
	// Addr is the gRPC address.
	Addr string
}

// StartMembership starts a Membership exporting the services named
// ("ns/name"), until the test ends.
func StartMembership(t testing.TB, exported ...string) *Membership {
	t.Helper()
	m := &Membership{exported: map[string]bool{}, subs: map[chan *membershipv1.WatchServicesResponse]struct{}{}}
	for _, s := range exported {
		m.exported[s] = true
	}
	gs := grpc.NewServer()
	membershipv1.RegisterMembershipServiceServer(gs, m)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = gs.Serve(lis) }()
	m.Addr = lis.Addr().String()
	t.Cleanup(gs.Stop)
	return m
}

func serviceName(nsName string) string {
	ns, name, _ := strings.Cut(nsName, "/")
	return "namespaces/" + ns + "/services/" + name
}

// Set exports ("ns/name", true) or unexports a service.
func (m *Membership) Set(nsName string, exported bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev := &membershipv1.WatchServicesResponse{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE,
		Endpoints: &membershipv1.ServiceEndpoints{Service: serviceName(nsName), Cluster: "source"}}
	if exported {
		ev.Type = membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT
		ev.Endpoints.Export = &membershipv1.ExportInfo{Exported: true}
		m.exported[nsName] = true
	} else {
		delete(m.exported, nsName)
	}
	for ch := range m.subs {
		ch <- ev
	}
}

// WatchServices serves the exported set, then its changes.
func (m *Membership) WatchServices(req *membershipv1.WatchServicesRequest, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse]) error {
	if !req.GetExportedOnly() {
		return fmt.Errorf("the fake serves exported_only watches only")
	}
	ch := make(chan *membershipv1.WatchServicesResponse, 64)
	m.mu.Lock()
	snapshot := []*membershipv1.WatchServicesResponse{{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START}}
	for s := range m.exported {
		snapshot = append(snapshot, &membershipv1.WatchServicesResponse{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT,
			Endpoints: &membershipv1.ServiceEndpoints{Service: serviceName(s), Cluster: "source", Export: &membershipv1.ExportInfo{Exported: true}}})
	}
	snapshot = append(snapshot, &membershipv1.WatchServicesResponse{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END})
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}()
	for _, ev := range snapshot {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}
