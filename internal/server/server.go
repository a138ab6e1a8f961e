package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/telemetry"
	"github.com/plexusnet/plexus/internal/tlsconf"
	"github.com/plexusnet/plexus/internal/version"
)

// Server is one Plexus service's gRPC server and its HTTP side port.
type Server struct {
	cfg      config.Common
	opts     options
	logger   *slog.Logger
	grpc     *grpc.Server
	health   *health.Server
	registry *prometheus.Registry
	// registerer registers on registry, telling the observer of
	// WithMetricsObserver too.
	registerer prometheus.Registerer
	metrics    *grpcprom.ServerMetrics
	ready      *readiness

	grpcLis net.Listener
	httpLis net.Listener
	httpSrv *http.Server

	// drainCtx ends when draining reaches the point where open streams are
	// cut.
	drainCtx   context.Context
	startDrain context.CancelFunc
	draining   atomic.Bool

	// calls runs unary calls (callPool); stopCalls ends it once the gRPC
	// server has stopped.
	calls     *callPool
	stopCalls chan struct{}

	// failed receives the first error of Fail.
	failed chan error

	mu       sync.Mutex
	running  bool
	statuses map[string]healthpb.HealthCheckResponse_ServingStatus
	ran      atomic.Bool

	// info are the headers of every health check answer (see
	// AddHealthInfo); set up before Run, read by the interceptor.
	info []healthInfo
}

// healthInfo is one header of health check answers.
type healthInfo struct {
	key string
	fn  func() string
}

// HeaderVersion is the header of health check answers that carries the
// server's version; AddHealthInfo adds others (the importer and repair add
// "plexus-leader"), so `plexusctl status` reads them with the health check.
const HeaderVersion = "plexus-version"

// AddHealthInfo makes every health check answer carry the header key with
// fn's value at that moment. Call it before Run.
func (s *Server) AddHealthInfo(key string, fn func() string) {
	s.info = append(s.info, healthInfo{key: key, fn: fn})
}

// healthHeaders sends the version and the added headers with health check
// answers.
func (s *Server) healthHeaders(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isHealthMethod(info.FullMethod) {
		md := metadata.Pairs(HeaderVersion, version.String())
		for _, i := range s.info {
			if v := i.fn(); v != "" {
				md.Append(i.key, v)
			}
		}
		_ = grpc.SetHeader(ctx, md)
	}
	return handler(ctx, req)
}

// New builds the server of service name ("allocator") from cfg and binds its
// gRPC and HTTP listeners, so a taken port fails here rather than in Run.
// Register services on GRPC() before calling Run.
func New(cfg config.Common, name string, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	o, err := newOptions(cfg, opts)
	if err != nil {
		return nil, err
	}
	logger := o.logger.With("service", name)

	guard, err := newGuard(cfg, logger)
	if err != nil {
		return nil, err
	}

	s := &Server{
		cfg:      cfg,
		opts:     o,
		logger:   logger,
		registry: prometheus.NewRegistry(),
		statuses: map[string]healthpb.HealthCheckResponse_ServingStatus{},
		failed:   make(chan error, 1),
	}
	s.registerer = s.registry
	if o.metricsObserver != nil {
		s.registerer = observedRegisterer{Registerer: s.registry, observe: o.metricsObserver}
	}
	s.drainCtx, s.startDrain = context.WithCancel(context.Background())
	s.stopCalls = make(chan struct{})
	s.calls = newCallPool(int(streamWorkers()) / 2)
	s.ready = newReadiness(logger)
	lim, panics := s.registerMetrics(cfg)

	grpcOpts, err := s.serverOptions(o, guard, lim, panics)
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	s.health = health.NewServer()
	// Until Run, the server is not ready for anyone.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	registerReflection(s.grpc, logger)

	if err := s.listen(cfg); err != nil {
		return nil, err
	}
	s.httpSrv = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// newOptions applies opts to the defaults; without WithLogger, the logger
// is built on stderr from --log-level and --log-format.
func newOptions(cfg config.Common, opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		l, err := telemetry.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
		if err != nil {
			return options{}, err
		}
		o.logger = l
	}
	return o, nil
}

// registerMetrics registers the runtime's own metrics: the Go and process
// collectors, the gRPC server metrics, the limits' refusals and in-flight
// calls, panics and readiness. It returns the limits and the panic
// counter, which the interceptors feed.
func (s *Server) registerMetrics(cfg config.Common) (*limits, prometheus.Counter) {
	s.metrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}),
	))
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_grpc_rejected_total",
		Help: "Calls refused by the rate or in-flight limit, by reason.",
	}, []string{"reason"})
	panics := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "plexus_grpc_panics_total",
		Help: "Handler panics recovered into INTERNAL errors.",
	})
	lim := newLimits(cfg.RateLimit, cfg.MaxInflight, rejected)
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_grpc_inflight_calls",
		Help: "Unary calls being handled (counted only when --max-inflight is set).",
	}, func() float64 { return float64(lim.inflight.Load()) })
	s.registerer.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		s.metrics, rejected, panics, inflight, s.ready.gauge,
	)
	return lim, panics
}

// listen binds the gRPC and HTTP listeners.
func (s *Server) listen(cfg config.Common) error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen --grpc-addr: %w", err)
	}
	if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		s.grpcLis.Close()
		return fmt.Errorf("listen --http-addr: %w", err)
	}
	return nil
}

func newGuard(cfg config.Common, logger *slog.Logger) (*auth.Guard, error) {
	var tokens *auth.Tokens
	if cfg.AuthTokens != "" {
		t, err := auth.LoadTokens(cfg.AuthTokens)
		if err != nil {
			return nil, err
		}
		tokens = t
	}
	var policy *auth.Policy
	if cfg.AuthzPolicy != "" {
		p, err := auth.LoadPolicy(cfg.AuthzPolicy)
		if err != nil {
			return nil, err
		}
		policy = p
		logger.Info("authorization policy loaded", "policy", p.Name(), "file", cfg.AuthzPolicy)
	} else {
		logger.Warn("no --authz-policy: every caller may call every method")
	}
	return auth.NewGuard(tokens, policy, IsOpenMethod, logger), nil
}

func (s *Server) serverOptions(o options, guard *auth.Guard, lim *limits, panics prometheus.Counter) ([]grpc.ServerOption, error) {
	otelOpts := []otelgrpc.Option{
		otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))),
	}
	if o.tracerProvider != nil {
		otelOpts = append(otelOpts, otelgrpc.WithTracerProvider(o.tracerProvider))
	}
	exemplar := grpcprom.WithExemplarFromContext(func(ctx context.Context) prometheus.Labels {
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			return prometheus.Labels{"trace_id": sc.TraceID().String()}
		}
		return nil
	})
	// Successful calls are logged at debug: at thousands of calls a second
	// an info line each costs more than the call itself.
	levels := logging.WithLevels(func(c codes.Code) logging.Level { return logging.Level(accessLogLevel(c)) })
	accessLogStream := logging.StreamServerInterceptor(slogAdapter(s.logger), logging.WithLogOnEvents(logging.FinishCall), levels)
	// Health checks arrive every few seconds from probes; logging each one
	// would bury the calls that matter.
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool { return !isHealthMethod(c.FullMethod()) })
	recoverOpt := recovery.WithRecoveryHandlerContext(recoverPanic(s.logger, panics))
	v := validator{byType: o.validators, decode: newDecodeCodec()}

	unary := []grpc.UnaryServerInterceptor{
		// Before all: the rest runs on a long-lived goroutine.
		s.calls.unary,
		// Then: a unary request is decoded before any interceptor, and
		// one that failed must be answered (and forgotten) even when a
		// later interceptor would refuse the call for another reason.
		v.decode.unary,
		s.healthHeaders,
		s.metrics.UnaryServerInterceptor(exemplar),
		accessLogUnary(s.logger),
		canceledUnary,
		recovery.UnaryServerInterceptor(recoverOpt),
		lim.unary,
		grpcauth.UnaryServerInterceptor(guard.Authorize),
		logPrincipalUnary,
		v.unary,
	}
	stream := append([]grpc.StreamServerInterceptor{
		s.calls.stream,
		s.metrics.StreamServerInterceptor(exemplar),
		selector.StreamServerInterceptor(accessLogStream, notHealth),
		canceledStream,
		recovery.StreamServerInterceptor(recoverOpt),
		drainStreams(s.drainCtx),
		lim.stream,
		grpcauth.StreamServerInterceptor(guard.Authorize),
		logPrincipalStream,
		v.stream,
	}, o.stream...)

	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...)),
		grpc.MaxRecvMsgSize(s.cfg.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(s.cfg.MaxConcurrentStreams),
		// A fixed pool of stream workers avoids a new goroutine per
		// stream under load; a long-lived stream holds its worker, so
		// unary calls have a pool of their own (callPool).
		grpc.NumStreamWorkers(streamWorkers()),
		// Clients of package dial ping every 30s on idle connections; allow
		// it instead of answering with GOAWAY too_many_pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.ForceServerCodecV2(v.decode),
	}
	if s.cfg.TLSCert != "" {
		tc, err := tlsconf.Server(s.cfg.TLSCert, s.cfg.TLSKey, s.cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("server TLS: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return opts, nil
}

// GRPC returns the gRPC server to register the service's APIs on.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Registry returns the Prometheus registry served on /metrics, to gather
// from. Services register their collectors through Registerer.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Registerer is where a service registers its collectors: the registry
// served on /metrics (and the observer of WithMetricsObserver, so the
// metrics reference can describe them).
func (s *Server) Registerer() prometheus.Registerer { return s.registerer }

// Logger returns the server's logger (with the service name attached).
func (s *Server) Logger() *slog.Logger { return s.logger }

// GRPCAddr returns the address the gRPC server listens on (useful with port 0).
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr returns the address of /metrics, /livez and /readyz.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// SetServing sets the grpc.health.v1 status of service (a full service name
// such as "plexus.allocator.v1.AllocatorService"). Before Run it only
// records the status; a registered service not mentioned is SERVING once Run
// starts. After the drain started, calls are ignored.
func (s *Server) SetServing(service string, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses[service] = st
	if s.running {
		s.health.SetServingStatus(service, st)
	}
}

// AddReadinessCheck adds a check to /readyz. check should return quickly; it
// runs periodically with a timeout, and its error text is shown in /readyz
// (for example "allocator: not reachable yet: connection refused").
func (s *Server) AddReadinessCheck(name string, check func(context.Context) error) {
	s.ready.add(name, check)
}

// Fail stops the server because the service cannot go on: Run drains as
// on SIGTERM and returns err, so the process exits with it. It is for work
// a service goes on with in the background after its setup returned (see
// RegisterLater) and that fails for good, such as a store that must not
// be served from; an error that may pass should be retried instead. Only
// the first error counts; Fail before Run makes Run stop at once.
func (s *Server) Fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// Run serves until ctx ends or the process gets SIGTERM or SIGINT, then
// drains (see the package documentation) and returns. It returns nil after
// a clean drain, and an error when a listener failed or the service called
// Fail. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	if s.ran.Swap(true) {
		return errors.New("server: Run called twice")
	}
	stopSignals := func() {}
	if s.opts.handleSignals {
		ctx, stopSignals = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	}
	defer stopSignals()

	s.metrics.InitializeMetrics(s.grpc)
	s.calls.start(callWorkers(), s.stopCalls)
	s.startServing()

	checksCtx, stopChecks := context.WithCancel(context.Background())
	defer stopChecks()
	go s.ready.loop(checksCtx, s.opts.readinessInterval, s.opts.checkTimeout)

	errc := make(chan error, 2)
	go func() {
		if err := s.grpc.Serve(s.grpcLis); err != nil {
			errc <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	go func() {
		if err := s.httpSrv.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http server: %w", err)
		}
	}()
	s.logger.Info("serving", "grpc_addr", s.GRPCAddr(), "http_addr", s.HTTPAddr(),
		"tls", s.cfg.TLSCert != "", "mtls", s.cfg.TLSClientCA != "")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		s.logger.Error("listener failed, shutting down", "error", serveErr)
	case serveErr = <-s.failed:
		s.logger.Error("service failed, shutting down", "error", serveErr)
	}
	// A second SIGTERM/SIGINT during the drain kills the process the default
	// way, for an operator who does not want to wait.
	stopSignals()
	s.drain()
	return serveErr
}

func (s *Server) startServing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = true
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for svc := range s.grpc.GetServiceInfo() {
		if IsOpenMethod("/" + svc + "/") {
			continue
		}
		if _, ok := s.statuses[svc]; !ok {
			s.statuses[svc] = healthpb.HealthCheckResponse_SERVING
		}
	}
	for svc, st := range s.statuses {
		s.health.SetServingStatus(svc, st)
	}
}

func (s *Server) drain() {
	start := time.Now()
	deadline := time.NewTimer(s.cfg.DrainTimeout)
	defer deadline.Stop()

	s.draining.Store(true)
	s.health.Shutdown() // every status NOT_SERVING, later updates ignored
	delay := min(s.opts.drainDelay, s.cfg.DrainTimeout/2)
	s.logger.Info("draining", "delay", delay, "timeout", s.cfg.DrainTimeout)
	time.Sleep(delay)

	s.startDrain()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		s.logger.Info("drained", "took", time.Since(start).Round(time.Millisecond))
	case <-deadline.C:
		s.logger.Warn("drain timeout reached, cutting off calls still running", "timeout", s.cfg.DrainTimeout)
		s.grpc.Stop()
		<-stopped
	}
	close(s.stopCalls)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		s.httpSrv.Close()
	}
}

// streamWorkers is the size of the gRPC server's worker pool.
func streamWorkers() uint32 {
	return uint32(max(128, 4*runtime.GOMAXPROCS(0)))
}

// callWorkers is the size of the pool of unary calls. Most calls wait on
// a commit or another service, so it is sized for calls in flight, not
// for cores: with one goroutine per core, 64 clients waiting on group
// commits ran nearly every call on a fresh goroutine, and growing their
// stacks was 7 % of the allocator's CPU.
func callWorkers() int { return max(128, 4*runtime.GOMAXPROCS(0)) }
