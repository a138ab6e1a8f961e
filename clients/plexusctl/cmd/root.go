// Package cmd is plexusctl's command tree.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/version"
)

// globals are the flags every command shares.
type globals struct {
	addrs    map[string]*string
	output   string
	timeout  time.Duration
	token    string
	insecure bool
	caFile   string
	certFile string
	keyFile  string
	out      io.Writer

	// configPath and contextName are --config and --context.
	configPath  string
	contextName string
}

// serviceOrder is the order plexusctl lists the services in.
var serviceOrder = []string{"allocator", "membership", "importer", "repair"}

// NewRoot returns the plexusctl command tree writing to out.
func NewRoot(out io.Writer) *cobra.Command {
	g := &globals{addrs: map[string]*string{}, out: out}
	root := &cobra.Command{
		Use:           "plexusctl",
		Short:         "Drive the Plexus services: allocator, membership, importer and repair",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	// Connection settings come from a flag, else its environment variable,
	// else the selected context, else the flag's default; resolve applies
	// that order once the flags are parsed.
	root.PersistentPreRunE = g.resolve
	fs := root.PersistentFlags()
	for i, svc := range serviceOrder {
		def := fmt.Sprintf("127.0.0.1:%d", 7401+i)
		g.addrs[svc] = fs.String(svc+"-addr", def, "address of the "+svc+" service (env "+addrEnv(svc)+", context field "+svc+")")
	}
	fs.StringVarP(&g.output, "output", "o", "table", "output format: table, json (as grpcurl prints it) or yaml")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "deadline of each call (context field timeout)")
	fs.StringVar(&g.token, "token", "", "bearer token sent with every call (env PLEXUS_TOKEN, context field token-file)")
	fs.StringVar(&g.caFile, "tls-ca", "", "CA bundle to verify servers with; enables TLS (context field tls.ca)")
	fs.StringVar(&g.certFile, "tls-cert", "", "client certificate for mutual TLS (context field tls.cert)")
	fs.StringVar(&g.keyFile, "tls-key", "", "client key for mutual TLS (context field tls.key)")
	fs.StringVar(&g.configPath, "config", "", "config file (env "+configEnv+"; default $XDG_CONFIG_HOME/plexus/config.yaml or ~/.config/plexus/config.yaml)")
	fs.StringVar(&g.contextName, "context", "", "context of the config file to use instead of its current-context")
	root.AddCommand(poolCmd(g), allocCmd(g))
	root.AddCommand(workloadCmd(g), membersCmd(g))
	root.AddCommand(importsCmd(g), repairCmd(g), statusCmd(g), traceCmd(g))
	root.AddCommand(certsCmd(), crdsCmd(), clustersCmd(g))
	root.AddCommand(configCmd(g), versionCmd())
	return root
}

// conn dials service svc.
func (g *globals) conn(svc string) (*grpc.ClientConn, error) {
	opts := []dial.Option{}
	if g.caFile != "" {
		opts = append(opts, dial.WithTLSFiles(g.caFile, g.certFile, g.keyFile))
	} else {
		opts = append(opts, dial.WithInsecure())
	}
	if g.token != "" {
		opts = append(opts, dial.WithBearerToken(g.token))
	}
	return dial.New(*g.addrs[svc], opts...)
}

// call runs fn with a connection to svc and the call deadline.
func (g *globals) call(cmd *cobra.Command, svc string, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	cc, err := g.conn(svc)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	return g.unreachable(svc, fn(ctx, cc))
}

// unreachableError is a call that never reached svc: it says where
// plexusctl looked and how to point it elsewhere, and keeps the call's
// status for errors.As and status.Code.
type unreachableError struct {
	svc, addr string
	err       error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the %s at %s (%s); is it running there? --%s-addr, %s or a config context (plexusctl config) name another address",
		e.svc, e.addr, status.Convert(e.err).Message(), e.svc, addrEnv(e.svc))
}

func (e *unreachableError) Unwrap() error { return e.err }

// tlsError is a call that reached a server at svc's address but could not
// speak to it: the TLS handshake failed, or a plaintext call met a server
// that closed the connection (one that wants TLS). It names the TLS
// settings to check rather than suggesting the service is down, and keeps
// the call's status.
type tlsError struct {
	svc, addr, hint string
	err             error
}

func (e *tlsError) Error() string {
	return fmt.Sprintf("cannot talk to the %s at %s: %s (%s)", e.svc, e.addr, e.hint, status.Convert(e.err).Message())
}

func (e *tlsError) Unwrap() error { return e.err }

// tlsSettings names where plexusctl's TLS material comes from.
const tlsSettings = "--tls-ca, --tls-cert and --tls-key, or the tls of a config context (plexusctl config)"

// tlsUse is how a call used TLS: not at all, without a client
// certificate, or with one.
type tlsUse int

const (
	noTLS tlsUse = iota
	tlsWithoutCert
	tlsWithCert
)

// clientCertHint is the hint for a server that refused a client without
// the certificate it wants.
const clientCertHint = "it refused the TLS handshake: it wants a client certificate its CA issued (--tls-cert and --tls-key, the fleet's operator certificate of plexusctl certs)"

// tlsHint says what a failed connection's message shows about TLS, or ""
// when it shows nothing: the connection was refused, timed out, or failed
// for another reason.
func tlsHint(msg string, use tlsUse) string {
	// A TLS server reads a plaintext HTTP/2 preface as a bad handshake and
	// hangs up before sending its own; with TLS 1.3 a server that wants a
	// client certificate hangs up after the client's half of the handshake.
	// (EOF, or a reset, depending on timing).
	hungUp := strings.Contains(msg, "error reading server preface: ") ||
		strings.Contains(msg, "connection closed before server preface received")
	switch {
	case use == noTLS && hungUp:
		return "it closed the connection without answering a plaintext call: it likely requires TLS; give " + tlsSettings
	case use == noTLS:
		return ""
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "it does not speak TLS: check the address, or leave out " + tlsSettings
	case strings.Contains(msg, "x509:"):
		return "its certificate was not accepted: check that --tls-ca is the CA that issued it and that the certificate names the address dialled"
	case strings.Contains(msg, "remote error: tls:"):
		return clientCertHint
	case use == tlsWithoutCert && (hungUp || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")):
		return clientCertHint
	case strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "tls:"):
		return "the TLS handshake failed: check " + tlsSettings
	}
	return ""
}

// tlsUse says how g's calls use TLS.
func (g *globals) tlsUse() tlsUse {
	switch {
	case g.caFile == "":
		return noTLS
	case g.certFile == "":
		return tlsWithoutCert
	}
	return tlsWithCert
}

// unreachable turns err into an unreachableError when the call never
// reached svc: UNAVAILABLE without a reason (every Plexus service gives its
// own UNAVAILABLE answers one: a replica behind, a server draining). A
// failure of TLS becomes a tlsError instead.
func (g *globals) unreachable(svc string, err error) error {
	if err == nil || status.Code(err) != codes.Unavailable || apierr.Reason(err) != "" {
		return err
	}
	addr := *g.addrs[svc]
	if hint := tlsHint(status.Convert(err).Message(), g.tlsUse()); hint != "" {
		return &tlsError{svc: svc, addr: addr, hint: hint, err: err}
	}
	return &unreachableError{svc: svc, addr: addr, err: err}
}

// Execute runs plexusctl and returns the process exit code.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot(os.Stdout)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", describe(err))
		return 1
	}
	return 0
}

// describe renders an error with its stable reason and field violations.
func describe(err error) string {
	msg := err.Error()
	if r := apierr.Reason(err); r != "" {
		msg += " [" + r + "]"
	}
	for _, v := range apierr.FieldViolations(err) {
		msg += "\n  " + v.Field + ": " + v.Description
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return msg
}
