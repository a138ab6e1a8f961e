// Package server is the runtime every Plexus service runs in: one gRPC
// server with the shared interceptors, health, reflection, metrics,
// readiness and a graceful drain, configured by config.Common.
//
// A service's main is short:
//
//	s, err := server.New(cfg, "allocator", server.WithLogger(logger))
//	if err != nil { ... }
//	allocatorv1.RegisterAllocatorServiceServer(s.GRPC(), impl)
//	s.AddReadinessCheck("store", impl.Ready)
//	return s.Run(ctx) // until ctx ends or SIGTERM/SIGINT, then drains
//
// # What every call goes through
//
// Outermost first: Prometheus metrics, access log (slog, with trace ids),
// panic recovery (INTERNAL, the process keeps serving), rate and in-flight
// limits (RESOURCE_EXHAUSTED with reason RATE_LIMIT_EXCEEDED or
// INFLIGHT_LIMIT_EXCEEDED), authentication and authorization (package
// auth), request validation (INVALID_ARGUMENT with a BadRequest detail),
// then the service's own interceptors and handler. The OpenTelemetry stats
// handler sits below all of them, so every log line of a call carries its
// trace id. Oversize messages are refused by gRPC itself with
// RESOURCE_EXHAUSTED.
//
// # Always open
//
// grpc.health.v1.Health and server reflection (grpc.reflection.v1 and
// v1alpha) need no credentials and are not rate limited, so probes and
// grpcurl list/describe work against a locked-down server. They expose
// serving status and the API schema, nothing else.
//
// # Health and readiness
//
// grpc.health.v1 reports "" (the whole server) and every registered
// service. A service that has to warm up (informers syncing) calls
// SetServing(name, false) before Run and SetServing(name, true) when ready;
// any service it does not mention is SERVING once Run starts. A service
// whose implementation can only be built once a dependency answers (the
// allocator loads its store) registers it with RegisterLater and builds it
// in the background: the servers start at once, the service is
// NOT_SERVING and its calls are refused (UNAVAILABLE) until the
// implementation is registered; Fail stops the server for an error that
// waiting will not cure. /readyz on the
// HTTP port lists the readiness checks (AddReadinessCheck) with their last
// result, /livez answers while the process runs, /metrics serves Prometheus.
//
// # Drain
//
// On SIGTERM, SIGINT or the end of Run's context: every health status turns
// NOT_SERVING and /readyz fails, so load balancers stop sending; after the
// drain delay, open streams are ended with UNAVAILABLE (reason
// SERVER_DRAINING, clients reconnect elsewhere) and GracefulStop lets unary
// calls finish; whatever is still running at --drain-timeout is cut off.
package server
