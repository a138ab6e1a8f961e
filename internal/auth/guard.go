package auth

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/plexusnet/plexus/internal/apierr"
)

// Reasons of the errors a Guard returns.
const (
	ReasonInvalidToken           = "INVALID_TOKEN"
	ReasonAuthenticationRequired = "AUTHENTICATION_REQUIRED"
	ReasonAccessDenied           = "ACCESS_DENIED"
)

// Guard authenticates callers and authorizes their calls.
type Guard struct {
	tokens *Tokens
	policy *Policy
	open   func(method string) bool
	logger *slog.Logger
}

// NewGuard returns a guard. tokens and policy may be nil: without tokens a
// bearer token is ignored, without a policy every call is allowed. open
// names the methods that need neither (health checks, reflection); it may
// be nil.
func NewGuard(tokens *Tokens, policy *Policy, open func(method string) bool, logger *slog.Logger) *Guard {
	if open == nil {
		open = func(string) bool { return false }
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Guard{tokens: tokens, policy: policy, open: open, logger: logger}
}

// Authorize is the check of one call, shaped as go-grpc-middleware's
// auth.AuthFunc. On success the returned context carries the caller's
// principal (see PrincipalFrom).
func (g *Guard) Authorize(ctx context.Context) (context.Context, error) {
	method, _ := grpc.Method(ctx)
	if g.open(method) {
		return ctx, nil
	}
	principal, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if g.policy != nil {
		// Only a policy reads the whole metadata: a copy of it per call
		// is a policy's cost, not every call's.
		md, _ := metadata.FromIncomingContext(ctx)
		d := g.policy.Decide(Request{Principal: principal, Method: method, Metadata: md})
		if !d.Allowed {
			g.logger.InfoContext(ctx, "call denied", "grpc.method", method, "principal", principal, "rule", d.Rule)
			meta := map[string]string{"method": method}
			if principal == "" {
				return nil, apierr.New(codes.Unauthenticated, ReasonAuthenticationRequired,
					"this method needs an authenticated caller", meta)
			}
			meta["principal"] = principal
			return nil, apierr.New(codes.PermissionDenied, ReasonAccessDenied,
				principal+" may not call "+method, meta)
		}
	}
	if principal == "" {
		return ctx, nil
	}
	return WithPrincipal(ctx, principal), nil
}

func (g *Guard) authenticate(ctx context.Context) (string, error) {
	if g.tokens != nil {
		if vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) > 0 {
			scheme, token, ok := strings.Cut(vals[0], " ")
			if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
				return "", apierr.New(codes.Unauthenticated, ReasonInvalidToken,
					`authorization metadata must be "Bearer <token>"`, nil)
			}
			p, ok := g.tokens.Lookup(strings.TrimSpace(token))
			if !ok {
				return "", apierr.New(codes.Unauthenticated, ReasonInvalidToken, "unknown bearer token", nil)
			}
			return p, nil
		}
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok &&
			len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
			return CertPrincipal(ti.State.PeerCertificates[0]), nil
		}
	}
	return "", nil
}
