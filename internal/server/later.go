package server

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"

	"google.golang.org/grpc"
)

// Later is a gRPC service registered before its implementation exists: a
// service whose implementation can only be built once a dependency answers
// (the allocator has to load its store) registers it Later, so that the
// servers, their probes and /readyz start at once instead of waiting for
// the dependency with nothing to tell an operator why.
//
// Until the implementation is registered on it (RegisterService, as on the
// gRPC server: Later is a grpc.ServiceRegistrar), every call of the
// service goes through the interceptors as usual and is then refused with
// the refusal RegisterLater was given, and the service's health is
// NOT_SERVING until the service sets it (SetServing).
type Later struct {
	desc    *grpc.ServiceDesc
	refusal error
	impl    atomic.Pointer[any]
}

// RegisterLater registers the service desc describes, whose implementation
// comes later (see Later). refusal is what its calls get meanwhile; make
// it UNAVAILABLE with a stable reason (apierr.New), so that clients retry,
// on another replica if there is one. Call it before Run.
func (s *Server) RegisterLater(desc *grpc.ServiceDesc, refusal error) *Later {
	l := &Later{desc: desc, refusal: refusal}
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		d.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: l.unary(m.Handler)}
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, st := range desc.Streams {
		st.Handler = l.stream(st.Handler)
		d.Streams[i] = st
	}
	s.SetServing(desc.ServiceName, false)
	// Registered without an implementation (the handlers ignore the one
	// gRPC passes them), so gRPC checks no type now.
	s.grpc.RegisterService(&d, nil)
	return l
}

// RegisterService registers the implementation of the service; calls are
// served by it from then on. It implements grpc.ServiceRegistrar, so a
// service registers on a Later as it would on the gRPC server. desc must
// be the one RegisterLater was given, and it may be called once.
func (l *Later) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if desc.ServiceName != l.desc.ServiceName {
		panic(fmt.Sprintf("server: %s registered on the Later of %s", desc.ServiceName, l.desc.ServiceName))
	}
	if ht := reflect.TypeOf(desc.HandlerType).Elem(); impl == nil || !reflect.TypeOf(impl).Implements(ht) {
		panic(fmt.Sprintf("server: %T does not implement %v", impl, ht))
	}
	if !l.impl.CompareAndSwap(nil, &impl) {
		panic("server: " + desc.ServiceName + " registered twice")
	}
}

// Registered reports whether the implementation has been registered.
func (l *Later) Registered() bool { return l.impl.Load() != nil }

// unary wraps a method's handler: with no implementation yet, the call
// still passes the interceptors (metrics, access log, authorization,
// validation), whose innermost handler refuses it.
func (l *Later) unary(h grpc.MethodHandler) grpc.MethodHandler {
	return func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		if impl := l.impl.Load(); impl != nil {
			return h(*impl, ctx, dec, ic)
		}
		refuse := func(context.Context, any) (any, error) { return nil, l.refusal }
		// The generated handler decodes the request and hands it to the
		// interceptor, which is never nil here, so it never touches the
		// missing implementation.
		return h(nil, ctx, dec, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			if ic == nil {
				return refuse(ctx, req)
			}
			return ic(ctx, req, info, refuse)
		})
	}
}

// stream wraps a stream's handler; stream interceptors run around it, so
// they see the refusal.
func (l *Later) stream(h grpc.StreamHandler) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		if impl := l.impl.Load(); impl != nil {
			return h(*impl, ss)
		}
		return l.refusal
	}
}
