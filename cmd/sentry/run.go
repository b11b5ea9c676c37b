package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sentry-proxy/sentry/policy"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	config := fs.String("config", "", "policy `FILE` (YAML)")
	listen := fs.String("listen", "127.0.0.1:8080", "quick policy: proxy listen `ADDR`")
	admin := fs.String("admin", "127.0.0.1:9901", "quick policy: admin listen `ADDR` (\"off\" disables)")
	var backends multiFlag
	fs.Var(&backends, "backend", "quick policy: backend `ADDR` (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sentry run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var snap *policy.Snapshot
	var err error
	switch {
	case *config != "" && len(backends) > 0:
		fmt.Fprintln(os.Stderr, "sentry run: use either -config or -backend, not both")
		return 2
	case *config != "":
		snap, err = policy.Load(*config)
	case len(backends) > 0:
		snap, err = policy.FromFlags(*listen, backends, *admin)
	default:
		fmt.Fprintln(os.Stderr, "sentry run: need -config FILE or at least one -backend ADDR")
		return 2
	}
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		return 1
	}
	log := newLogger(snap.Log)
	d, err := startDaemon(snap, log, nil, nil)
	if err != nil {
		log.Error("start failed", "error", err)
		return 1
	}
	log.Info("sentry started", "version", version(), "policy", snap.Source)

	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	for s := range sig {
		switch s {
		case syscall.SIGHUP:
			if *config == "" {
				log.Warn("SIGHUP ignored: no policy file (quick policy from flags)")
				continue
			}
			next, err := policy.Load(*config)
			if err != nil {
				d.reloadFailed(err)
				continue
			}
			if err := d.reload(next); err == nil {
				log.Info("policy reloaded", "source", next.Source)
			}
		case syscall.SIGTERM, syscall.SIGINT:
			log.Info("stopping: draining in-flight requests", "signal", s.String(), "timeout", snap.Server.ShutdownTimeout)
			d.shutdown(d.proxy.Snapshot().Server.ShutdownTimeout)
			log.Info("stopped")
			return 0
		}
	}
	return 0
}
