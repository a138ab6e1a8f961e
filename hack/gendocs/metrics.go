package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
)

// metric is one metric family as the reference lists it.
type metric struct {
	name, typ, help string
	labels          []string
}

// runtimePrefixes are the families of client_golang itself (its Go and
// process collectors, and the errors of the /metrics handler): the
// reference names them once instead of listing them.
var runtimePrefixes = []string{"go_", "process_", "promhttp_"}

// metricsDoc renders the metrics of the shared runtime and of each service.
func metricsDoc() ([]byte, error) {
	// The Kubernetes clients of the services retry against the API that
	// does not answer; their complaints are not the generator's.
	klog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "gendocs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// An API server that serves nothing: every request is 404, so the
	// services find no ClusterProperty (the flag names the cluster) and
	// their informers list nothing.
	api := httptest.NewServer(http.NotFoundHandler())
	defer api.Close()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(strings.Replace(emptyKubeconfig, "SERVER", api.URL, 1)), 0o600); err != nil {
		return nil, err
	}

	var b bytes.Buffer
	b.WriteString(header("Metrics",
		"Each service serves these on `--http-addr` at `/metrics`, in the Prometheus text format. "+
			"A histogram is exported as its `_bucket`, `_sum` and `_count` series. "+
			"Besides the metrics below, every service exports those of the Prometheus client library: the Go runtime and the process (`go_*`, `process_*`) and the errors of its `/metrics` handler (`promhttp_*`)."))

	shared, err := describe(config.Allocator, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("shared runtime: %w", err)
	}
	b.WriteString("\n## Every service\n\nThe shared server runtime: gRPC calls (per method; initialised for every method a service registers, so a rate is defined from the start), limits, panics and readiness checks.\n\n")
	metricTable(&b, shared)
	sharedNames := map[string]bool{}
	for _, m := range shared {
		sharedNames[m.name] = true
	}

	for _, s := range services {
		spec := s.spec()
		args := append([]string{"--kubeconfig=" + kubeconfig}, s.setupArgs...)
		all, err := describe(spec.Service, &spec, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		own := slices.DeleteFunc(all, func(m metric) bool { return sharedNames[m.name] })
		fmt.Fprintf(&b, "\n## %s\n\n", s.name)
		if len(own) == 0 {
			b.WriteString("Only those of every service.\n")
			continue
		}
		metricTable(&b, own)
	}
	return b.Bytes(), nil
}

// emptyKubeconfig names an API server (SERVER) that serves nothing: the
// services build their clients and informers from it, which is all their
// metrics need.
const emptyKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: none
  cluster: {server: "SERVER"}
users:
- name: none
  user: {}
contexts:
- name: none
  context: {cluster: none, user: none}
current-context: none
`

// describe builds the server of svc on loopback ports, sets it up with
// spec (none: the bare runtime) parsed from args, runs it for a moment and
// returns every metric registered on it, sorted by name.
func describe(svc config.Service, spec *server.Spec, args []string) ([]metric, error) {
	cfg := config.New(svc)
	fs := pflag.NewFlagSet(svc.Name, pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if spec != nil && spec.AddFlags != nil {
		spec.AddFlags(fs)
	}
	if err := fs.Parse(append([]string{"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0"}, args...)); err != nil {
		return nil, err
	}
	if spec != nil && spec.Validate != nil {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
	}

	var registered []prometheus.Collector
	logger := slog.New(slog.DiscardHandler)
	srv, err := server.New(*cfg, svc.Name, server.WithLogger(logger), server.WithoutSignalHandling(), server.WithDrainDelay(0),
		server.WithMetricsObserver(func(c prometheus.Collector) { registered = append(registered, c) }))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cleanup := func() {}
	if spec != nil {
		c, err := spec.Setup(ctx, &server.Runtime{Config: cfg, Server: srv, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("set up: %w", err)
		}
		if c != nil {
			cleanup = c
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	stop := func() error {
		cancel()
		err := <-ran
		cleanup()
		return err
	}
	// Run initialises the gRPC metrics of every registered method.
	if err := waitLive(ctx, srv.HTTPAddr()); err != nil {
		return nil, errors.Join(err, stop())
	}
	if svc.Name == config.Allocator.Name && spec != nil {
		// The per-pool gauges exist once there is a pool.
		if err := createPool(ctx, srv.GRPCAddr()); err != nil {
			return nil, errors.Join(err, stop())
		}
	}
	ms, err := metricsOf(srv.Registry(), registered)
	return ms, errors.Join(err, stop())
}

// waitLive waits until the server's HTTP side answers /livez.
func waitLive(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/livez", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("server at %s not live after 10s", addr)
}

func createPool(ctx context.Context, addr string) error {
	conn, err := dial.New(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = allocatorv1.NewAllocatorServiceClient(conn).CreatePool(ctx, &allocatorv1.CreatePoolRequest{
		PoolId: "docs", Pool: &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}}})
	if err != nil {
		return fmt.Errorf("create a pool: %w", err)
	}
	return nil
}

// metricsOf describes the collectors registered through the observer and
// checks that they are everything reg serves: a collector registered on
// the registry directly could not be told apart from its type.
func metricsOf(reg *prometheus.Registry, registered []prometheus.Collector) ([]metric, error) {
	types := map[*prometheus.Desc]string{}
	var descs []*prometheus.Desc
	for _, c := range registered {
		cds := describeCollector(c)
		descs = append(descs, cds...)
		if t := vecType(c); t != "" {
			for _, d := range cds {
				types[d] = t
			}
			continue
		}
		for _, m := range collect(c) {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				return nil, fmt.Errorf("write %s: %w", m.Desc(), err)
			}
			types[m.Desc()] = sampleType(&pb)
		}
	}

	seen := map[string]bool{}
	var out []metric
	for _, d := range descs {
		m, err := parseDesc(d)
		if err != nil {
			return nil, err
		}
		seen[m.name] = true
		if isRuntime(m.name) {
			continue
		}
		if m.typ = types[d]; m.typ == "" {
			return nil, fmt.Errorf("metric %s: cannot tell its type: it is no *Vec and produced no sample", m.name)
		}
		out = append(out, m)
	}
	for _, d := range describeCollector(reg) {
		m, err := parseDesc(d)
		if err != nil {
			return nil, err
		}
		if !seen[m.name] && !isRuntime(m.name) {
			return nil, fmt.Errorf("metric %s is registered on Server.Registry(); register it through Server.Registerer() so the reference can describe it", m.name)
		}
	}
	slices.SortFunc(out, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func isRuntime(name string) bool {
	return slices.ContainsFunc(runtimePrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

func describeCollector(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var ds []*prometheus.Desc
	for d := range ch {
		ds = append(ds, d)
	}
	return ds
}

func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}

// vecType is the type of a metric vector, which may have no sample yet.
func vecType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

func sampleType(m *dto.Metric) string {
	switch {
	case m.Counter != nil:
		return "counter"
	case m.Gauge != nil:
		return "gauge"
	case m.Histogram != nil:
		return "histogram"
	case m.Summary != nil:
		return "summary"
	}
	return "untyped"
}

// descPattern reads Desc.String, the only way client_golang shows a
// descriptor's name, help and labels.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func parseDesc(d *prometheus.Desc) (metric, error) {
	s := d.String()
	g := descPattern.FindStringSubmatch(s)
	if g == nil {
		return metric{}, fmt.Errorf("cannot read descriptor %s (did client_golang change Desc.String?)", s)
	}
	name, err := strconv.Unquote(g[1])
	if err != nil {
		return metric{}, fmt.Errorf("descriptor %s: %w", s, err)
	}
	help, err := strconv.Unquote(g[2])
	if err != nil {
		return metric{}, fmt.Errorf("descriptor %s: %w", s, err)
	}
	m := metric{name: name, help: help}
	if g[3] != "" {
		// A constant label's value is the process's own (a replica's
		// identity): the reference names the label only.
		for _, l := range strings.Split(g[3], ",") {
			name, _, _ := strings.Cut(l, "=")
			m.labels = append(m.labels, name)
		}
	}
	if g[4] != "" {
		for _, l := range strings.Split(g[4], ",") {
			// A constrained label shows as c(name).
			if inner, ok := strings.CutPrefix(l, "c("); ok {
				l = strings.TrimSuffix(inner, ")")
			}
			m.labels = append(m.labels, l)
		}
	}
	return m, nil
}

func metricTable(b *bytes.Buffer, ms []metric) {
	b.WriteString("| metric | type | labels | description |\n|---|---|---|---|\n")
	for _, m := range ms {
		labels := make([]string, len(m.labels))
		for i, l := range m.labels {
			labels[i] = code(l)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", m.name, m.typ, strings.Join(labels, ", "), cell(m.help))
	}
}
