package server

import (
	"context"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/pagination"
)

// SourceInfo is one source cluster as the importer follows it.
type SourceInfo struct {
	Cluster, Addr, ServerName string
	// Running is false when the source cannot be followed (Err says why)
	// or left (LeftAt).
	Running   bool
	Connected bool
	Synced    bool
	Epoch     string
	Revision  uint64
	LastHeard time.Time
	Since     time.Time
	LeftAt    time.Time
	// Err is why the last stream ended, or why the source cannot be
	// followed.
	Err      string
	Exported int
	// Refusal is the stable reason the source's membership is refused,
	// if it is.
	Refusal string
	// Identity is the principal of the membership's certificate.
	Identity string
}

// ListSources lists the source clusters in name order, a page at a time.
func (s *Server) ListSources(_ context.Context, req *importerv1.ListSourcesRequest) (*importerv1.ListSourcesResponse, error) {
	var v violations
	size, after := page(&v, req.GetPageSize(), req.GetPageToken())
	if err := v.err(); err != nil {
		return nil, err
	}
	resp := &importerv1.ListSourcesResponse{}
	if s.cfg.Sources == nil {
		return resp, nil
	}
	now := time.Now()
	for _, info := range s.cfg.Sources() { // sorted by cluster
		if info.Cluster <= after {
			continue
		}
		if len(resp.Sources) == size {
			resp.NextPageToken = pagination.Encode(resp.Sources[len(resp.Sources)-1].GetCluster())
			break
		}
		resp.Sources = append(resp.Sources, sourceToProto(info, now))
	}
	return resp, nil
}

func sourceToProto(info SourceInfo, now time.Time) *importerv1.Source {
	out := &importerv1.Source{
		Cluster: info.Cluster, Address: info.Addr, TlsServerName: info.ServerName,
		Synced: info.Synced, Epoch: info.Epoch, Revision: info.Revision,
		LastError: clip(info.Err, 512), ExportedServices: uint32(info.Exported),
		RefusalReason: info.Refusal, PeerIdentity: clip(info.Identity, 512),
	}
	switch {
	case !info.LeftAt.IsZero():
		out.State = importerv1.SourceState_SOURCE_STATE_LEFT
		out.LeftTime = timestamppb.New(info.LeftAt)
	case !info.Running:
		out.State = importerv1.SourceState_SOURCE_STATE_FAILED
	case info.Connected:
		out.State = importerv1.SourceState_SOURCE_STATE_CONNECTED
	case info.Refusal != "":
		out.State = importerv1.SourceState_SOURCE_STATE_REFUSED
	case info.Err != "" || info.Synced:
		out.State = importerv1.SourceState_SOURCE_STATE_DISCONNECTED
	default:
		out.State = importerv1.SourceState_SOURCE_STATE_CONNECTING
	}
	if !info.LastHeard.IsZero() {
		out.LastHeardTime = timestamppb.New(info.LastHeard)
		if out.State != importerv1.SourceState_SOURCE_STATE_CONNECTED {
			out.Lag = durationpb.New(now.Sub(info.LastHeard))
		}
	}
	if !info.Since.IsZero() {
		out.SinceTime = timestamppb.New(info.Since)
	}
	return out
}

// clip cuts s to at most n bytes on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
