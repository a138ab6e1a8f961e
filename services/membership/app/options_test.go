package app

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

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
