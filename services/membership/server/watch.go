package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// sendBatch is how many queued events a stream takes from its subscription
// at a time.
const sendBatch = 256

// WatchServices streams endpoint sets: a snapshot or what the client missed,
// then changes as they are published.
//
// Sending runs in a goroutine of its own, so that a client that stops
// reading, which blocks a send in flow control, can still be cut off: when
// the hub gives up on the subscription, the handler returns
// RESOURCE_EXHAUSTED (WATCH_TOO_SLOW), which ends the stream and with it the
// blocked send.
func (s *Server) WatchServices(req *membershipv1.WatchServicesRequest, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse]) error {
	var v violations
	checkNamespace(&v, "namespace", req.GetNamespace())
	if err := v.err(); err != nil {
		return err
	}
	if !s.members.IsSynced() {
		return mapError(errNotSynced)
	}
	ctx := stream.Context()
	filter := watch.Filter{Namespace: req.GetNamespace(), ExportedOnly: req.GetExportedOnly()}
	sub := s.hub.Subscribe(filter, watch.Position{Epoch: req.GetEpoch(), Revision: req.GetStartRevision()})
	defer sub.Close()
	s.logger.DebugContext(ctx, "watch started", "namespace", filter.Namespace, "exported_only", filter.ExportedOnly,
		"start_revision", req.GetStartRevision(), "resumed", sub.Resumed(), "snapshot", len(sub.Snapshot()))

	sent := make(chan error, 1)
	go func() { sent <- s.pump(ctx, stream, sub) }()
	var err error
	select {
	case err = <-sent:
	case <-sub.Done():
		err = sub.Err()
	}
	if errors.Is(err, watch.ErrTooSlow) {
		s.disconnects.WithLabelValues("too_slow").Inc()
		s.logger.WarnContext(ctx, "watch cut off: the client fell too far behind", "namespace", filter.Namespace,
			"exported_only", filter.ExportedOnly)
		return mapError(err)
	}
	if errors.Is(err, watch.ErrClosed) || ctx.Err() != nil {
		return nil
	}
	return err
}

// pump sends the subscription's snapshot, then its events, until the
// stream or the subscription ends.
func (s *Server) pump(ctx context.Context, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse], sub *watch.Subscription[*membershipv1.ServiceEndpoints]) error {
	for _, ev := range sub.Snapshot() {
		if err := s.send(stream, ev); err != nil {
			return err
		}
	}
	buf := make([]watch.Event[*membershipv1.ServiceEndpoints], 0, sendBatch)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Done():
			return sub.Err()
		case <-sub.Ready():
		}
		buf = sub.Next(buf[:0], sendBatch)
		for _, ev := range buf {
			if err := s.send(stream, ev); err != nil {
				return err
			}
		}
		clear(buf) // let sent sets go as soon as the hub does
	}
}

var eventTypes = map[watch.EventType]membershipv1.WatchEventType{
	watch.SnapshotStart: membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START,
	watch.SnapshotEnd:   membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END,
	watch.Upsert:        membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT,
	watch.Delete:        membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE,
}

func (s *Server) send(stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse], ev watch.Event[*membershipv1.ServiceEndpoints]) error {
	typ := eventTypes[ev.Type]
	resp := &membershipv1.WatchServicesResponse{
		Type:         typ,
		Revision:     ev.Revision,
		Epoch:        s.hub.Epoch(),
		TraceContext: ev.TraceContext,
		Cluster:      s.cluster,
	}
	switch ev.Type {
	case watch.Upsert:
		resp.Endpoints = ev.Value
	case watch.Delete:
		resp.Endpoints = &membershipv1.ServiceEndpoints{
			Service: kube.ServiceName(ev.Key.Namespace, ev.Key.Name),
			Cluster: s.cluster,
		}
	}
	if !ev.ObserveTime.IsZero() {
		resp.ObserveTime = timestamppb.New(ev.ObserveTime)
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	s.eventsSent.WithLabelValues(typ.String()).Inc()
	return nil
}
