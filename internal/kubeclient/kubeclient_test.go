package kubeclient

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

func TestSpanName(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"PUT", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/x", "kube PUT endpointslices"},
		{"POST", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices", "kube POST endpointslices"},
		{"PUT", "/api/v1/namespaces/shop/pods/web-0/status", "kube PUT pods/status"},
		{"GET", "/api/v1/namespaces", "kube GET namespaces"},
		{"GET", "/api/v1/namespaces/shop", "kube GET namespaces"},
		{"GET", "/apis/multicluster.x-k8s.io/v1beta1/serviceimports", "kube GET serviceimports"},
		{"GET", "/version", "kube GET /version"},
	} {
		r := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path}}
		require.Equal(t, tc.want, SpanName(r), tc.path)
	}
}

func TestConfig(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443"}
	cfg, err := Config(Options{Override: base, QPS: 7, Burst: 9, UserAgent: "plexus-test/1"})
	require.NoError(t, err)
	require.Equal(t, "https://127.0.0.1:6443", cfg.Host)
	require.Equal(t, float32(7), cfg.QPS)
	require.Equal(t, 9, cfg.Burst)
	require.Equal(t, "plexus-test/1", cfg.UserAgent)
	require.NotNil(t, cfg.WrapTransport, "requests are traced")
	require.Nil(t, base.WrapTransport, "the override is copied, not changed")

	_, err = Config(Options{Kubeconfig: "/nonexistent/kubeconfig"})
	require.Error(t, err)
}
