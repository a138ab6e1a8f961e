package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/gctune"
	"github.com/plexusnet/plexus/internal/telemetry"
	"github.com/plexusnet/plexus/internal/version"
)

// Runtime is what a service's setup function gets: its configuration, its
// server (register gRPC services, readiness checks and metrics on it) and
// its logger.
type Runtime struct {
	Config *config.Common
	Server *Server
	Logger *slog.Logger
}

// Spec describes a service's command.
type Spec struct {
	// Service names the service and its default addresses.
	Service config.Service
	// Short is the one-line description shown by --help.
	Short string
	// AddFlags registers the service's own flags (may be nil).
	AddFlags func(fs *pflag.FlagSet)
	// Validate checks the service's own flags (may be nil).
	Validate func() error
	// Setup wires the service onto the runtime before it serves. Work it
	// starts in the background must stop when ctx is done; the returned
	// cleanup (may be nil) runs after the server has drained. Assemble
	// builds a Setup from steps with one shutdown path.
	Setup func(ctx context.Context, rt *Runtime) (cleanup func(), err error)
	// Commands are the service's maintenance commands (may be nil), run
	// instead of the server: plexus-allocator compact, for example.
	Commands func() []*cobra.Command
}

// Flags is a service's own options as flags: pointer receivers that
// register them and check them after parsing.
type Flags[O any] interface {
	*O
	AddFlags(fs *pflag.FlagSet)
	Validate() error
}

// SpecOf is the Spec of a service whose options are one value: defaults
// gives a fresh value per call (so two commands never share flags), the
// flags fill it in, and setup receives it once they are parsed and valid.
func SpecOf[O any, P Flags[O]](svc config.Service, short string, defaults func() O, setup func(context.Context, *Runtime, O) (func(), error)) Spec {
	opts := defaults()
	p := P(&opts)
	return Spec{
		Service:  svc,
		Short:    short,
		AddFlags: p.AddFlags,
		Validate: p.Validate,
		Setup: func(ctx context.Context, rt *Runtime) (func(), error) {
			return setup(ctx, rt, opts)
		},
	}
}

// Version is the release the binary was built as (the VERSION file; see
// package version, which also knows the commit).
func Version() string { return version.Version() }

// Command returns the root command of a service: the common flags (with
// their PLEXUS_* environment variables), the service's own flags, and a run
// that sets up logging and telemetry, builds the server, calls Setup and
// serves until SIGTERM or SIGINT, then drains.
func Command(spec Spec) *cobra.Command {
	cfg := config.New(spec.Service)
	cmd := &cobra.Command{
		Use:           "plexus-" + spec.Service.Name,
		Short:         spec.Short,
		Version:       version.String(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cfg, spec)
		},
	}
	if spec.Commands != nil {
		cmd.AddCommand(spec.Commands()...)
		cmd.CompletionOptions.DisableDefaultCmd = true
	}
	cfg.AddFlags(cmd.Flags())
	if spec.AddFlags != nil {
		spec.AddFlags(cmd.Flags())
	}
	config.Bind(cmd, func() error {
		if err := cfg.Validate(); err != nil {
			return err
		}
		if spec.Validate != nil {
			return spec.Validate()
		}
		return nil
	})
	return cmd
}

func run(ctx context.Context, cfg *config.Common, spec Spec) error {
	logger, err := telemetry.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	shutdown, err := telemetry.Setup(ctx, "plexus-"+spec.Service.Name, telemetry.WithLogger(logger))
	if err != nil {
		return fmt.Errorf("set up telemetry: %w", err)
	}
	defer func() { _ = shutdown(context.Background()) }()

	srv, err := New(*cfg, spec.Service.Name, WithLogger(logger))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go gctune.Run(ctx, logger)
	cleanup, err := spec.Setup(ctx, &Runtime{Config: cfg, Server: srv, Logger: logger})
	if err != nil {
		return err
	}
	logger.Info("starting", "service", spec.Service.Name, "version", Version(), "commit", version.Commit())
	err = srv.Run(ctx)
	cancel()
	if cleanup != nil {
		cleanup()
	}
	return err
}

// Main runs a service command and exits the process with its result.
func Main(spec Spec) {
	if err := Command(spec).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
