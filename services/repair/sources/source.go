// Package sources follows, for repair, the services each source cluster
// exports, through its membership's WatchServices stream (exported_only):
// a ClusterSetService owner is alive while some source exports it. It is
// repair's membership adapter, as the importer's package sources is the
// importer's.
package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

// Backoff between two attempts to watch a source.
const (
	sourceBackoffMin = 200 * time.Millisecond
	sourceBackoffMax = 5 * time.Second
)

// Source follows the exported services of one source cluster's membership
// through WatchServices (exported_only). It is safe for concurrent use.
type Source struct {
	name   string
	addr   string
	client membershipv1.MembershipServiceClient
	logger *slog.Logger

	mu sync.RWMutex
	// exported is the last complete view: kept while the stream is down,
	// so reports stay readable, but the source then counts as unsynced.
	exported map[serviceKey]struct{}
	synced   bool
	why      string
}

type serviceKey struct{ namespace, name string }

// NewSource returns a source named name (the source cluster, for messages)
// reached at addr through conn. Run starts following it.
func NewSource(name, addr string, conn grpc.ClientConnInterface, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{
		name:     name,
		addr:     addr,
		client:   membershipv1.NewMembershipServiceClient(conn),
		logger:   logger.With("source", name, "addr", addr),
		exported: map[serviceKey]struct{}{},
		why:      "connecting, no snapshot yet",
	}
}

// Name returns the source's name.
func (s *Source) Name() string { return s.name }

// Exports reports whether the source's last snapshot (kept current by the
// stream) has the service namespace/name exported.
func (s *Source) Exports(namespace, name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.exported[serviceKey{namespace, name}]
	return ok
}

// Len returns the number of exported services the source is known to have.
func (s *Source) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.exported)
}

// Problem says why the source's view is not complete and current, or ""
// when it is.
func (s *Source) Problem() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.synced {
		return ""
	}
	return fmt.Sprintf("source %s (%s): %s", s.name, s.addr, s.why)
}

func (s *Source) setProblem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced {
		s.logger.Warn("source out of sync", "problem", p)
	}
	s.synced, s.why = false, p
}

// Run follows the source until ctx ends. Every (re)connection starts with
// a fresh snapshot: what changed while the stream was down is then never a
// guess.
func (s *Source) Run(ctx context.Context) {
	backoff := sourceBackoffMin
	for ctx.Err() == nil {
		complete, err := s.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		s.setProblem("not reachable: " + describe(err))
		if complete {
			backoff = sourceBackoffMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, sourceBackoffMax)
	}
}

// watch runs one stream; complete says whether it delivered a whole
// snapshot before it ended.
func (s *Source) watch(ctx context.Context) (complete bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.client.WatchServices(ctx, &membershipv1.WatchServicesRequest{ExportedOnly: true})
	if err != nil {
		return false, err
	}
	// pending collects a snapshot between SNAPSHOT_START and SNAPSHOT_END.
	var pending map[serviceKey]struct{}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended by the server")
			}
			return complete, err
		}
		switch ev.GetType() {
		case membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START:
			pending = map[serviceKey]struct{}{}
			s.setProblem("snapshot in progress")
		case membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END:
			if pending == nil {
				return complete, errors.New("SNAPSHOT_END without SNAPSHOT_START")
			}
			s.mu.Lock()
			s.exported, s.synced, s.why = pending, true, ""
			s.mu.Unlock()
			s.logger.Info("source synced", "exported_services", len(pending))
			pending, complete = nil, true
		case membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT, membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE:
			key, ok := parseServiceName(ev.GetEndpoints().GetService())
			if !ok {
				s.logger.Warn("ignoring event with a malformed service name", "service", ev.GetEndpoints().GetService())
				continue
			}
			exported := ev.GetType() == membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT &&
				(ev.GetEndpoints().GetExport() == nil || ev.GetEndpoints().GetExport().GetExported())
			if pending != nil {
				apply(pending, key, exported)
				continue
			}
			if !complete {
				// Changes before any snapshot cannot be placed.
				return false, fmt.Errorf("event %s before a snapshot", ev.GetType())
			}
			s.mu.Lock()
			apply(s.exported, key, exported)
			s.mu.Unlock()
		}
	}
}

func apply(m map[serviceKey]struct{}, key serviceKey, exported bool) {
	if exported {
		m[key] = struct{}{}
	} else {
		delete(m, key)
	}
}

// parseServiceName splits "namespaces/{namespace}/services/{name}".
func parseServiceName(s string) (serviceKey, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 || parts[0] != "namespaces" || parts[2] != "services" || parts[1] == "" || parts[3] == "" {
		return serviceKey{}, false
	}
	return serviceKey{parts[1], parts[3]}, true
}

// describe shortens a gRPC error to its code and message.
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}
