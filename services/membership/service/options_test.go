package service

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func TestResourcePath(t *testing.T) {
	tests := map[string]string{
		"/api/v1/namespaces/shop/pods/web-0/status": "/api/v1/pods/status",
		"/api/v1/pods":            "/api/v1/pods",
		"/api/v1/namespaces":      "/api/v1/namespaces",
		"/api/v1/namespaces/shop": "/api/v1/namespaces",
		"/apis/workload.plexus.dev/v1alpha1/namespaces/shop/externalworkloads":       "/apis/workload.plexus.dev/v1alpha1/externalworkloads",
		"/apis/workload.plexus.dev/v1alpha1/namespaces/shop/externalworkloads/vm-1":  "/apis/workload.plexus.dev/v1alpha1/externalworkloads",
		"/apis/workload.plexus.dev/v1alpha1/namespaces/a/externalworkloads/b/status": "/apis/workload.plexus.dev/v1alpha1/externalworkloads/status",
		"/version": "/version",
	}
	for in, want := range tests {
		require.Equal(t, want, resourcePath(in), in)
	}
}

func TestOptions(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("membership", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, o.Validate())
	require.NoError(t, fs.Parse([]string{"--kube-api-qps=0", "--workers=-1", "--batch-period=-1s", "--watch-max-lag=0"}))
	err := o.Validate()
	require.ErrorContains(t, err, "--kube-api-qps")
	require.ErrorContains(t, err, "--workers")
	require.ErrorContains(t, err, "--batch-period")
	require.ErrorContains(t, err, "--watch-max-lag")
}
