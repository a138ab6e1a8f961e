package cmd

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/internal/traceview"
)

// defaultTracesURL is where the demo's trace receiver (tracedump serve)
// serves the spans it received.
const defaultTracesURL = "http://127.0.0.1:9499"

func traceCmd(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "trace TRACE_ID",
		Short: "Print one trace, and the traces linked to it, as a tree (from the demo's trace receiver)",
		Long: "Fetch the spans that a tracedump receiver (the demo's, or `tracedump serve` beside your services) " +
			"keeps, and print the trace TRACE_ID (or a prefix of at least 8 hex digits) together with every trace " +
			"linked to it in either direction: membership's trace of an endpoint change and the importer's " +
			"reconcile that links to it are one flow. A Jaeger or other OTLP backend shows the same traces by id.",
		Example: "  plexusctl trace 4bf92f3577b34da6a3ce929d0e0e4736\n  plexusctl trace 4bf92f35 --from http://127.0.0.1:9499",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			spans, err := traceview.Fetch(ctx, from)
			if err != nil {
				return fmt.Errorf("%w (is a trace receiver serving at %s? --from or PLEXUS_TRACES_URL names it)", err, from)
			}
			connected, traces, err := traceview.Connected(spans, args[0])
			if err != nil {
				return err
			}
			services := map[string]bool{}
			for _, sp := range connected {
				services[sp.Service] = true
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "trace %s: %d spans in %d trace(s) from %d service(s)", traces[0], len(connected), len(traces), len(services))
			if len(traces) > 1 {
				fmt.Fprintf(out, "; linked: %s", strings.Join(traces[1:], ", "))
			}
			fmt.Fprintln(out)
			fmt.Fprint(out, traceview.Tree(connected))
			return nil
		},
	}
	def := defaultTracesURL
	if v := os.Getenv("PLEXUS_TRACES_URL"); v != "" {
		def = v
	}
	cmd.Flags().StringVar(&from, "from", def, "base URL of the trace receiver (tracedump serve --http) [env PLEXUS_TRACES_URL]")
	return cmd
}
