// Package config holds the flags that every Plexus service shares.
//
// The four services register the same flags under the same names, so an
// operator learns them once:
//
//	--grpc-addr, --http-addr            where the service listens
//	--kubeconfig, --cluster-name        which Kubernetes cluster it talks to
//	--allocator-addr                    only services that call the allocator
//	--log-level, --log-format           slog output
//	--tls-cert, --tls-key, --tls-client-ca   TLS, and mutual TLS when a client CA is given
//	--auth-tokens, --authz-policy       bearer tokens and per-method authorization
//	--peer-ca, --peer-token-file        how the service authenticates to the services it calls
//	--max-recv-msg-size, --max-concurrent-streams, --rate-limit, --max-inflight
//	--drain-timeout
//
// Every flag can also be set through the environment as PLEXUS_<FLAG_NAME>
// (upper case, dashes become underscores: --grpc-addr is PLEXUS_GRPC_ADDR).
// A flag given on the command line wins over the environment; an empty
// variable counts as unset.
//
// A service's root command (server.Command builds every service's) wires
// it up like this:
//
//	cfg := config.New(config.Allocator)
//	cmd := &cobra.Command{
//		Use:  "allocator",
//		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), cfg) },
//	}
//	cfg.AddFlags(cmd.Flags())
//	// ... the service's own flags ...
//	config.Bind(cmd, cfg.Validate) // last: documents and applies PLEXUS_* for every flag
package config
