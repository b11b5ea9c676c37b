// Command sentry is an admission-control reverse proxy. See the README.
package main

import (
	"fmt"
	"os"

	"github.com/sentry-proxy/sentry/policy"
)

const usage = `sentry: an admission-control reverse proxy for web farms.

Usage:
  sentry run -config FILE [-pidfile FILE] [-watch D] [-upgrade-timeout D]
        Run with a policy file. SIGHUP (or, with -watch, a change of the
        file) reloads it: a bad policy is refused and the old one kept.
        SIGUSR2 upgrades: the binary now on disk is started, takes over the
        listening sockets, and this process drains and exits; if the new
        one fails, this one keeps serving. SIGUSR1 reopens the access
        log's file (logrotate). SIGTERM/SIGINT drain and stop.
  sentry run -listen ADDR -backend ADDR [-backend ADDR ...] [-admin ADDR]
        Run a quick policy without a file: one app on ADDR (default
        127.0.0.1:8080) relaying to the backends; admin on 127.0.0.1:9901.
  sentry check -config FILE [-dump] [-format text|json]
        Validate a policy. Prints every error as FILE:LINE:COLUMN: message
        (-format json: one JSON report with file, line, column, message and
        did_you_mean); exit 1 if there is any. -dump prints the policy as
        sentry would run it: a valid policy file with every default filled
        in (the admin listener's /config shows the one in force).
  sentry schema
        Print the policy's JSON Schema, for editors and CI (the repository
        keeps it as docs/policy.schema.json).
  sentry reload -config FILE (-pidfile FILE | -pid PID) [-timeout D]
        Validate the policy, send SIGHUP to the running sentry and wait for
        it to apply the policy; exit 1 if the file is invalid or the
        running process refused it (the systemd unit's ExecReload).
  sentry admin [-config FILE | -addr ADDR] [-token-file FILE] COMMAND
        Change the running sentry through its admin listener's runtime
        API, until the next reload: backend drain|disable|enable [APP]
        BACKEND; log LEVEL; admission MODE [APP] (MODE policy ends it);
        reset (end every change); state (print them). -config takes the
        address and admin.token_file from the policy.
  sentry demo [-listen ADDR] [-admin ADDR] [-duration D] [-no-load] [-quiet]
        Start simulated backends on loopback, the proxy in front of them
        with three classes and a 500 ms target, and a looping load that
        crosses capacity; show per class, every second, arrivals,
        admissions, rejections and p95 vs target (also live at
        http://ADMIN/status). Prints the URLs to try.
  sentry version
        Print the version.

Run "sentry COMMAND -h" for a command's flags (exit 0, as sentry -h).
`

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:])
	case "check":
		return cmdCheck(args[1:])
	case "reload":
		return cmdReload(args[1:])
	case "admin":
		return cmdAdmin(args[1:])
	case "demo":
		return cmdDemo(args[1:])
	case "schema":
		if len(args) > 1 {
			fmt.Fprintln(os.Stderr, "usage: sentry schema")
			return 2
		}
		os.Stdout.Write(policy.Schema())
		return 0
	case "version", "-version", "--version":
		fmt.Println("sentry", version())
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "sentry: unknown command %q\n\n%s", args[0], usage)
	return 2
}
