package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

const adminUsage = `usage: sentry admin [-config FILE | -addr ADDR] [-token-file FILE] [-timeout D] COMMAND
commands:
  state                                  everything: overrides, log level, modes, backends
  backend drain|disable|enable [APP] BACKEND
                                         without APP: in every app that has BACKEND
  log trace|debug|info|warn|error|policy
  admission batch|threshold|adaptive|off|policy [APP]
                                         without APP: every app
  reset                                  end every override (as a reload does)
`

// cmdAdmin is `sentry admin`: a client of the admin listener's runtime
// API (package adminapi; docs/operations.md, "Runtime control"). It sends
// one request and prints the JSON answer; exit 0 on success, 1 when the
// request fails or is refused, 2 on usage. With -config the admin
// address and the token file are the policy's, so that the token never
// appears on a command line.
func cmdAdmin(args []string) int {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), adminUsage); fs.PrintDefaults() }
	config := fs.String("config", "", "policy `FILE`: take the admin address and token file from it")
	addr := fs.String("addr", "", "the admin listener's `ADDR` (default 127.0.0.1:9901, or the policy's admin.listen with -config)")
	tokenFile := fs.String("token-file", "", "`FILE` holding the bearer token (default: the policy's admin.token_file with -config)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the answer")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	method, path, form, err := adminRequest(fs.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "sentry admin: %v\n\n%s", err, adminUsage)
		return 2
	}
	target := policy.DefaultAdminListen
	if *config != "" {
		snap, err := policy.Load(*config)
		if err != nil {
			printPolicyErrors(os.Stderr, err)
			return 1
		}
		if snap.Admin.Listen == "" {
			fmt.Fprintf(os.Stderr, "sentry admin: %s turns the admin listener off\n", *config)
			return 1
		}
		target = snap.Admin.Listen
		if *tokenFile == "" {
			*tokenFile = snap.Admin.TokenFile
		}
	}
	if *addr != "" {
		target = *addr
	}
	var token string
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sentry admin:", err)
			return 1
		}
		token = strings.TrimSpace(string(b))
	}
	u := "http://" + target + path
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sentry admin:", err)
		return 1
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: *timeout}).Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sentry admin:", err)
		return 1
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(os.Stderr, "sentry admin: %s %s: %s\n%s", method, path, resp.Status, out)
		return 1
	}
	os.Stdout.Write(out)
	if !bytes.HasSuffix(out, []byte("\n")) {
		fmt.Println()
	}
	return 0
}

// adminRequest maps a command line to the request it makes.
func adminRequest(args []string) (method, path string, form url.Values, err error) {
	form = url.Values{}
	if len(args) == 0 {
		return "", "", nil, errors.New("no command")
	}
	cmd, rest := args[0], args[1:]
	switch {
	case cmd == "state" && len(rest) == 0:
		return http.MethodGet, "/runtime", nil, nil
	case cmd == "reset" && len(rest) == 0:
		return http.MethodPost, "/runtime/reset", form, nil
	case cmd == "backend" && (len(rest) == 2 || len(rest) == 3):
		form.Set("state", rest[0])
		form.Set("backend", rest[len(rest)-1])
		if len(rest) == 3 {
			form.Set("app", rest[1])
		}
		return http.MethodPost, "/runtime/backend", form, nil
	case cmd == "log" && len(rest) == 1:
		form.Set("level", rest[0])
		return http.MethodPost, "/runtime/log", form, nil
	case cmd == "admission" && (len(rest) == 1 || len(rest) == 2):
		form.Set("mode", rest[0])
		if len(rest) == 2 {
			form.Set("app", rest[1])
		}
		return http.MethodPost, "/runtime/admission", form, nil
	case cmd == "state" || cmd == "reset" || cmd == "backend" || cmd == "log" || cmd == "admission":
		return "", "", nil, fmt.Errorf("%s: wrong number of arguments", cmd)
	}
	return "", "", nil, fmt.Errorf("unknown command %q", cmd)
}
