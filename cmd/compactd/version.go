package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
)

// version is stamped at build time by deploy/build.sh (-ldflags "-X main.version=…"), so a
// running image can say exactly which build it is; a plain `go build` says "dev".
var version = "dev"

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "compactd %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
