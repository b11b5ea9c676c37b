package main

import (
	"encoding/json"
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
	dump := fs.Bool("dump", false, "print the policy as sentry would run it (a valid policy file, every default filled in) instead of the report")
	format := fs.String("format", "text", "report `FORMAT`: text (FILE:LINE:COLUMN: message) or json")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *config == "" || fs.NArg() > 0 || *format != "text" && *format != "json" {
		fmt.Fprintln(os.Stderr, "usage: sentry check -config FILE [-dump] [-format text|json]")
		return 2
	}
	snap, err := policy.Load(*config)
	if err != nil {
		if *format == "json" {
			writeCheckJSON(os.Stdout, checkReport(*config, nil, err))
		} else {
			printPolicyErrors(os.Stderr, err)
		}
		return 1
	}
	if *dump {
		out, err := policy.Dump(snap)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sentry check: dump:", err)
			return 1
		}
		os.Stdout.Write(out)
		return 0
	}
	if *format == "json" {
		writeCheckJSON(os.Stdout, checkReport(*config, snap, nil))
		return 0
	}
	fmt.Printf("%s: ok (%d apps, %d listeners)\n", *config, len(snap.Apps), len(snap.Listeners))
	return 0
}

// checkResult is `sentry check -format json`'s report: one JSON object,
// for CI and editors.
type checkResult struct {
	File      string       `json:"file"`
	Valid     bool         `json:"valid"`
	Apps      int          `json:"apps"`
	Listeners int          `json:"listeners"`
	Errors    []checkError `json:"errors"`
}

// checkError is one problem. Line and column are 1-based; 0 when not
// known (a file that cannot be read, a YAML syntax error the parser gives
// no column for). DidYouMean is the key or value a misspelling most
// likely meant, also named in the message.
type checkError struct {
	File       string `json:"file"`
	Line       int    `json:"line"`
	Column     int    `json:"column"`
	Message    string `json:"message"`
	DidYouMean string `json:"did_you_mean,omitempty"`
}

func checkReport(file string, snap *policy.Snapshot, err error) checkResult {
	r := checkResult{File: file, Errors: []checkError{}}
	if err == nil {
		r.Valid, r.Apps, r.Listeners = true, len(snap.Apps), len(snap.Listeners)
		return r
	}
	var list policy.Errors
	if !errors.As(err, &list) {
		r.Errors = append(r.Errors, checkError{File: file, Message: err.Error()})
		return r
	}
	for _, e := range list {
		r.Errors = append(r.Errors, checkError{File: e.File, Line: e.Line, Column: e.Column, Message: e.Msg, DidYouMean: e.Suggest})
	}
	return r
}

func writeCheckJSON(w io.Writer, r checkResult) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}

// printPolicyErrors prints one FILE:LINE:COLUMN: message per line.
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
