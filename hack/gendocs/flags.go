package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	plexusctl "github.com/plexusnet/plexus/clients/plexusctl/cmd"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// flagsDoc renders the flags of the four services and of plexusctl.
func flagsDoc() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header("Flags and environment variables",
		"Every flag of a service can also be set through the environment variable next to it (`PLEXUS_` and the flag's name in capitals, `-` as `_`); "+
			"a flag given on the command line wins over the variable, and an empty variable counts as unset. "+
			"`--help` prints the same list. Tracing is configured only through the standard `OTEL_*` variables."))

	// The shared runtime's flags (config.Common) once, with the defaults
	// that differ by service spelled out; then each service's own.
	type sharedFlag struct {
		flag     *pflag.Flag
		defaults map[string]string // by service
	}
	shared := map[string]*sharedFlag{}
	var sharedNames []string
	own := map[string][]*pflag.Flag{}
	for _, s := range services {
		spec := s.spec()
		common := pflag.NewFlagSet("common", pflag.ContinueOnError)
		config.New(spec.Service).AddFlags(common)
		var err error
		server.Command(spec).Flags().VisitAll(func(f *pflag.Flag) {
			switch {
			case f.Hidden:
			case common.Lookup(f.Name) == nil:
				own[s.name] = append(own[s.name], f)
			case shared[f.Name] == nil:
				shared[f.Name] = &sharedFlag{flag: f, defaults: map[string]string{s.name: defaultValue(f)}}
				sharedNames = append(sharedNames, f.Name)
			case shared[f.Name].flag.Usage != f.Usage:
				err = fmt.Errorf("--%s: the %s's usage differs from the other services'", f.Name, s.name)
			default:
				shared[f.Name].defaults[s.name] = defaultValue(f)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(sharedNames)
	b.WriteString("\n## Every service\n\nThe shared runtime's flags, in all four services (a default that differs by service is given for each):\n\n")
	var rows []flagRow
	for _, name := range sharedNames {
		sf := shared[name]
		row, err := serviceRow(sf.flag)
		if err != nil {
			return nil, err
		}
		var has, values []string
		for _, s := range services {
			if v, ok := sf.defaults[s.name]; ok {
				has = append(has, s.name)
				values = append(values, v)
			}
		}
		if slices.ContainsFunc(values, func(v string) bool { return v != values[0] }) {
			parts := make([]string, len(has))
			for i := range has {
				parts[i] = has[i] + ": " + code(values[i])
			}
			row.def = strings.Join(parts, "<br>")
		}
		if len(has) < len(services) {
			row.usage += " (" + joinAnd(has) + " only)"
		}
		rows = append(rows, row)
	}
	writeTable(&b, rows)

	for _, s := range services {
		spec := s.spec()
		fmt.Fprintf(&b, "\n## plexus-%s\n\n%s.", s.name, spec.Short)
		if len(own[s.name]) == 0 {
			b.WriteString(" It has no flags of its own.\n")
			continue
		}
		b.WriteString(" Its own flags:\n\n")
		var rows []flagRow
		for _, f := range own[s.name] {
			row, err := serviceRow(f)
			if err != nil {
				return nil, fmt.Errorf("plexus-%s: %w", s.name, err)
			}
			rows = append(rows, row)
		}
		writeTable(&b, rows)
		if err := serviceCommands(&b, spec); err != nil {
			return nil, err
		}
	}
	if err := plexusctlFlags(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// serviceCommands renders a service's maintenance commands and their
// flags.
func serviceCommands(b *bytes.Buffer, spec server.Spec) error {
	for _, sub := range server.Command(spec).Commands() {
		if sub.Hidden || !sub.Runnable() {
			continue
		}
		fmt.Fprintf(b, "\n### %s\n\n`%s`: %s.\n", sub.CommandPath(), sub.UseLine(), strings.TrimSuffix(sub.Short, "."))
		var rows []flagRow
		var err error
		sub.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" || err != nil {
				return
			}
			var row flagRow
			if row, err = serviceRow(f); err == nil {
				rows = append(rows, row)
			}
		})
		if err != nil {
			return fmt.Errorf("%s: %w", sub.CommandPath(), err)
		}
		if len(rows) > 0 {
			b.WriteString("\n")
			writeTable(b, rows)
		}
	}
	return nil
}

// joinAnd joins "a", "b" and "c" as "a, b and c".
func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// plexusctlFlags renders plexusctl's global flags and those of each of its
// commands.
func plexusctlFlags(b *bytes.Buffer) error {
	root := plexusctl.NewRoot(io.Discard)
	fmt.Fprintf(b, "\n## plexusctl\n\n%s. Global flags, accepted by every command:\n\n", root.Short)
	var global []*pflag.Flag
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			global = append(global, f)
		}
	})
	writeTable(b, ctlRows(global))
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		for _, sub := range c.Commands() {
			if sub.Hidden || !sub.IsAvailableCommand() && !sub.HasAvailableSubCommands() {
				continue
			}
			if sub.Runnable() {
				fmt.Fprintf(b, "\n### %s\n\n`%s`: %s.\n", sub.CommandPath(), sub.UseLine(), strings.TrimSuffix(sub.Short, "."))
				var local []*pflag.Flag
				sub.LocalFlags().VisitAll(func(f *pflag.Flag) {
					if !f.Hidden && f.Name != "help" {
						local = append(local, f)
					}
				})
				if len(local) > 0 {
					b.WriteString("\n")
					writeTable(b, ctlRows(local))
				}
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}

var (
	// serviceEnv is what config.DocumentEnv appends to a service flag's
	// usage.
	serviceEnv = regexp.MustCompile(` \[env (PLEXUS_[A-Z0-9_]+)\]$`)
	// ctlEnv is how plexusctl names a flag's variable inside its usage:
	// "(env NAME)" or "(env NAME, more)".
	ctlEnv = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]+)(, |; |\))`)
)

// flagRow is one flag in a table.
type flagRow struct {
	name, env, def, usage string
}

func newRow(f *pflag.Flag, env, usage string) flagRow {
	name := "`--" + f.Name + "`"
	if f.Shorthand != "" {
		name = "`-" + f.Shorthand + "`, " + name
	}
	return flagRow{name: name, env: env, def: code(defaultValue(f)), usage: usage}
}

// serviceRow is a service flag's row. The flag must name its variable the
// way config.Bind documents it.
func serviceRow(f *pflag.Flag) (flagRow, error) {
	m := serviceEnv.FindStringSubmatch(f.Usage)
	if m == nil || m[1] != config.EnvName(f.Name) {
		return flagRow{}, fmt.Errorf("--%s: usage %q does not end with [env %s]: the flag is not bound to its environment variable", f.Name, f.Usage, config.EnvName(f.Name))
	}
	return newRow(f, m[1], strings.TrimSuffix(f.Usage, m[0])), nil
}

// ctlRows are plexusctl flags' rows; a flag's variable, if it has one, is
// named in its usage.
func ctlRows(flags []*pflag.Flag) []flagRow {
	var rows []flagRow
	for _, f := range flags {
		usage, env := f.Usage, ""
		if m := ctlEnv.FindStringSubmatchIndex(usage); m != nil {
			env = usage[m[2]:m[3]]
			if usage[m[4]:m[5]] == ")" {
				// "(env NAME)" alone: drop the parenthesis.
				open := strings.LastIndex(usage[:m[0]], "(")
				usage = strings.TrimRight(usage[:open], " ") + usage[m[1]:]
			} else {
				usage = usage[:m[0]] + usage[m[5]:]
			}
		}
		rows = append(rows, newRow(f, env, usage))
	}
	return rows
}

// writeTable writes rows as a table, without the environment column when
// no flag has a variable.
func writeTable(b *bytes.Buffer, rows []flagRow) {
	withEnv := slices.ContainsFunc(rows, func(r flagRow) bool { return r.env != "" })
	if withEnv {
		b.WriteString("| flag | environment | default | description |\n|---|---|---|---|\n")
	} else {
		b.WriteString("| flag | default | description |\n|---|---|---|\n")
	}
	for _, r := range rows {
		if withEnv {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.name, code(r.env), r.def, cell(r.usage))
		} else {
			fmt.Fprintf(b, "| %s | %s | %s |\n", r.name, r.def, cell(r.usage))
		}
	}
}

// defaultValue is the flag's default as a user would type it; empty when
// there is none.
func defaultValue(f *pflag.Flag) string {
	switch v := f.DefValue; {
	case v == "[]" && strings.HasSuffix(f.Value.Type(), "Slice"), v == "[]" && strings.HasSuffix(f.Value.Type(), "Array"):
		return ""
	default:
		return v
	}
}

// code renders s as inline code, nothing when it is empty.
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// cellEscaper escapes what Markdown would otherwise read as table
// borders, HTML tags or emphasis.
var cellEscaper = strings.NewReplacer("|", `\|`, "<", `\<`, ">", `\>`, "*", `\*`, "\n", " ")

// cell escapes s for a table cell.
func cell(s string) string { return cellEscaper.Replace(s) }
