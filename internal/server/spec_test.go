package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

type specOptions struct{ Name string }

func (o *specOptions) AddFlags(fs *pflag.FlagSet) { fs.StringVar(&o.Name, "name", o.Name, "a name") }

func (o *specOptions) Validate() error {
	if o.Name == "" {
		return errors.New("--name is empty")
	}
	return nil
}

func TestSpecOfGivesEveryCommandItsOwnOptions(t *testing.T) {
	var got []string
	setup := func(_ context.Context, _ *server.Runtime, o specOptions) (func(), error) {
		got = append(got, o.Name)
		return nil, nil
	}
	defaults := func() specOptions { return specOptions{Name: "default"} }
	a := server.SpecOf(config.Repair, "a", defaults, setup)
	b := server.SpecOf(config.Repair, "b", defaults, setup)

	fsA := pflag.NewFlagSet("a", pflag.ContinueOnError)
	a.AddFlags(fsA)
	require.NoError(t, fsA.Parse([]string{"--name", "set"}))
	fsB := pflag.NewFlagSet("b", pflag.ContinueOnError)
	b.AddFlags(fsB)
	require.NoError(t, fsB.Parse([]string{"--name", ""}))

	require.NoError(t, a.Validate())
	require.EqualError(t, b.Validate(), "--name is empty")
	_, err := a.Setup(context.Background(), nil)
	require.NoError(t, err)
	_, err = b.Setup(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"set", ""}, got, "setup sees each command's parsed flags")
	require.Equal(t, "a", a.Short)
	require.Equal(t, config.Repair, a.Service)
}
