// Package sourcetest is a fake source cluster for the importer's tests: a
// MembershipService on a loopback port that serves WatchServices
// (exported-only) from endpoint sets the test sets, with revisions, an
// epoch, resuming, and the failures a real source has (a cut stream, a
// server that goes away and comes back, a restart that changes the epoch).
// Like a real membership it names its cluster on every event; StartTLS
// serves with a certificate, so that a test can give the fake an identity.
package sourcetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

// entry is a service's latest change.
type entry struct {
	value   *membershipv1.ServiceEndpoints // nil once deleted
	rev     uint64
	observe time.Time
	trace   map[string]string
}

// Source is a fake membership service of one cluster.
type Source struct {
	t       testing.TB
	cluster string
	opts    []grpc.ServerOption

	mu       sync.Mutex
	addr     string
	grpc     *grpc.Server
	epoch    string
	rev      uint64
	services map[string]*entry
	subs     map[*subscriber]struct{}
	requests []*membershipv1.WatchServicesRequest
	// refuse, when set, fails every new watch with this status.
	refuse error
}

type subscriber struct {
	mu     sync.Mutex
	queue  []*membershipv1.WatchServicesResponse
	wake   chan struct{}
	cut    chan error
	closed bool
}

func (s *subscriber) push(ev *membershipv1.WatchServicesResponse) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) take() []*membershipv1.WatchServicesResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// Start starts a fake source of cluster on a free loopback port; it stops
// when the test ends.
func Start(t testing.TB, cluster string) *Source {
	t.Helper()
	return start(t, cluster, nil)
}

// StartTLS starts a fake source of cluster that serves TLS with the
// certificate and key in certFile and keyFile.
func StartTLS(t testing.TB, cluster, certFile, keyFile string) *Source {
	t.Helper()
	creds, err := credentials.NewServerTLSFromFile(certFile, keyFile)
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	return start(t, cluster, []grpc.ServerOption{grpc.Creds(creds)})
}

func start(t testing.TB, cluster string, opts []grpc.ServerOption) *Source {
	t.Helper()
	s := &Source{t: t, cluster: cluster, opts: opts, epoch: newEpoch(), services: map[string]*entry{}, subs: map[*subscriber]struct{}{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s.addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

func newEpoch() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Source) serve(lis net.Listener) {
	gs := grpc.NewServer(s.opts...)
	membershipv1.RegisterMembershipServiceServer(gs, &api{s: s})
	s.mu.Lock()
	s.grpc = gs
	s.mu.Unlock()
	go func() { _ = gs.Serve(lis) }()
}

// Addr returns the source's gRPC address.
func (s *Source) Addr() string { return s.addr }

// Cluster returns the source's cluster name.
func (s *Source) Cluster() string { return s.cluster }

// Epoch returns the source's current epoch.
func (s *Source) Epoch() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Revision returns the source's current revision.
func (s *Source) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Stop takes the source down: open streams end and new connections are
// refused until Restart.
func (s *Source) Stop() {
	s.mu.Lock()
	gs := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// Restart brings a stopped source back on the same address. With
// newEpoch the source forgets its history, as a restarted membership does,
// so every client gets a fresh snapshot.
func (s *Source) Restart(newEpochToo bool) {
	s.t.Helper()
	var lis net.Listener
	var err error
	// The port was just released; another process could take it in
	// between, which a test on a loaded machine may see, so try a while.
	for range 50 {
		if lis, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("restart source %s on %s: %v", s.cluster, s.addr, err)
	}
	if newEpochToo {
		s.mu.Lock()
		s.epoch = newEpoch()
		s.mu.Unlock()
	}
	s.serve(lis)
}

// Disconnect cuts every open stream with UNAVAILABLE; clients reconnect.
func (s *Source) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		select {
		case sub.cut <- status.Error(codes.Unavailable, "cut by the test"):
		default:
		}
	}
}

// Refuse makes new watches fail with err (nil to accept them again), as a
// membership that has not synced yet answers.
func (s *Source) Refuse(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = err
}

// Requests returns the watch requests received so far.
func (s *Source) Requests() []*membershipv1.WatchServicesRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*membershipv1.WatchServicesRequest, len(s.requests))
	for i, r := range s.requests {
		out[i] = proto.Clone(r).(*membershipv1.WatchServicesRequest)
	}
	return out
}

// Watchers returns the number of open streams.
func (s *Source) Watchers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// Change is an option of Set and Delete.
type Change func(*entry)

// WithTrace sets the change's trace context.
func WithTrace(tc map[string]string) Change { return func(e *entry) { e.trace = tc } }

// Set exports (or changes) a service's endpoint set. Its cluster is set to
// the source's unless one is given (a membership that passes on another
// cluster's export), and Export.Exported to true unless an Export is
// given. It returns the change's revision.
func (s *Source) Set(eps *membershipv1.ServiceEndpoints, opts ...Change) uint64 {
	eps = proto.Clone(eps).(*membershipv1.ServiceEndpoints)
	if eps.Cluster == "" {
		eps.Cluster = s.cluster
	}
	if eps.Export == nil {
		eps.Export = &membershipv1.ExportInfo{Exported: true}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	e := &entry{value: eps, rev: s.rev, observe: time.Now()}
	for _, o := range opts {
		o(e)
	}
	s.services[eps.GetService()] = e
	s.broadcast(e.event(eps.GetService(), s.cluster, s.epoch))
	return s.rev
}

// Delete withdraws a service ("namespaces/ns/services/name"). It returns
// the change's revision.
func (s *Source) Delete(service string, opts ...Change) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	e := &entry{rev: s.rev, observe: time.Now()}
	for _, o := range opts {
		o(e)
	}
	s.services[service] = e
	s.broadcast(e.event(service, s.cluster, s.epoch))
	return s.rev
}

// Get returns the current endpoint set of a service, or nil.
func (s *Source) Get(service string) *membershipv1.ServiceEndpoints {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.services[service]; e != nil && e.value != nil {
		return proto.Clone(e.value).(*membershipv1.ServiceEndpoints)
	}
	return nil
}

func (s *Source) broadcast(ev *membershipv1.WatchServicesResponse) {
	for sub := range s.subs {
		sub.push(ev)
	}
}

func (e *entry) event(service, cluster, epoch string) *membershipv1.WatchServicesResponse {
	ev := &membershipv1.WatchServicesResponse{Revision: e.rev, Epoch: epoch, TraceContext: e.trace, Cluster: cluster}
	if !e.observe.IsZero() {
		ev.ObserveTime = timestamppb.New(e.observe)
	}
	if e.value != nil {
		ev.Type = membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT
		ev.Endpoints = e.value
	} else {
		ev.Type = membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE
		ev.Endpoints = &membershipv1.ServiceEndpoints{Service: service, Cluster: cluster}
	}
	return ev
}

// subscribe registers a subscriber and returns what it starts with: a
// snapshot, or what it missed when it resumes from this epoch.
func (s *Source) subscribe(req *membershipv1.WatchServicesRequest) (*subscriber, []*membershipv1.WatchServicesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, proto.Clone(req).(*membershipv1.WatchServicesRequest))
	if s.refuse != nil {
		return nil, nil, s.refuse
	}
	if !req.GetExportedOnly() {
		return nil, nil, status.Error(codes.InvalidArgument, "the fake serves exported_only watches only")
	}
	names := make([]string, 0, len(s.services))
	for n := range s.services {
		names = append(names, n)
	}
	var first []*membershipv1.WatchServicesResponse
	if req.GetEpoch() == s.epoch && req.GetStartRevision() > 0 && req.GetStartRevision() <= s.rev {
		slices.SortFunc(names, func(a, b string) int { return cmp.Compare(s.services[a].rev, s.services[b].rev) })
		for _, n := range names {
			if e := s.services[n]; e.rev > req.GetStartRevision() {
				first = append(first, e.event(n, s.cluster, s.epoch))
			}
		}
	} else {
		slices.Sort(names)
		first = append(first, &membershipv1.WatchServicesResponse{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START, Revision: s.rev, Epoch: s.epoch, Cluster: s.cluster})
		for _, n := range names {
			e := s.services[n]
			if e.value == nil {
				continue
			}
			ev := e.event(n, s.cluster, s.epoch)
			ev.Revision = s.rev
			first = append(first, ev)
		}
		first = append(first, &membershipv1.WatchServicesResponse{Type: membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END, Revision: s.rev, Epoch: s.epoch, Cluster: s.cluster})
	}
	sub := &subscriber{wake: make(chan struct{}, 1), cut: make(chan error, 1)}
	s.subs[sub] = struct{}{}
	return sub, first, nil
}

func (s *Source) unsubscribe(sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
}

type api struct {
	membershipv1.UnimplementedMembershipServiceServer
	s *Source
}

func (a *api) WatchServices(req *membershipv1.WatchServicesRequest, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse]) error {
	sub, first, err := a.s.subscribe(req)
	if err != nil {
		return err
	}
	defer a.s.unsubscribe(sub)
	for _, ev := range first {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-sub.cut:
			return err
		case <-sub.wake:
		}
		for _, ev := range sub.take() {
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// Endpoints builds the endpoint set of a service with one IPv4 group on
// the given ports (name=port pairs such as "http=8080") and ready
// endpoints at addrs.
func Endpoints(namespace, name string, ports []string, addrs ...string) *membershipv1.ServiceEndpoints {
	eps := &membershipv1.ServiceEndpoints{
		Service: "namespaces/" + namespace + "/services/" + name,
		Export: &membershipv1.ExportInfo{Exported: true, Type: membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP,
			ExportCreateTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
	}
	g := &membershipv1.EndpointGroup{AddressType: membershipv1.AddressType_ADDRESS_TYPE_IPV4}
	for _, p := range ports {
		pname, num, _ := strings.Cut(p, "=")
		var n int32
		if _, err := fmt.Sscan(num, &n); err != nil {
			panic(fmt.Sprintf("sourcetest: port %q: %v", p, err))
		}
		eps.Ports = append(eps.Ports, &membershipv1.ServicePort{Name: pname, Port: n, Protocol: membershipv1.Protocol_PROTOCOL_TCP})
		g.Ports = append(g.Ports, &membershipv1.EndpointPort{Name: pname, Port: n, Protocol: membershipv1.Protocol_PROTOCOL_TCP})
	}
	for _, a := range addrs {
		g.Endpoints = append(g.Endpoints, &membershipv1.Endpoint{Addresses: []string{a},
			Conditions: &membershipv1.EndpointConditions{Ready: true, Serving: true}})
	}
	eps.Groups = []*membershipv1.EndpointGroup{g}
	return eps
}

// WaitWatchers waits until the source has n open streams.
func (s *Source) WaitWatchers(ctx context.Context, n int) error {
	for {
		if s.Watchers() == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("source %s: %d watchers, want %d: %w", s.cluster, s.Watchers(), n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
