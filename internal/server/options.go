package server

import (
	"log/slog"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Option changes how New builds a server.
type Option func(*options)

type options struct {
	logger            *slog.Logger
	stream            []grpc.StreamServerInterceptor
	validators        map[reflect.Type]func(any) error
	tracerProvider    trace.TracerProvider
	drainDelay        time.Duration
	readinessInterval time.Duration
	checkTimeout      time.Duration
	handleSignals     bool
	metricsObserver   func(prometheus.Collector)
}

func defaultOptions() options {
	return options{
		validators:        map[reflect.Type]func(any) error{},
		drainDelay:        time.Second,
		readinessInterval: 5 * time.Second,
		checkTimeout:      2 * time.Second,
		handleSignals:     true,
	}
}

// WithLogger sets the logger; without it New builds one on stderr from
// --log-level and --log-format.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithStreamInterceptors appends stream interceptors after the runtime's own.
func WithStreamInterceptors(is ...grpc.StreamServerInterceptor) Option {
	return func(o *options) { o.stream = append(o.stream, is...) }
}

// ValidateWith registers fn as the validator of request messages of type T
// (a pointer to a generated message). It runs before the message's own
// Validate method, if it has one. Return apierr.Violations to name fields.
func ValidateWith[T any](fn func(T) error) Option {
	return func(o *options) {
		o.validators[reflect.TypeFor[T]()] = func(m any) error { return fn(m.(T)) }
	}
}

// WithTracerProvider sets the tracer provider of the stats handler; without
// it the global one (telemetry.Setup) is used.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithDrainDelay sets how long a draining server keeps accepting calls after
// turning NOT_SERVING, for load balancers to notice (default 1s, never more
// than half of --drain-timeout).
func WithDrainDelay(d time.Duration) Option {
	return func(o *options) { o.drainDelay = d }
}

// WithReadinessInterval sets how often readiness checks run (default 5s).
func WithReadinessInterval(d time.Duration) Option {
	return func(o *options) { o.readinessInterval = d }
}

// WithoutSignalHandling makes Run stop only when its context ends, for
// embedding several servers in one process (tests).
func WithoutSignalHandling() Option {
	return func(o *options) { o.handleSignals = false }
}

// WithMetricsObserver calls fn with every collector registered through
// Registerer, the server's own included, once it is registered. It lets a
// program describe what a service exports without the collectors having
// produced a sample (hack/gendocs writes the metrics reference from it).
func WithMetricsObserver(fn func(prometheus.Collector)) Option {
	return func(o *options) { o.metricsObserver = fn }
}

// observedRegisterer registers on a registry and tells observe.
type observedRegisterer struct {
	prometheus.Registerer
	observe func(prometheus.Collector)
}

func (r observedRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.observe(c)
	return nil
}

func (r observedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
