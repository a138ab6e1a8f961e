// Package dial opens the gRPC client connections of Plexus: services
// calling each other, and clients such as plexusctl.
//
// A connection from New
//   - is created without blocking (grpc.NewClient), so a service starts even
//     when the service it calls is down, and connects in the background;
//   - retries calls that fail with UNAVAILABLE, with exponential backoff,
//     through a gRPC service config, except the Plexus methods that are
//     not safe to repeat (see idempotency.go);
//   - keeps idle connections alive with pings, so a silently dropped
//     connection is noticed before the next call;
//   - traces calls with OpenTelemetry and propagates the trace context;
//   - uses TLS (mutual TLS with a client certificate) or, only when asked or
//     for a loopback target, plaintext; and may present a bearer token.
package dial

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/tlsconf"
)

// Option changes how New connects.
type Option func(*options) error

type options struct {
	tlsConfig   *tls.Config
	serverName  string
	insecure    bool
	token       string
	retry       *RetryPolicy
	keepalive   keepalive.ClientParameters
	dialOptions []grpc.DialOption
}

// RetryPolicy is the retry part of the gRPC service config.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; gRPC caps it at 5.
	MaxAttempts int
	// InitialBackoff is the upper bound of the first randomized wait.
	InitialBackoff time.Duration
	// MaxBackoff caps the waits.
	MaxBackoff time.Duration
	// Multiplier grows the bound after each attempt.
	Multiplier float64
}

// DefaultRetry retries UNAVAILABLE up to 4 times within about 2 seconds:
// long enough to ride over a replica restart, short enough that a caller
// with a deadline still gets its answer.
var DefaultRetry = RetryPolicy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2}

// DefaultKeepalive pings an idle connection every 30s and drops it when a
// ping is not answered within 10s. The Plexus server allows this rate.
var DefaultKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}

// WithTLSFiles uses TLS verifying the server against caFile (system roots
// when empty) and presenting certFile/keyFile when given (mutual TLS).
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) error {
		cfg, err := tlsconf.Client(caFile, certFile, keyFile)
		if err != nil {
			return err
		}
		o.tlsConfig = cfg
		return nil
	}
}

// WithServerName verifies the server's certificate against name instead
// of the target's host (a member's TLS identity as its inventory gives
// it). It has no effect on a plaintext connection.
func WithServerName(name string) Option {
	return func(o *options) error { o.serverName = name; return nil }
}

// WithInsecure uses plaintext even for a target that is not on loopback.
func WithInsecure() Option {
	return func(o *options) error { o.insecure = true; return nil }
}

// WithBearerToken presents token in the authorization metadata of every
// call.
func WithBearerToken(token string) Option {
	return func(o *options) error { o.token = token; return nil }
}

// WithTokenFile reads the bearer token from path (surrounding white space is
// dropped).
func WithTokenFile(path string) Option {
	return func(o *options) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read token file: %w", err)
		}
		o.token = strings.TrimSpace(string(b))
		if o.token == "" {
			return fmt.Errorf("token file %s is empty", path)
		}
		return nil
	}
}

// WithRetry replaces DefaultRetry.
func WithRetry(p RetryPolicy) Option {
	return func(o *options) error { o.retry = &p; return nil }
}

// WithoutRetry turns retries off (tests that count attempts).
func WithoutRetry() Option {
	return func(o *options) error { o.retry = nil; return nil }
}

// WithDialOptions adds raw gRPC dial options after New's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dialOptions = append(o.dialOptions, opts...); return nil }
}

// FromConfig returns the options a service uses to call its Plexus peers,
// from --peer-ca, --tls-cert/--tls-key and --peer-token-file. Without
// --peer-ca the peers are called in plaintext.
func FromConfig(c *config.Common) []Option {
	var opts []Option
	if c.PeerCA != "" {
		opts = append(opts, WithTLSFiles(c.PeerCA, c.TLSCert, c.TLSKey))
	} else {
		opts = append(opts, WithInsecure())
	}
	if c.PeerTokenFile != "" {
		opts = append(opts, WithTokenFile(c.PeerTokenFile))
	}
	return opts
}

// New returns a connection to target ("host:port", "dns:///name:port",
// "unix:///path", or a comma-separated list of host:port: replicas named
// one by one, each call and each stream going to one that is up). It does
// not wait for the server: the first call does.
// Without a TLS option, a loopback or unix target is dialled in plaintext
// and any other target with TLS against the system roots.
func New(target string, opts ...Option) (*grpc.ClientConn, error) {
	retry := DefaultRetry
	o := options{retry: &retry, keepalive: DefaultKeepalive}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("dial %s: %w", target, err)
		}
	}

	list := replicaList(target)
	local := isLocal(target)
	if list != nil {
		local = true
		for _, a := range list {
			local = local && isLocal(a)
		}
	}
	creds := o.transportCredentials(local)

	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithKeepaliveParams(o.keepalive),
	}
	sc, err := serviceConfig(o.retry)
	if err != nil {
		return nil, err
	}
	dialOpts = append(dialOpts, grpc.WithDefaultServiceConfig(sc))
	if o.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer{
			token:      o.token,
			requireTLS: creds.Info().SecurityProtocol != "insecure",
		}))
	}
	dialOpts = append(dialOpts, o.dialOptions...)
	dialTarget := target
	if list != nil {
		var withList grpc.DialOption
		dialTarget, withList = listResolver(list)
		dialOpts = append(dialOpts, withList)
	}
	conn, err := grpc.NewClient(dialTarget, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}

// replicaList returns the addresses of a target that names replicas one
// by one ("host:port,host:port"), nil for any other target.
func replicaList(target string) []string {
	if strings.Contains(target, "://") || !strings.Contains(target, ",") {
		return nil
	}
	var list []string
	for _, a := range strings.Split(target, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	return list
}

// transportCredentials are the TLS options' credentials or, without them,
// plaintext for a local target (or when asked) and TLS against the system
// roots for any other.
func (o *options) transportCredentials(local bool) credentials.TransportCredentials {
	switch {
	case o.tlsConfig != nil && o.serverName != "":
		cfg := o.tlsConfig.Clone()
		cfg.ServerName = o.serverName
		return credentials.NewTLS(cfg)
	case o.tlsConfig != nil:
		return credentials.NewTLS(o.tlsConfig)
	case o.insecure || local:
		return insecure.NewCredentials()
	default:
		return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
}

// listResolver is a resolver of the connection's own that always answers
// the list, and the target that names it; round robin (the service
// config) spreads over the list. Each address is its own TLS server name,
// as a single target would be: without it TLS would verify every replica
// against the whole list.
func listResolver(list []string) (target string, opt grpc.DialOption) {
	r := manual.NewBuilderWithScheme("plexus-list")
	addrs := make([]resolver.Address, len(list))
	for i, a := range list {
		addrs[i] = resolver.Address{Addr: a, ServerName: a}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	return "plexus-list:///" + strings.Join(list, ","), grpc.WithResolvers(r)
}

// serviceConfig renders the JSON service config: round robin over every
// address the name resolves to (allocator and membership replicas are all
// active), retries on UNAVAILABLE but for the methods notRetried names,
// and retry throttling so a struggling server is not buried under
// retries.
func serviceConfig(p *RetryPolicy) (string, error) {
	type retryPolicy struct {
		MaxAttempts          int      `json:"maxAttempts"`
		InitialBackoff       string   `json:"initialBackoff"`
		MaxBackoff           string   `json:"maxBackoff"`
		BackoffMultiplier    float64  `json:"backoffMultiplier"`
		RetryableStatusCodes []string `json:"retryableStatusCodes"`
	}
	type methodConfig struct {
		Name        []map[string]string `json:"name"`
		RetryPolicy *retryPolicy        `json:"retryPolicy,omitempty"`
	}
	cfg := map[string]any{
		"loadBalancingConfig": []map[string]any{{"round_robin": map[string]any{}}},
	}
	if p != nil {
		if p.MaxAttempts < 2 || p.InitialBackoff <= 0 || p.MaxBackoff <= 0 || p.Multiplier <= 0 {
			return "", fmt.Errorf("retry policy %+v: need at least 2 attempts and positive backoffs", *p)
		}
		unsafe, err := notRetried()
		if err != nil {
			return "", err
		}
		cfg["methodConfig"] = []methodConfig{{
			Name: []map[string]string{{}}, // every method
			RetryPolicy: &retryPolicy{
				MaxAttempts:          p.MaxAttempts,
				InitialBackoff:       seconds(p.InitialBackoff),
				MaxBackoff:           seconds(p.MaxBackoff),
				BackoffMultiplier:    p.Multiplier,
				RetryableStatusCodes: []string{"UNAVAILABLE"},
			},
		}, {
			// A method's own entry takes precedence over the default.
			Name: unsafe,
		}}
		cfg["retryThrottling"] = map[string]any{"maxTokens": 10, "tokenRatio": 0.1}
	}
	b, err := json.Marshal(cfg)
	return string(b), err
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Seconds())
}

// isLocal reports whether target never leaves the host: a unix socket or a
// loopback address, where TLS would protect nothing.
func isLocal(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	// Drop a resolver scheme and authority: "dns://8.8.8.8/host:port".
	if i := strings.Index(target, "://"); i >= 0 {
		rest := target[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			rest = rest[j+1:]
		}
		target = rest
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// bearer is per-call credentials carrying a token.
type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity refuses to send a token in clear text, except on
// a connection the caller made plaintext on purpose (loopback, or
// WithInsecure).
func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }
