package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// EnvPrefix starts the name of every environment variable a flag reads.
const EnvPrefix = "PLEXUS_"

// EnvName returns the environment variable that sets flag name:
// "grpc-addr" → "PLEXUS_GRPC_ADDR".
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line from
// its PLEXUS_* variable, read through lookup (os.LookupEnv in a program). An
// empty value counts as unset. Call it after fs is parsed.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if setErr := fs.Set(f.Name, v); setErr != nil {
			err = fmt.Errorf("environment %s: %w", name, setErr)
		}
	})
	return err
}

// DocumentEnv appends the environment variable to the usage text of every
// flag of fs, so --help lists both spellings.
func DocumentEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		suffix := " [env " + EnvName(f.Name) + "]"
		if !strings.HasSuffix(f.Usage, suffix) {
			f.Usage += suffix
		}
	})
}

// Bind makes the PLEXUS_* environment part of cmd's flags: it documents the
// variables in --help and, before cmd runs, fills every flag the command
// line left unset from the environment, then calls validate (which may be
// nil). Call it after every flag of cmd is registered.
func Bind(cmd *cobra.Command, validate func() error) {
	DocumentEnv(cmd.Flags())
	prevE, prev := cmd.PreRunE, cmd.PreRun
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := ApplyEnv(c.Flags(), os.LookupEnv); err != nil {
			return err
		}
		if validate != nil {
			if err := validate(); err != nil {
				return err
			}
		}
		switch {
		case prevE != nil:
			return prevE(c, args)
		case prev != nil:
			prev(c, args)
		}
		return nil
	}
}
