package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/plexusnet/plexus/internal/atomicfile"
)

// configEnv names the config file when --config is not given.
const configEnv = "PLEXUSCONFIG"

// configFile is plexusctl's config file: named contexts, each the addresses
// and credentials of one Plexus installation, and the one in use.
//
// It is decoded with go.yaml.in/yaml/v3 (the maintained gopkg.in/yaml.v3)
// rather than sigs.k8s.io/yaml because its errors carry the line of every
// problem, including a misspelt key or a value of the wrong type.
type configFile struct {
	CurrentContext string          `yaml:"current-context,omitempty"`
	Contexts       []*namedContext `yaml:"contexts"`

	// path is where the file was read from and is written to.
	path string
	// missing reports that nothing was at path.
	missing bool
}

// namedContext is one context of the config file. Empty fields leave the
// setting to the built-in default.
type namedContext struct {
	Name       string        `yaml:"name"`
	Allocator  string        `yaml:"allocator,omitempty"`
	Membership string        `yaml:"membership,omitempty"`
	Importer   string        `yaml:"importer,omitempty"`
	Repair     string        `yaml:"repair,omitempty"`
	TLS        *contextTLS   `yaml:"tls,omitempty"`
	TokenFile  string        `yaml:"token-file,omitempty"`
	Timeout    time.Duration `yaml:"timeout,omitempty"`
}

// contextTLS is a context's TLS material: files, relative ones to the
// config file's directory.
type contextTLS struct {
	CA   string `yaml:"ca,omitempty"`
	Cert string `yaml:"cert,omitempty"`
	Key  string `yaml:"key,omitempty"`
}

// addr returns the field of service svc's address.
func (c *namedContext) addr(svc string) *string {
	switch svc {
	case "allocator":
		return &c.Allocator
	case "membership":
		return &c.Membership
	case "importer":
		return &c.Importer
	case "repair":
		return &c.Repair
	}
	panic("plexusctl: unknown service " + svc)
}

// tls returns the context's TLS material, empty when it has none.
func (c *namedContext) tls() contextTLS {
	if c.TLS == nil {
		return contextTLS{}
	}
	return *c.TLS
}

// defaultConfigPath is $XDG_CONFIG_HOME/plexus/config.yaml, falling back to
// ~/.config as the XDG base directory specification says (on every OS, so
// the documented place is the real one).
func defaultConfigPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) { // unset, or relative, which the specification says to ignore
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the config file: %w (use --config or %s)", err, configEnv)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "plexus", "config.yaml"), nil
}

// readConfig reads the config file at path. A missing file reads as an
// empty one with missing set: the first set-context creates it.
func readConfig(path string) (*configFile, error) {
	cf := &configFile{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		cf.missing = true
		return cf, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cf); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		return nil, fmt.Errorf("config file %s: %s", path, yamlError(err))
	}
	seen := map[string]bool{}
	for i, c := range cf.Contexts {
		switch {
		case c == nil || c.Name == "":
			return nil, fmt.Errorf("config file %s: context %d has no name", path, i+1)
		case seen[c.Name]:
			return nil, fmt.Errorf("config file %s: context %q appears more than once", path, c.Name)
		}
		seen[c.Name] = true
	}
	return cf, nil
}

// goTypeName is the Go type the decoder names in an unknown-field error,
// which means nothing to the file's author.
var goTypeName = regexp.MustCompile(` in type cmd\.\w+`)

// yamlError flattens the decoder's multi-line list of type errors into one
// line: "line 4: field allocater not found; line 7: ...".
func yamlError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return goTypeName.ReplaceAllString(strings.Join(te.Errors, "; "), "")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// marshal renders the file as YAML.
func (cf *configFile) marshal() ([]byte, error) {
	if cf.Contexts == nil {
		cf.Contexts = []*namedContext{} // "contexts: []" rather than null
	}
	return encodeYAML(cf)
}

// encodeYAML renders v as YAML indented by two spaces, as kubectl writes
// its files.
func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write replaces the file atomically: a reader sees the old file or the new
// one, never a torn one, and a crash leaves at most a stray temporary file.
// The file holds paths to credentials, so it is 0600 in a 0700 directory.
func (cf *configFile) write() error {
	b, err := cf.marshal()
	if err != nil {
		return fmt.Errorf("encode config file: %w", err)
	}
	path := cf.path
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target // keep a symlinked file (dotfile managers) a symlink
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("write config file: %w", err)
	}
	cf.missing = false
	return nil
}

// names returns the contexts' names in file order.
func (cf *configFile) names() []string {
	var names []string
	for _, c := range cf.Contexts {
		names = append(names, c.Name)
	}
	return names
}

// find returns the context called name.
func (cf *configFile) find(name string) *namedContext {
	for _, c := range cf.Contexts {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// context returns the context called name, or an error that names the file
// and the contexts it has.
func (cf *configFile) context(name string) (*namedContext, error) {
	if c := cf.find(name); c != nil {
		return c, nil
	}
	if len(cf.Contexts) == 0 {
		return nil, fmt.Errorf("no context %q: config file %s has no contexts (create one with plexusctl config set-context)", name, cf.path)
	}
	return nil, fmt.Errorf("no context %q in config file %s; known contexts: %s", name, cf.path, strings.Join(cf.names(), ", "))
}

// remove deletes the context called name and reports whether it was there.
func (cf *configFile) remove(name string) bool {
	n := len(cf.Contexts)
	cf.Contexts = slices.DeleteFunc(cf.Contexts, func(c *namedContext) bool { return c.Name == name })
	return len(cf.Contexts) != n
}

// resolvePath makes a path from the file relative to the file's directory,
// so a config directory with its certificates can be moved as a whole.
func (cf *configFile) resolvePath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(cf.path), p)
}
