package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

// cmdReload is `sentry reload`: what a service manager's reload should
// run (the systemd unit's ExecReload). It validates the policy file, sends
// SIGHUP to the running sentry, and waits for the running process to say
// whether it applied the policy, through its admin port's /last-reload
// (or, for a sentry without it, the reload counters
// sentry_policy_reloads_total). Exit 0: applied; 1: the file is invalid,
// or the running process refused it (a listener it cannot open, say; the
// reasons are printed), or no outcome came within -timeout; 2: usage. A policy without an admin
// listener cannot be confirmed: the command then exits 0 once the file is
// valid and the signal is sent, and says so. The admin address is read
// from the new file: a reload that moves admin.listen cannot be confirmed
// either (the running process still answers on the old address), and is
// reported the same way.
func cmdReload(args []string) int {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	config := fs.String("config", "", "policy `FILE` the running sentry was started with (required)")
	pidfile := fs.String("pidfile", "", "`FILE` holding the running sentry's PID")
	pid := fs.Int("pid", 0, "the running sentry's `PID` (instead of -pidfile)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the running process's answer")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *config == "" || fs.NArg() > 0 || (*pidfile == "") == (*pid == 0) {
		fmt.Fprintln(os.Stderr, "usage: sentry reload -config FILE (-pidfile FILE | -pid PID) [-timeout D]")
		return 2
	}
	snap, err := policy.Load(*config)
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "sentry reload: the policy is invalid; nothing was signalled")
		return 1
	}
	target := *pid
	if *pidfile != "" {
		b, err := os.ReadFile(*pidfile)
		if err == nil {
			target, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if err != nil || target <= 0 {
			fmt.Fprintf(os.Stderr, "sentry reload: reading %s: %v\n", *pidfile, err)
			return 1
		}
	}
	admin := snap.Admin.Listen
	metrics := ""
	if admin != "" {
		metrics = "http://" + admin + "/metrics"
	}
	// The outcome comes from /last-reload (with the reasons of a refusal);
	// from the reload counters when the running sentry predates it.
	var last reloadReport
	lastErr := errors.New("no admin listener")
	if admin != "" {
		lastErr = getJSON("http://"+admin+"/last-reload", &last)
	}
	before, beforeErr := reloadCounts(metrics)
	if err := syscall.Kill(target, syscall.SIGHUP); err != nil {
		fmt.Fprintf(os.Stderr, "sentry reload: signalling PID %d: %v\n", target, err)
		return 1
	}
	if metrics == "" || beforeErr != nil {
		why := "the policy has no admin listener"
		if beforeErr != nil {
			why = "its admin port did not answer: " + beforeErr.Error()
		}
		fmt.Printf("sentry reload: %s is valid and PID %d was signalled; the outcome cannot be confirmed (%s)\n", *config, target, why)
		return 0
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if lastErr == nil {
			var now reloadReport
			if getJSON("http://"+admin+"/last-reload", &now) != nil || now.PID != last.PID || now.Seq <= last.Seq {
				continue // not yet, or the admin listener is moving
			}
			if now.Result == "success" {
				fmt.Printf("sentry reload: PID %d applied %s\n", target, *config)
				return 0
			}
			fmt.Fprintf(os.Stderr, "sentry reload: PID %d refused the policy and keeps the old one:\n", target)
			for _, e := range now.Errors {
				fmt.Fprintln(os.Stderr, "  "+e)
			}
			return 1
		}
		now, err := reloadCounts(metrics)
		if err != nil {
			continue // the admin listener may be moving
		}
		switch {
		case now.failed > before.failed:
			fmt.Fprintf(os.Stderr, "sentry reload: PID %d refused the policy and keeps the old one; its log says why\n", target)
			return 1
		case now.ok > before.ok:
			fmt.Printf("sentry reload: PID %d applied %s\n", target, *config)
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "sentry reload: no answer from PID %d within %v\n", target, *timeout)
	return 1
}

// getJSON GETs url and decodes its JSON answer into v.
func getJSON(url string, v any) error {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

type reloadTally struct{ ok, failed float64 }

// reloadCounts reads sentry_policy_reloads_total from a metrics page.
func reloadCounts(url string) (reloadTally, error) {
	var t reloadTally
	if url == "" {
		return t, errors.New("no admin listener")
	}
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("%s: %s", url, resp.Status)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "sentry_policy_reloads_total{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			continue
		}
		switch labels {
		case `result="success"`:
			t.ok, found = v, found+1
		case `result="error"`:
			t.failed, found = v, found+1
		}
	}
	if found != 2 {
		return t, fmt.Errorf("%s: no sentry_policy_reloads_total", url)
	}
	return t, sc.Err()
}

// parseFlags parses a command's flags: -h prints the command's usage and
// exits 0 (as `sentry -h` does); any other error exits 2.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
