package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envName is the environment variable that sets a flag: COMPACTD_ + the flag name in upper case
// with dashes as underscores (--max-body-bytes -> COMPACTD_MAX_BODY_BYTES).
func envName(flagName string) string {
	return "COMPACTD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then fills every flag not given on the command line from its
// environment variable. Flags win over the environment; both win over defaults.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += fmt.Sprintf(" [$%s]", envName(f.Name))
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("$%s: %v", envName(f.Name), e)
			}
		}
	})
	return err
}
