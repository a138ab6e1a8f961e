package cmd

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// jsonOptions render messages as grpcurl does (protojson, two-space
// indent), so scripts can switch between the two.
var jsonOptions = protojson.MarshalOptions{Multiline: true, Indent: "  "}

// table is a table rendering of a response: a header and rows.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// checkFormat refuses an unknown --output before a command calls anything:
// a write must not be made and then reported as failed.
func checkFormat(format string) error {
	switch format {
	case "json", "yaml", "table", "":
		return nil
	}
	return fmt.Errorf("unknown output format %q (table, json or yaml)", format)
}

// render writes msg in the chosen format; tbl builds the table form.
func render(w io.Writer, format string, msg proto.Message, tbl func() *table) error {
	switch format {
	case "json":
		b, err := jsonOptions.Marshal(msg)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "yaml":
		b, err := protojson.Marshal(msg)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	case "table", "":
		return writeTable(w, tbl(), true)
	}
	return checkFormat(format)
}

func writeTable(w io.Writer, t *table, header bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	}
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// watchOutput renders the events of a watch: in the table form the header is
// printed once, before the first event, not again for every batch.
type watchOutput struct {
	w      io.Writer
	format string
	headed bool
}

func (s *watchOutput) render(msg proto.Message, tbl func() *table) error {
	if s.format != "table" && s.format != "" {
		return render(s.w, s.format, msg, tbl)
	}
	t := tbl()
	err := writeTable(s.w, t, !s.headed)
	s.headed = true
	return err
}
