package main

import (
	"flag"
	"fmt"

	"github.com/compactd/compactd/crypto"
)

func init() {
	register("keygen", "print a new sealing key (id:secret) for COMPACTD_KEYS or a key file", runKeygen)
}

func runKeygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	k, err := crypto.GenerateKey()
	if err != nil {
		return err
	}
	fmt.Println(k.String())
	return nil
}
