package cmd

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// offlineAnnotation marks a command that calls no service, such as the
// config commands: the root does not resolve connection settings for it,
// so a current-context that names no context, or a missing token file,
// cannot stop the commands that fix them.
const offlineAnnotation = "plexusctl/offline"

// setting is a connection setting that a flag, an environment variable and
// the selected context can each give. The first of them that gives a value
// wins; the flag's default is the last resort.
type setting struct {
	flag string
	// env is the environment variable, "" when there is none.
	env string
	// fromContext returns the context's value, "" when it has none. It is
	// called only when neither the flag nor the environment gave one.
	fromContext func(cf *configFile, c *namedContext) (string, error)
}

// addrEnv is the environment variable of service svc's address.
func addrEnv(svc string) string { return "PLEXUS_" + strings.ToUpper(svc) + "_ADDR" }

// connectionSettings are every global flag a context can set.
func connectionSettings() []setting {
	var ss []setting
	for _, svc := range serviceOrder {
		ss = append(ss, setting{flag: svc + "-addr", env: addrEnv(svc),
			fromContext: func(_ *configFile, c *namedContext) (string, error) { return *c.addr(svc), nil }})
	}
	return append(ss,
		setting{flag: "token", env: "PLEXUS_TOKEN", fromContext: contextToken},
		setting{flag: "tls-ca", fromContext: func(cf *configFile, c *namedContext) (string, error) {
			return cf.resolvePath(c.tls().CA), nil
		}},
		setting{flag: "tls-cert", fromContext: func(cf *configFile, c *namedContext) (string, error) {
			return cf.resolvePath(c.tls().Cert), nil
		}},
		setting{flag: "tls-key", fromContext: func(cf *configFile, c *namedContext) (string, error) {
			return cf.resolvePath(c.tls().Key), nil
		}},
		setting{flag: "timeout", fromContext: func(_ *configFile, c *namedContext) (string, error) {
			if c.Timeout == 0 {
				return "", nil
			}
			return c.Timeout.String(), nil
		}},
	)
}

// contextToken reads the bearer token from the context's token-file.
func contextToken(cf *configFile, c *namedContext) (string, error) {
	if c.TokenFile == "" {
		return "", nil
	}
	path := cf.resolvePath(c.TokenFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("context %q of config file %s: read token-file: %w", c.Name, cf.path, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("context %q of config file %s: token-file %s is empty", c.Name, cf.path, path)
	}
	return token, nil
}

// resolve gives every connection setting that no flag set the value of
// its environment variable, else of the selected context, else leaves the
// flag's default. It runs after flag parsing (the root's
// PersistentPreRunE), where Changed tells a flag given on the command line
// from a default.
func (g *globals) resolve(cmd *cobra.Command, _ []string) error {
	if err := checkFormat(g.output); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if isOffline(cmd) {
		return nil
	}
	cf, c, err := g.selectedContext()
	if err != nil {
		return err
	}
	fs := cmd.Root().PersistentFlags()
	for _, s := range connectionSettings() {
		f := fs.Lookup(s.flag)
		if f == nil || f.Changed {
			continue
		}
		var v string
		if s.env != "" {
			v = os.Getenv(s.env)
		}
		if v == "" && c != nil {
			if v, err = s.fromContext(cf, c); err != nil {
				return err
			}
		}
		if v == "" {
			continue
		}
		// Value.Set rather than FlagSet.Set: Changed stays false, so
		// commands that read it (repair run's longer default deadline)
		// still see "not given on the command line".
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("--%s: %w", s.flag, err)
		}
	}
	return nil
}

// isOffline reports whether cmd calls no service: it or a parent carries
// offlineAnnotation, or it is cobra's help or shell completion.
func isOffline(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if _, ok := c.Annotations[offlineAnnotation]; ok {
			return true
		}
		switch c.Name() {
		case "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		}
	}
	return false
}

// configFilePath is the config file: --config, else $PLEXUSCONFIG, else
// the default place. explicit reports --config.
func (g *globals) configFilePath() (path string, explicit bool, err error) {
	if g.configPath != "" {
		return g.configPath, true, nil
	}
	if p := os.Getenv(configEnv); p != "" {
		return p, false, nil
	}
	p, err := defaultConfigPath()
	return p, false, err
}

// loadConfig reads the config file.
func (g *globals) loadConfig() (*configFile, error) {
	path, _, err := g.configFilePath()
	if err != nil {
		return nil, err
	}
	return readConfig(path)
}

// selectedContext reads the config file and returns the context that
// --context names, else its current-context; c is nil when neither names
// one. A missing file is an empty one, unless --config named it.
func (g *globals) selectedContext() (cf *configFile, c *namedContext, err error) {
	path, explicit, err := g.configFilePath()
	if err != nil {
		return nil, nil, err
	}
	if cf, err = readConfig(path); err != nil {
		return nil, nil, err
	}
	if cf.missing && explicit {
		return nil, nil, fmt.Errorf("config file %s does not exist", path)
	}
	name := g.contextName
	if name == "" {
		if name = cf.CurrentContext; name == "" {
			return cf, nil, nil
		}
	}
	if c, err = cf.context(name); err != nil {
		if g.contextName == "" {
			err = fmt.Errorf("current-context: %w", err)
		}
		return nil, nil, err
	}
	return cf, c, nil
}
