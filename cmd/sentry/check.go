package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sentry-proxy/sentry/policy"
)

func cmdCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	config := fs.String("config", "", "policy `FILE` to validate (required)")
	dump := fs.Bool("dump", false, "print the effective policy (defaults filled in) as YAML after validating it")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *config == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: sentry check -config FILE [-dump]")
		return 2
	}
	snap, err := policy.Load(*config)
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		return 1
	}
	if *dump {
		out, err := policy.Dump(snap)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sentry check: dump:", err)
			return 1
		}
		fmt.Printf("# %s: ok (%d apps, %d listeners); the policy as sentry would run it\n", *config, len(snap.Apps), len(snap.Listeners))
		os.Stdout.Write(out)
		return 0
	}
	fmt.Printf("%s: ok (%d apps, %d listeners)\n", *config, len(snap.Apps), len(snap.Listeners))
	return 0
}

// printPolicyErrors prints one FILE:LINE: message per line.
func printPolicyErrors(w io.Writer, err error) {
	var list policy.Errors
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, err)
}
