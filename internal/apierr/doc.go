// Package apierr builds and reads the gRPC statuses that every Plexus API
// returns.
//
// Every error a Plexus service sends carries a google.rpc.ErrorInfo with the
// domain "plexus.dev" and a stable UPPER_SNAKE reason (for example
// POOL_EXHAUSTED). Clients branch on the reason, never on the message text,
// so messages can be improved without breaking anyone. Bad input additionally
// carries a google.rpc.BadRequest listing every offending field.
//
// Pure cores return plain sentinel errors; a service translates them exactly
// once, at its gRPC edge, with a Table:
//
//	var errTable = apierr.Table{
//		{Err: ipam.ErrExhausted, Code: codes.ResourceExhausted, Reason: "POOL_EXHAUSTED"},
//		{Err: store.ErrNotFound, Code: codes.NotFound, Reason: "ALLOCATION_NOT_FOUND"},
//	}
//
//	func (s *server) Allocate(ctx context.Context, req *pb.AllocateRequest) (*pb.Allocation, error) {
//		a, err := s.core.Allocate(ctx, ...)
//		if err != nil {
//			return nil, apierr.Map(err, errTable)
//		}
//		...
//	}
package apierr
