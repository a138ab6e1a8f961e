// Command tracedump is the demo's trace viewer for machines without one:
// it receives the spans the Plexus processes export over OTLP/gRPC and
// prints the flow of one export, from membership observing the change to
// the importer's EndpointSlice write, as a tree.
//
//	tracedump serve --otlp 127.0.0.1:4317 --http 127.0.0.1:9499
//	tracedump flow  --http 127.0.0.1:9499 --service plexus-importer --name 'kube P.* endpointslices'
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
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tracedump serve|flow [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	otlp := fs.String("otlp", "127.0.0.1:4317", "OTLP/gRPC address to receive spans on (serve)")
	httpAddr := fs.String("http", "127.0.0.1:9499", "HTTP address serving the spans as JSON")
	service := fs.String("service", "plexus-importer", "service of the span the flow ends in (flow)")
	name := fs.String("name", "kube P.* endpointslices", "regular expression matching that span's name; the latest match is taken (flow)")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for a matching span (flow)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(*otlp, *httpAddr)
	case "flow":
		err = flow(*httpAddr, *service, *name, *wait)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracedump:", err)
		os.Exit(1)
	}
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

func flow(httpAddr, service, name string, wait time.Duration) error {
	re, err := regexp.Compile("^(" + name + ")$")
	if err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		spans, err := fetch(httpAddr)
		if err != nil {
			return err
		}
		var last *otlpsink.Span
		for i := range spans {
			sp := &spans[i]
			if sp.Service == service && re.MatchString(sp.Name) && (last == nil || sp.Start.After(last.Start)) {
				last = sp
			}
		}
		if last != nil {
			f := otlpsink.Flow(spans, *last)
			traces := map[string]bool{}
			var ids []string
			for _, sp := range f {
				if !traces[sp.TraceID] {
					traces[sp.TraceID] = true
					ids = append(ids, sp.TraceID)
				}
			}
			fmt.Printf("the flow ending in %s %q spans %d trace(s): %s\n", service, last.Name, len(ids), strings.Join(ids, ", "))
			fmt.Print(otlpsink.Tree(f))
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no matching span received (are the services exporting to this tracedump?)")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fetch(httpAddr string) ([]otlpsink.Span, error) {
	resp, err := http.Get("http://" + httpAddr + "/spans")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var spans []otlpsink.Span
	return spans, json.NewDecoder(resp.Body).Decode(&spans)
}
