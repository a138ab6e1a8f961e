package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

func configCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Manage the config file: contexts, each the addresses and credentials of one installation",
		Long: "The config file (--config, else $" + configEnv + ", else $XDG_CONFIG_HOME/plexus/config.yaml or " +
			"~/.config/plexus/config.yaml) holds named contexts: the four services' addresses, TLS files, a token file " +
			"and a call timeout. Commands use the context named by --context, else the file's current-context. " +
			"A flag beats its environment variable, which beats the context, which beats the built-in default. " +
			"Relative paths in the file are relative to the file's directory.",
		Annotations: map[string]string{offlineAnnotation: ""},
	}
	c.AddCommand(configViewCmd(g), configGetContextsCmd(g), configCurrentContextCmd(g),
		configUseContextCmd(g), configSetContextCmd(g), configDeleteContextCmd(g))
	return c
}

func configViewCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "view", Short: "Print the config file (-o yaml, the default, or json)", Args: cobra.NoArgs,
		RunE: g.withConfig(func(_ *cobra.Command, cf *configFile, _ []string) error {
			y, err := cf.marshal()
			if err != nil {
				return err
			}
			return renderDoc(g.out, g.output, y)
		}),
	}
}

// contextListing is one context as get-contexts prints it in JSON or YAML.
type contextListing struct {
	Current      bool `yaml:"current"`
	namedContext `yaml:",inline"`
}

func configGetContextsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get-contexts", Short: "List the contexts, marking the current one with *", Args: cobra.NoArgs,
		RunE: g.withConfig(func(_ *cobra.Command, cf *configFile, _ []string) error {
			if g.output != "table" && g.output != "" {
				list := []contextListing{}
				for _, c := range cf.Contexts {
					list = append(list, contextListing{Current: c.Name == cf.CurrentContext, namedContext: *c})
				}
				y, err := encodeYAML(list)
				if err != nil {
					return err
				}
				return renderDoc(g.out, g.output, y)
			}
			t := &table{header: []string{"CURRENT", "NAME", "ALLOCATOR", "MEMBERSHIP", "IMPORTER", "REPAIR", "TLS", "TOKEN"}}
			for _, c := range cf.Contexts {
				cur := ""
				if c.Name == cf.CurrentContext {
					cur = "*"
				}
				tls := "-"
				switch {
				case c.tls().Cert != "":
					tls = "mutual"
				case c.tls().CA != "":
					tls = "yes"
				}
				token := "-"
				if c.TokenFile != "" {
					token = "file"
				}
				t.add(cur, c.Name, orDash(c.Allocator), orDash(c.Membership), orDash(c.Importer), orDash(c.Repair), tls, token)
			}
			return render(g.out, "table", nil, func() *table { return t })
		}),
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func configCurrentContextCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "current-context", Short: "Print the name of the current context", Args: cobra.NoArgs,
		RunE: g.withConfig(func(_ *cobra.Command, cf *configFile, _ []string) error {
			if cf.CurrentContext == "" {
				return fmt.Errorf("current-context is not set in config file %s (set it with plexusctl config use-context)", cf.path)
			}
			_, err := fmt.Fprintln(g.out, cf.CurrentContext)
			return err
		}),
	}
}

func configUseContextCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "use-context NAME", Short: "Make NAME the current context", Args: cobra.ExactArgs(1),
		ValidArgsFunction: g.completeContexts,
		RunE: g.withConfig(func(_ *cobra.Command, cf *configFile, args []string) error {
			if _, err := cf.context(args[0]); err != nil {
				return err
			}
			cf.CurrentContext = args[0]
			if err := cf.write(); err != nil {
				return err
			}
			_, err := fmt.Fprintf(g.out, "Switched to context %q.\n", args[0])
			return err
		}),
	}
}

func configSetContextCmd(g *globals) *cobra.Command {
	var flags contextFlags
	c := &cobra.Command{
		Use:   "set-context NAME [--allocator ADDR] [--membership ADDR] [--importer ADDR] [--repair ADDR] [--tls-ca FILE] [--tls-cert FILE] [--tls-key FILE] [--token-file FILE] [--timeout DURATION]",
		Short: "Create a context or change the fields given of an existing one",
		Long: "Create context NAME, or change the fields given of an existing one; an empty value (--tls-ca '') clears a field. " +
			"Relative file paths given here are taken from the working directory and written as absolute paths " +
			"(relative paths written into the file by hand are relative to the file's directory). " +
			"The file is written atomically, mode 0600.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeContexts,
		RunE: g.withConfig(func(cmd *cobra.Command, cf *configFile, args []string) error {
			name := args[0]
			ctx := cf.find(name)
			created := ctx == nil
			if created {
				ctx = &namedContext{Name: name}
				cf.Contexts = append(cf.Contexts, ctx)
			}
			if err := flags.apply(cmd.Flags(), ctx); err != nil {
				return err
			}
			if err := cf.write(); err != nil {
				return err
			}
			verb := "modified"
			if created {
				verb = "created"
			}
			_, err := fmt.Fprintf(g.out, "Context %q %s in %s.\n", name, verb, cf.path)
			return err
		}),
	}
	flags.add(c.Flags())
	return c
}

// contextFlags are the fields of a context as set-context's flags.
type contextFlags struct {
	addrs                     map[string]*string
	caFile, certFile, keyFile string
	tokenFile                 string
	timeout                   time.Duration
}

func (f *contextFlags) add(fs *pflag.FlagSet) {
	f.addrs = map[string]*string{}
	for _, svc := range serviceOrder {
		f.addrs[svc] = fs.String(svc, "", "address of the "+svc+" service")
	}
	// These shadow the global --tls-* and --timeout, which the config
	// commands do not use: here they are the context's fields.
	fs.StringVar(&f.caFile, "tls-ca", "", "CA bundle to verify servers with")
	fs.StringVar(&f.certFile, "tls-cert", "", "client certificate for mutual TLS")
	fs.StringVar(&f.keyFile, "tls-key", "", "client key for mutual TLS")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token")
	fs.DurationVar(&f.timeout, "timeout", 0, "deadline of each call (0 for the built-in default)")
}

// apply sets the fields of ctx whose flags were given on fs; file paths
// are made absolute.
func (f *contextFlags) apply(fs *pflag.FlagSet, ctx *namedContext) error {
	for _, svc := range serviceOrder {
		if fs.Changed(svc) {
			*ctx.addr(svc) = *f.addrs[svc]
		}
	}
	tls := ctx.tls()
	for _, file := range []struct {
		flag  string
		value string
		dst   *string
	}{
		{"tls-ca", f.caFile, &tls.CA},
		{"tls-cert", f.certFile, &tls.Cert},
		{"tls-key", f.keyFile, &tls.Key},
		{"token-file", f.tokenFile, &ctx.TokenFile},
	} {
		if !fs.Changed(file.flag) {
			continue
		}
		p, err := absPath(file.value)
		if err != nil {
			return fmt.Errorf("--%s: %w", file.flag, err)
		}
		*file.dst = p
	}
	ctx.TLS = nil
	if tls != (contextTLS{}) {
		ctx.TLS = &tls
	}
	if fs.Changed("timeout") {
		ctx.Timeout = f.timeout
	}
	return nil
}

// absPath makes a path given on the command line absolute, so it keeps
// naming the same file whatever directory plexusctl later runs in.
func absPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	return filepath.Abs(p)
}

func configDeleteContextCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "delete-context NAME", Short: "Delete a context", Args: cobra.ExactArgs(1),
		ValidArgsFunction: g.completeContexts,
		RunE: g.withConfig(func(cmd *cobra.Command, cf *configFile, args []string) error {
			name := args[0]
			if _, err := cf.context(name); err != nil {
				return err
			}
			cf.remove(name)
			wasCurrent := cf.CurrentContext == name
			if wasCurrent {
				cf.CurrentContext = ""
			}
			if err := cf.write(); err != nil {
				return err
			}
			if wasCurrent {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %q was the current context; choose another with plexusctl config use-context\n", name)
			}
			_, err := fmt.Fprintf(g.out, "Deleted context %q from %s.\n", name, cf.path)
			return err
		}),
	}
}

// withConfig is a config command's RunE that first reads the config file.
func (g *globals) withConfig(run func(cmd *cobra.Command, cf *configFile, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cf, err := g.loadConfig()
		if err != nil {
			return err
		}
		return run(cmd, cf, args)
	}
}

// completeContexts completes a context name from the config file.
func (g *globals) completeContexts(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cf, err := g.loadConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return cf.names(), cobra.ShellCompDirectiveNoFileComp
}

// renderDoc writes the YAML document y as it is (also for the default
// table format, which a whole file has no form of) or as JSON.
func renderDoc(w io.Writer, format string, y []byte) error {
	switch format {
	case "yaml", "table", "":
		_, err := w.Write(y)
		return err
	case "json":
		// Through YAML, so the field names and the rendering of durations
		// ("30s") are the file's.
		var doc any
		if err := yaml.Unmarshal(y, &doc); err != nil {
			return err
		}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	return fmt.Errorf("unknown output format %q (yaml or json)", format)
}
