// Command tracedump is the demo's trace viewer for machines without one:
// it receives the spans the Plexus processes export over OTLP/gRPC and
// prints the flow of one export, from membership observing the change to
// the importer's EndpointSlice write, as a tree.
//
//	tracedump serve --otlp 127.0.0.1:4317 --http 127.0.0.1:9499
//	tracedump flow  --http 127.0.0.1:9499 --service plexus-importer --name 'kube P.* endpointslices' [--since RFC3339]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/plexusnet/plexus/internal/testing/otlpsink"
	"github.com/plexusnet/plexus/internal/traceview"
	"github.com/plexusnet/plexus/internal/version"
)

const usage = `usage: tracedump serve|flow [flags]

  serve   receive spans over OTLP/gRPC and serve them as JSON over HTTP
  flow    print the trace of the latest span matching --service and --name
          as a tree, from a running "tracedump serve"

flags:`

func main() {
	if version.Asked(os.Args[1:]) {
		fmt.Println(version.Line("tracedump"))
		return
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		out, code := os.Stderr, 2
		if len(os.Args) >= 2 {
			out, code = os.Stdout, 0
		}
		fmt.Fprintln(out, usage)
		flags("help").SetOutput(out)
		flags("help").PrintDefaults()
		os.Exit(code)
	}
	fs := flags(os.Args[1])
	otlp, httpAddr := fs.Lookup("otlp").Value.(flag.Getter), fs.Lookup("http").Value.(flag.Getter)
	service, name := fs.Lookup("service").Value.(flag.Getter), fs.Lookup("name").Value.(flag.Getter)
	wait, since := fs.Lookup("wait").Value.(flag.Getter), fs.Lookup("since").Value.(flag.Getter)
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(otlp.Get().(string), httpAddr.Get().(string))
	case "flow":
		err = flow(httpAddr.Get().(string), service.Get().(string), name.Get().(string), since.Get().(string), wait.Get().(time.Duration))
	default:
		err = fmt.Errorf("unknown command %q (tracedump --help lists them)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracedump:", err)
		os.Exit(1)
	}
}

// flags returns the flags of a command; -h and --help print them and exit 0.
func flags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("tracedump "+cmd, flag.ExitOnError)
	fs.String("otlp", "127.0.0.1:4317", "OTLP/gRPC address to receive spans on (serve)")
	fs.String("http", "127.0.0.1:9499", "HTTP address serving the spans as JSON")
	fs.String("service", "plexus-importer", "service of the span the flow ends in (flow)")
	fs.String("name", "kube P.* endpointslices", "regular expression matching that span's name; the latest match is taken (flow)")
	fs.Duration("wait", 10*time.Second, "how long to wait for a matching span (flow)")
	fs.String("since", "", "RFC 3339 time: only a span that started after it matches (flow)")
	return fs
}

func serve(otlp, httpAddr string) error {
	sink, err := otlpsink.Start(otlp, 200000)
	if err != nil {
		return err
	}
	defer sink.Stop()
	mux := http.NewServeMux()
	mux.HandleFunc("/spans", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sink.Spans())
	})
	srv := &http.Server{Addr: httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	fmt.Fprintf(os.Stderr, "receiving OTLP/gRPC on %s, spans at http://%s/spans\n", sink.Addr(), httpAddr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return srv.Close()
}

func flow(httpAddr, service, name, sinceText string, wait time.Duration) error {
	re, err := regexp.Compile("^(" + name + ")$")
	if err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	var since time.Time
	if sinceText != "" {
		if since, err = time.Parse(time.RFC3339Nano, sinceText); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		spans, err := traceview.Fetch(context.Background(), "http://"+httpAddr)
		if err != nil {
			return err
		}
		var last *traceview.Span
		for i := range spans {
			sp := &spans[i]
			if sp.Service == service && re.MatchString(sp.Name) && sp.Start.After(since) && (last == nil || sp.Start.After(last.Start)) {
				last = sp
			}
		}
		if last != nil {
			f := traceview.Flow(spans, *last)
			traces := map[string]bool{}
			var ids []string
			for _, sp := range f {
				if !traces[sp.TraceID] {
					traces[sp.TraceID] = true
					ids = append(ids, sp.TraceID)
				}
			}
			fmt.Printf("the flow ending in %s %q spans %d trace(s): %s\n", service, last.Name, len(ids), strings.Join(ids, ", "))
			fmt.Print(traceview.Tree(f))
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no matching span received (are the services exporting to this tracedump?)")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
