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
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *config == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: sentry check -config FILE")
		return 2
	}
	snap, err := policy.Load(*config)
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		return 1
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
