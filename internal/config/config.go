package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Service names one Plexus service and its default listen addresses.
type Service struct {
	// Name is the short service name ("allocator").
	Name string
	// GRPCAddr is the default --grpc-addr.
	GRPCAddr string
	// HTTPAddr is the default --http-addr.
	HTTPAddr string
	// CallsAllocator says whether the service registers --allocator-addr.
	CallsAllocator bool
}

// The four services. Ports are fixed per service so that all four run side
// by side on one host without flags.
var (
	Allocator  = Service{Name: "allocator", GRPCAddr: "127.0.0.1:7401", HTTPAddr: "127.0.0.1:9401"}
	Membership = Service{Name: "membership", GRPCAddr: "127.0.0.1:7402", HTTPAddr: "127.0.0.1:9402", CallsAllocator: true}
	Importer   = Service{Name: "importer", GRPCAddr: "127.0.0.1:7403", HTTPAddr: "127.0.0.1:9403", CallsAllocator: true}
	Repair     = Service{Name: "repair", GRPCAddr: "127.0.0.1:7404", HTTPAddr: "127.0.0.1:9404", CallsAllocator: true}
)

// DefaultAllocatorAddr is the default --allocator-addr: the allocator's own
// default --grpc-addr.
const DefaultAllocatorAddr = "127.0.0.1:7401"

// Defaults of the limits. They are generous: the limits exist to keep one
// misbehaving client from taking the process down, not to shape traffic.
const (
	DefaultMaxRecvMsgSize       = 4 << 20
	DefaultMaxConcurrentStreams = 1024
	DefaultMaxInflight          = 4096
	DefaultDrainTimeout         = 15 * time.Second
)

// Common is the configuration every service shares. Build it with New so the
// per-service defaults are filled in.
type Common struct {
	// Service is the short service name, from the Service given to New.
	Service string

	// GRPCAddr is the host:port the gRPC server listens on.
	GRPCAddr string
	// HTTPAddr is the host:port of /metrics, /livez and /readyz.
	HTTPAddr string

	// Kubeconfig is the kubeconfig file; empty means in-cluster config.
	Kubeconfig string
	// ClusterName is the name of the cluster this instance serves: the
	// flag, or what the cluster's ClusterProperty says (internal/clusterid
	// fills it in at start).
	ClusterName string
	// AllocatorAddr is the allocator's gRPC target (only when the service
	// calls the allocator).
	AllocatorAddr string

	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string

	// TLSCert and TLSKey are the server's certificate and key (PEM); both
	// empty means plaintext.
	TLSCert string
	TLSKey  string
	// TLSClientCA, when set, turns on mutual TLS: clients must present a
	// certificate signed by one of these CAs.
	TLSClientCA string

	// AuthTokens is a file of bearer tokens and the principals they stand
	// for (see package auth).
	AuthTokens string
	// AuthzPolicy is the per-method authorization policy file; empty allows
	// every method.
	AuthzPolicy string

	// PeerCA is the CA bundle that verifies the servers this service calls;
	// when set, calls use TLS (and present TLSCert/TLSKey when those are set).
	PeerCA string
	// PeerTokenFile holds the bearer token this service presents to the
	// services it calls.
	PeerTokenFile string

	// MaxRecvMsgSize is the largest request message in bytes.
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the concurrent streams of one connection.
	MaxConcurrentStreams uint32
	// RateLimit is the number of calls per second the server accepts; 0 is
	// unlimited.
	RateLimit float64
	// MaxInflight bounds the unary calls being handled at once; 0 is
	// unlimited.
	MaxInflight int
	// DrainTimeout is how long a shutdown waits for in-flight calls before
	// cutting them off.
	DrainTimeout time.Duration
	// Pprof serves Go's profiles under /debug/pprof/ on the HTTP address.
	Pprof bool

	callsAllocator bool
}

// New returns the configuration of svc with its defaults.
func New(svc Service) *Common {
	c := &Common{
		Service:              svc.Name,
		GRPCAddr:             svc.GRPCAddr,
		HTTPAddr:             svc.HTTPAddr,
		LogLevel:             "info",
		LogFormat:            "text",
		MaxRecvMsgSize:       DefaultMaxRecvMsgSize,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		MaxInflight:          DefaultMaxInflight,
		DrainTimeout:         DefaultDrainTimeout,
		callsAllocator:       svc.CallsAllocator,
	}
	if svc.CallsAllocator {
		c.AllocatorAddr = DefaultAllocatorAddr
	}
	return c
}

// CallsAllocator reports whether the service was configured to call the
// allocator (and so has --allocator-addr).
func (c *Common) CallsAllocator() bool { return c.callsAllocator }

// AddFlags registers the common flags on fs, with c's current values as
// defaults.
func (c *Common) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "host:port the gRPC API listens on")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "host:port serving /metrics, /livez and /readyz")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file of the cluster this instance talks to; in-cluster config when empty")
	fs.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "name of the cluster this instance serves, as the rest of the fleet knows it; default: the value of the ClusterProperty cluster.clusterset.k8s.io (about.k8s.io, KEP-2149) of that cluster; given both, they must agree")
	if c.callsAllocator {
		fs.StringVar(&c.AllocatorAddr, "allocator-addr", c.AllocatorAddr, "gRPC target of the allocator: host:port, a comma-separated list of replicas, or dns:///name:port")
	}
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate of the gRPC server; plaintext when empty")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM CA bundle for client certificates; when set, mutual TLS is required and a client is identified by its certificate (SPIFFE URI SAN, else subject CN)")
	fs.StringVar(&c.AuthTokens, "auth-tokens", c.AuthTokens, `file of bearer tokens, one "token,principal" per line; a call with an "authorization: Bearer <token>" header runs as that principal`)
	fs.StringVar(&c.AuthzPolicy, "authz-policy", c.AuthzPolicy, "per-method authorization policy file (gRPC authz JSON format, matched against the caller's principal); when empty every method is allowed and a warning is logged")
	fs.StringVar(&c.PeerCA, "peer-ca", c.PeerCA, "PEM CA bundle that verifies the Plexus services this one calls; when set those calls use TLS, presenting --tls-cert as client certificate if given")
	fs.StringVar(&c.PeerTokenFile, "peer-token-file", c.PeerTokenFile, "file holding the bearer token presented to the Plexus services this one calls")
	fs.IntVar(&c.MaxRecvMsgSize, "max-recv-msg-size", c.MaxRecvMsgSize, "largest request message in bytes; larger ones fail with RESOURCE_EXHAUSTED")
	fs.Uint32Var(&c.MaxConcurrentStreams, "max-concurrent-streams", c.MaxConcurrentStreams, "concurrent streams allowed on one client connection")
	fs.Float64Var(&c.RateLimit, "rate-limit", c.RateLimit, "calls per second accepted across all clients (health checks excluded); 0 means unlimited")
	fs.IntVar(&c.MaxInflight, "max-inflight", c.MaxInflight, "unary calls handled at once before new ones fail with RESOURCE_EXHAUSTED; 0 means unlimited")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "on SIGTERM, how long in-flight calls may finish before they are cut off")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go's runtime profiles under /debug/pprof/ on --http-addr (keep that address private)")
}

// Validate reports every invalid setting at once.
func (c *Common) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if err := checkHostPort(c.GRPCAddr); err != nil {
		add("--grpc-addr: %w", err)
	}
	if err := checkHostPort(c.HTTPAddr); err != nil {
		add("--http-addr: %w", err)
	}
	if c.callsAllocator && c.AllocatorAddr == "" {
		add("--allocator-addr: must not be empty")
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		add("--log-level: %w", err)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		add("--log-format: %q is neither text nor json", c.LogFormat)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		add("--tls-cert and --tls-key: give both or neither")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		add("--tls-client-ca: mutual TLS needs --tls-cert and --tls-key")
	}
	if c.MaxRecvMsgSize <= 0 {
		add("--max-recv-msg-size: must be positive, got %d", c.MaxRecvMsgSize)
	}
	if c.MaxConcurrentStreams == 0 {
		add("--max-concurrent-streams: must be positive")
	}
	if !(c.RateLimit >= 0) || math.IsInf(c.RateLimit, 0) { // !(x >= 0) also refuses NaN
		add("--rate-limit: must be a finite number, not negative, got %g", c.RateLimit)
	}
	if c.MaxInflight < 0 {
		add("--max-inflight: must not be negative, got %d", c.MaxInflight)
	}
	if c.DrainTimeout <= 0 {
		add("--drain-timeout: must be positive, got %s", c.DrainTimeout)
	}
	return errors.Join(errs...)
}

// ParseLogLevel parses debug, info, warn or error (any case).
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
