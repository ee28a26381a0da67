package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/compactd/compactd/internal/crypto"
)

func runKeygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	k, err := crypto.GenerateKey()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, k.String())
	return nil
}
