// Command plexusctl talks to the four Plexus services.
package main

import (
	"os"

	"github.com/plexusnet/plexus/clients/plexusctl/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
