// Command chartcrds writes the CRDs of `plexusctl crds` into the Helm
// chart's crds/ folder (deploy/helm/plexus/crds), one file each, removing
// any other file there. `make generate` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/plexusnet/plexus/deploy/crds"
)

func main() {
	dir := flag.String("dir", "deploy/helm/plexus/crds", "the chart's crds folder")
	flag.Parse()
	if err := write(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "chartcrds:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := crds.ChartFiles()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
