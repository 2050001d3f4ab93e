// Command gpuchaos is the chaos-engineering and resilience-validation tool
// for GPU clusters. Every subcommand lives in internal/cli.
package main

import (
	"os"

	"github.com/gpuchaos/gpuchaos/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
