package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
)

// ReasonClusterIdentity refuses a push or a withdrawal by a caller whose
// identity may not speak for the cluster it names (PERMISSION_DENIED).
const ReasonClusterIdentity = "CLUSTER_IDENTITY_MISMATCH"

// speaksFor checks that the caller may push or withdraw for cluster: a
// cluster-bound identity only for its own cluster (and clusterset, when
// the importer knows it); a fleet identity for any; a shared one, or an
// unauthenticated caller, unless cluster identities are required.
func (s *Server) speaksFor(ctx context.Context, field, cluster string) error {
	id, ok := auth.IdentityFrom(ctx)
	var why string
	switch {
	case ok && id.Cluster != "" && id.Cluster != cluster:
		why = fmt.Sprintf("%s speaks for cluster %s, not %s", id.Principal, id.Cluster, cluster)
	case ok && id.Clusterset != "" && s.cfg.ClusterSet != "" && id.Clusterset != s.cfg.ClusterSet:
		why = fmt.Sprintf("%s belongs to clusterset %s, not %s", id.Principal, id.Clusterset, s.cfg.ClusterSet)
	case s.cfg.RequireClusterIdentities && (!ok || id.Shared):
		why = fmt.Sprintf("cluster identities are required; the caller's names no cluster of the clusterset (%q)", bounded(id.Principal))
	default:
		return nil
	}
	s.refusals.WithLabelValues(ReasonClusterIdentity).Inc()
	if s.cfg.Audit != nil {
		method, _ := grpc.Method(ctx)
		s.cfg.Audit.InfoContext(ctx, "call refused", "principal", bounded(id.Principal), "method", method,
			"reason", ReasonClusterIdentity, "cluster", bounded(cluster))
	}
	return apierr.New(codes.PermissionDenied, ReasonClusterIdentity, clip(field+": "+why, 512), nil)
}
