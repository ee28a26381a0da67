package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/compactd/compactd/proxy"
)

// runHashKey reads a client key from standard input (not from the command line, where it would
// land in shell history and ps) and prints its "sha256:…" form for a tenants file.
func runHashKey(args []string) error {
	fs := flag.NewFlagSet("hash-key", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	key := strings.TrimSpace(line)
	if key == "" {
		if err != nil {
			return fmt.Errorf("reading the key from stdin: %w", err)
		}
		return errors.New("empty key: pipe the client key on stdin, e.g. `printf %s \"$KEY\" | compactd hash-key`")
	}
	fmt.Fprintln(os.Stdout, proxy.HashKey(key))
	return nil
}
