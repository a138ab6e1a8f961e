// Package kubeclient builds the Kubernetes client configuration of the
// services that talk to a cluster (membership, importer, repair): from
// --kubeconfig or in-cluster, with their client-side rate limits, and with
// a transport that makes every request but the long-running watches a
// span, a child of the operation that made it.
package kubeclient

import (
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
)

// Options say where the cluster is and how hard to use it.
type Options struct {
	// Kubeconfig is a kubeconfig file; in-cluster configuration when
	// empty.
	Kubeconfig string
	// Override, when set, is used instead of Kubeconfig (tests that run a
	// service in-process against a test cluster).
	Override *rest.Config
	// QPS and Burst are the client-side rate limits.
	QPS   float32
	Burst int
	// UserAgent names the service and its version.
	UserAgent string
}

// Config returns the client configuration of o.
func Config(o Options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case o.Override != nil:
		cfg = rest.CopyConfig(o.Override)
	case o.Kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg.UserAgent = o.UserAgent
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt,
			otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Query().Get("watch") != "true" }),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return SpanName(r) }))
	})
	return cfg, nil
}

// SpanName names the span of an API request by its method and resource,
// leaving out the namespace and the object's name so that spans group by
// resource: a PUT of /apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/x
// is "kube PUT endpointslices", one of .../pods/web-0/status "kube PUT
// pods/status".
func SpanName(r *http.Request) string {
	return "kube " + r.Method + " " + resource(r.URL.Path)
}

func resource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	skip := 2 // api/v1
	if len(parts) > 0 && parts[0] == "apis" {
		skip = 3 // apis/GROUP/VERSION
	}
	if len(parts) <= skip {
		return path
	}
	rest := parts[skip:]
	if len(rest) > 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) > 2 {
		return rest[0] + "/" + rest[2]
	}
	return rest[0]
}

// Clients are the API clients of one cluster that the services use.
type Clients struct {
	// Config is the configuration they share.
	Config *rest.Config
	// Kube is the client of the built-in APIs.
	Kube kubernetes.Interface
	// MCS is the client of the Multi-Cluster Services API.
	MCS mcsclient.Interface
	// Workloads is the REST client of ExternalWorkloads.
	Workloads rest.Interface
	// Dynamic reads the APIs Plexus has no typed client for (the About
	// API's ClusterProperties, the inventory's ClusterProfiles).
	Dynamic dynamic.Interface
}

// New returns the clients of the cluster o describes.
func New(o Options) (*Clients, error) {
	cfg, err := Config(o)
	if err != nil {
		return nil, err
	}
	c := &Clients{Config: cfg}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.MCS, err = mcsclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("mcs-api client: %w", err)
	}
	if c.Workloads, err = workloadclient.NewRESTClient(cfg); err != nil {
		return nil, fmt.Errorf("externalworkload client: %w", err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return c, nil
}
