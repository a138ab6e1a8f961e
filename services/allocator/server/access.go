package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/services/allocator/decide"
)

// WithAccess sets who may touch which allocations (decide.Access); the
// default lets every caller act for every cluster. logger receives the
// audit line of each refusal.
func WithAccess(access decide.Access, logger *slog.Logger) Option {
	return func(s *Server) {
		s.access = access
		if logger != nil {
			s.audit = logger
		}
	}
}

// maxCachedCallers bounds the identities callers keeps: principals come
// from verified certificates and tokens, so a fleet has a few hundred.
const maxCachedCallers = 4096

// callers caches the callers' identities by principal, so a call does not
// parse its principal again: it is read on every call on allocations.
type callers struct {
	byPrincipal sync.Map // string → decide.Caller
	n           atomic.Int64
}

// of is the caller of the call ctx belongs to, as decide.Access sees it:
// the fields of its identity, or, for a principal that names no identity
// Plexus knows and for an anonymous caller, a shared one.
func (c *callers) of(ctx context.Context) decide.Caller {
	p, _ := auth.PrincipalFrom(ctx)
	if v, ok := c.byPrincipal.Load(p); ok {
		return v.(decide.Caller)
	}
	caller := decide.Caller{Principal: p, Shared: true}
	if id, ok := auth.ParseIdentity(p); ok {
		caller = decide.Caller{Principal: p, Clusterset: id.Clusterset, Cluster: id.Cluster, Shared: id.Shared}
	}
	if c.n.Load() < maxCachedCallers {
		if _, loaded := c.byPrincipal.LoadOrStore(p, caller); !loaded {
			c.n.Add(1)
		}
	}
	return caller
}

// failAt is fail for the calls on allocations: a refusal of the caller's
// rights is also written to the audit log and counted by reason.
func (s *Server) failAt(ctx context.Context, pool string, err error) error {
	var r *decide.Refusal
	if !errors.As(err, &r) {
		return s.fail(err)
	}
	st := s.fail(err)
	reason := apierr.Reason(st)
	if s.metrics != nil {
		s.metrics.refusals.WithLabelValues(reason).Inc()
	}
	method, _ := grpc.Method(ctx)
	attrs := []any{"principal", r.Caller.Principal, "method", method, "reason", reason, "pool", pool}
	if r.HasOwner {
		attrs = append(attrs, "owner", r.Owner.Key())
	}
	s.audit.Info("call refused", attrs...)
	return st
}
