package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/internal/logwriter"
	"github.com/sentry-proxy/sentry/learned"
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
	pidfile := fs.String("pidfile", "", "write the PID of the serving process to `FILE`; an upgrade (SIGUSR2) rewrites it with the new PID")
	watch := fs.Duration("watch", 0, "poll the policy file this often and reload when its content changes (0: only on SIGHUP)")
	upgradeTimeout := fs.Duration("upgrade-timeout", tableflip.DefaultUpgradeTimeout, "how long an upgraded process may take to become ready before it is killed and the upgrade fails")
	stateFile := fs.String("state-file", "", "keep what was learned in `FILE` across restarts: read at start (unless an upgrade handed it over), written at a stop and every minute")
	var backends multiFlag
	fs.Var(&backends, "backend", "quick policy: backend `ADDR` (repeatable)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sentry run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch {
	case *config != "" && len(backends) > 0:
		fmt.Fprintln(os.Stderr, "sentry run: use either -config or -backend, not both")
		return 2
	case *config == "" && len(backends) == 0:
		fmt.Fprintln(os.Stderr, "sentry run: need -config FILE or at least one -backend ADDR")
		return 2
	case *watch < 0:
		fmt.Fprintln(os.Stderr, "sentry run: -watch must not be negative")
		return 2
	case *watch > 0 && *config == "":
		fmt.Fprintln(os.Stderr, "sentry run: -watch needs -config FILE")
		return 2
	case *upgradeTimeout <= 0:
		fmt.Fprintln(os.Stderr, "sentry run: -upgrade-timeout must be positive")
		return 2
	}

	// Signals first: until Notify, SIGHUP's default action would kill us.
	// Signals that arrive before we are ready wait in the channel.
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Stop(sig)

	// The upgrader: in a process started by an upgrade it holds the
	// listening sockets handed over by the previous process.
	upg, err := tableflip.New(tableflip.Options{PIDFile: *pidfile, UpgradeTimeout: *upgradeTimeout})
	switch {
	case errors.Is(err, tableflip.ErrNotSupported):
		upg = nil
	case err != nil:
		fmt.Fprintln(os.Stderr, "sentry run:", err)
		return 1
	default:
		defer upg.Stop()
	}

	// A process started by an upgrade asks its parent for what it has
	// learned (package learned) before anything else, so the state is as
	// fresh as it can be when this process starts serving.
	var handover *learned.Taker
	var doc *learned.Document
	var learnedWhy string
	if upg != nil && upg.HasParent() {
		handover, doc, learnedWhy = askLearned(upg)
	}
	// failStart tells the parent of an upgrade why this process is about
	// to exit before it is ready (its `sentry upgrade` shows it).
	failStart := func(why string) {
		if handover != nil {
			handover.Fail(why)
		}
	}

	// Load and validate the whole policy before anything opens: a process
	// started by an upgrade that fails here exits before it is ready, and
	// the old process keeps serving.
	var snap *policy.Snapshot
	var seen hashBox
	if *config != "" {
		var data []byte
		if data, err = os.ReadFile(*config); err == nil {
			seen.set(sha256.Sum256(data))
			snap, err = policy.Parse(*config, data)
		}
	} else {
		snap, err = policy.FromFlags(*listen, backends, *admin)
	}
	if err != nil {
		printPolicyErrors(os.Stderr, err)
		failStart(strings.Join(errorLines(err), "\n"))
		return 1
	}
	// Old and new process log to the same stream during an upgrade; the
	// pid tells them apart.
	logOut := newProcessLogOutput()
	// Runs after the defers below (the background goroutines have ended):
	// every line logged before the return is flushed, for at most
	// processLogFlush.
	defer logOut.Close(processLogFlush)
	log := newLogger(snap.Log, logOut).With("pid", os.Getpid())
	var lf listenFunc
	if upg != nil {
		lf = upgraderListen(upg, log)
	}
	// What was learned before: from the parent of an upgrade, else from
	// the state file. Restored before the listeners serve.
	source := "handover"
	if doc == nil && learnedWhy != "" {
		log.Warn("upgrade: the previous process's learned state did not arrive", "why", learnedWhy)
	}
	if doc == nil && *stateFile != "" {
		source = "state_file"
		switch doc, err = learned.ReadFile(*stateFile); {
		case errors.Is(err, os.ErrNotExist):
			log.Info("no state file yet; starting afresh", "file", *stateFile)
			learnedWhy = ""
		case err != nil:
			log.Warn("state file ignored; starting afresh", "error", err)
			learnedWhy = err.Error()
		}
	}
	var restored learnedReport
	d, err := startDaemon(snap, log, lf, nil, func(d *daemon) {
		if doc == nil {
			restored = learnedReport{Source: "none", Why: learnedWhy}
			return
		}
		restored = restoreLearned(d, doc, source, log)
	})
	if err != nil {
		log.Error("start failed", "error", err)
		failStart("start failed: " + err.Error())
		return 1
	}
	d.life.setLearned(restored)
	d.restoredApps.WithLabelValues(restored.Source).Set(float64(restored.Apps))
	if handover != nil {
		// Both processes serve the farm until the parent has drained:
		// each counts the other's requests in flight as load
		// (control.Manager.SetPeerInflight).
		follow, stopFollow := make(chan struct{}), make(chan struct{})
		go func() { defer close(follow); handover.Follow(stopFollow, d.ctl.OwnInflight, peerInflight(d)) }()
		defer func() { close(stopFollow); <-follow }()
	}
	logs := &logwriter.Collector{}
	logs.Add("process", func() *logwriter.Writer { return logOut })
	d.reg.MustRegister(logs)
	if upg != nil {
		// Ready writes the PID file and tells the previous process, if
		// any, to stop accepting and drain.
		if err := upg.Ready(); err != nil {
			log.Error("start failed", "error", err)
			failStart("start failed: " + err.Error())
			d.shutdown(time.Second, true)
			return 1
		}
	} else if *pidfile != "" {
		if err := os.WriteFile(*pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			log.Error("start failed", "error", err)
			d.shutdown(time.Second, false)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	if upg != nil && upg.HasParent() {
		d.life.setParent(os.Getppid())
		log.Info("upgrade: this process has taken over the listeners; the previous one is draining")
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := upg.WaitForParent(ctx); err == nil {
				log.Info("upgrade: the previous process has exited")
			} else if !errors.Is(err, context.Canceled) {
				log.Warn("upgrade: waiting for the previous process", "error", err)
			}
		}()
	}
	// Listeners are up (and, after an upgrade, this is the main process).
	sdReady()
	b := thisBuild()
	log.Info("sentry started", "version", b.Version, "commit", b.Commit, "modified", b.Modified, "engine", d.proxy.EngineName(), "policy", snap.Source)

	var changed chan struct{}
	if *watch > 0 {
		changed = make(chan struct{}, 1)
		bg.Add(1)
		go func() { defer bg.Done(); watchPolicy(ctx, *config, *watch, &seen, changed) }()
		log.Info("watching the policy file", "file", *config, "every", *watch)
	}
	var exit <-chan struct{}
	if upg != nil {
		exit = upg.Exit()
	}
	upgraded := make(chan error, 1)
	upgrading := false
	var giver *learned.Giver // the learned state's handover during an upgrade
	defer func() {
		if giver != nil {
			giver.Close()
		}
	}()
	var checkpoint <-chan time.Time
	if *stateFile != "" {
		t := time.NewTicker(learned.SaveEvery)
		defer t.Stop()
		checkpoint = t.C
	}

	for {
		select {
		case s := <-sig:
			switch s {
			case syscall.SIGHUP:
				if *config == "" {
					log.Warn("SIGHUP ignored: no policy file (quick policy from flags)")
					continue
				}
				sdNotify("RELOADING=1")
				reloadPolicy(d, *config, &seen, false)
				sdNotify("READY=1")
			case syscall.SIGUSR1:
				// logrotate's postrotate: the access log's file again.
				if err := d.proxy.ReopenAccessLog(); err != nil {
					log.Error("SIGUSR1: reopening the access log failed; lines keep going to the old file", "error", err)
				} else {
					log.Info("SIGUSR1: access log reopened")
				}
			case syscall.SIGUSR2:
				switch {
				case upg == nil:
					log.Warn("SIGUSR2 ignored: upgrades are not supported on this platform")
				case upgrading:
					log.Warn("SIGUSR2 ignored: an upgrade is already in progress")
				default:
					upgrading = true
					d.life.upgradeStarted()
					exe := os.Args[0]
					log.Info("upgrade: starting a new process", "binary", exe)
					if g, err := offerLearned(upg, d); err != nil {
						log.Warn("upgrade: the learned state cannot be handed over; the new process will start without it", "error", err)
					} else {
						giver = g
					}
					bg.Add(1)
					go func() { defer bg.Done(); upgraded <- upg.Upgrade() }()
				}
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT:
				if upg != nil {
					upg.Stop() // no more upgrades; kills one in progress
				}
				timeout := d.proxy.Snapshot().Server.ShutdownTimeout
				sdNotify("STOPPING=1")
				log.Info("stopping: draining in-flight requests", "signal", s.String(), "timeout", timeout)
				saveState(d, *stateFile, log) // before the drain: the control stacks go with the proxy
				code := drain(d, log, sig, timeout, false)
				removePIDFile(*pidfile)
				log.Info("stopped")
				return code
			}
		case <-changed:
			reloadPolicy(d, *config, &seen, true)
		case <-checkpoint:
			saveState(d, *stateFile, log)
		case err := <-upgraded:
			upgrading = false
			if err != nil {
				why := err.Error()
				if giver != nil {
					if reason := giver.Failure(500 * time.Millisecond); reason != "" {
						why += ": " + reason
					}
					giver = nil
				}
				d.upgradeFailures.Inc()
				d.life.upgradeFailed(why)
				log.Error("upgrade failed; this process keeps serving", "error", why)
			} else {
				d.life.upgradeSucceeded()
			}
		case <-exit:
			d.life.upgradeSucceeded()
			timeout := d.proxy.Snapshot().Server.ShutdownTimeout
			log.Info("upgrade: the new process is ready; draining and exiting", "timeout", timeout)
			code := drain(d, log, sig, timeout, true)
			if giver != nil {
				giver.Close() // the last report: nothing in flight
				giver = nil
			}
			log.Info("exited after upgrade")
			return code
		}
	}
}

// saveState writes what d has learned to path ("" does nothing),
// atomically; an error is logged and counted, never fatal.
func saveState(d *daemon, path string, log hclog.Logger) {
	if path == "" {
		return
	}
	start := time.Now()
	doc := takeLearned(d)
	if err := learned.WriteFile(path, doc); err != nil {
		d.stateSaves.WithLabelValues("error").Inc()
		log.Error("writing the state file failed", "file", path, "error", err)
		return
	}
	d.stateSaves.WithLabelValues("success").Inc()
	log.Debug("state file written", "file", path, "apps", len(doc.Apps), "took", time.Since(start))
}

// drain runs d.shutdown. A SIGTERM, SIGINT or SIGQUIT cuts a stop short; after an
// upgrade, when a stop of the whole service (systemd's default KillMode
// signals every process) may reach the draining process too, it takes two.
func drain(d *daemon, log hclog.Logger, sig <-chan os.Signal, timeout time.Duration, handover bool) int {
	done := make(chan struct{})
	go func() { defer close(done); d.shutdown(timeout, handover) }()
	force := 1
	if handover {
		force = 2
	}
	for {
		select {
		case <-done:
			return 0
		case s := <-sig:
			if s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGQUIT {
				if force--; force == 0 {
					log.Warn("exiting without finishing the drain", "signal", s.String())
					return 1
				}
			}
			log.Warn("already draining; signal ignored", "signal", s.String())
		}
	}
}

// upgraderListen opens listeners through the upgrader, so that an upgrade
// hands them to the next process. A socket inherited from the previous
// process that no longer listens (that process stopped it when a reload
// removed its address) is replaced by a fresh one.
func upgraderListen(upg *tableflip.Upgrader, log hclog.Logger) listenFunc {
	return func(network, addr string) (net.Listener, error) {
		ln, err := upg.Listen(network, addr)
		if err != nil || isListening(ln) {
			return ln, err
		}
		ln.Close()
		log.Debug("inherited socket no longer listens; opening a new one", "addr", addr)
		fresh, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		tl, ok := fresh.(tableflip.Listener)
		if !ok {
			fresh.Close()
			return nil, fmt.Errorf("listen %s: %T cannot be handed over", addr, fresh)
		}
		if err := upg.AddListener(network, addr, tl); err != nil {
			fresh.Close()
			return nil, err
		}
		return fresh, nil
	}
}

// hashBox holds the hash of the policy file content last read.
type hashBox struct {
	mu sync.Mutex
	h  [32]byte
}

func (b *hashBox) get() [32]byte  { b.mu.Lock(); defer b.mu.Unlock(); return b.h }
func (b *hashBox) set(h [32]byte) { b.mu.Lock(); b.h = h; b.mu.Unlock() }

// reloadPolicy reads, parses and validates the policy file in full, then
// applies it. A policy that fails is logged with FILE:LINE errors and
// counted; the old one stays in force. With onlyIfChanged, content equal
// to what was last read is not reloaded (the watcher's case).
func reloadPolicy(d *daemon, path string, seen *hashBox, onlyIfChanged bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		d.mu.Lock()
		d.lastReload.SetToCurrentTime()
		d.reloadFailed(err)
		d.mu.Unlock()
		return
	}
	h := sha256.Sum256(data)
	if onlyIfChanged && h == seen.get() {
		return
	}
	seen.set(h)
	next, err := policy.Parse(path, data)
	if err != nil {
		d.mu.Lock()
		d.lastReload.SetToCurrentTime()
		d.reloadFailed(err)
		d.mu.Unlock()
		return
	}
	if err := d.reload(next); err == nil {
		d.log.Info("policy reloaded", "source", next.Source, "apps", len(next.Apps), "listeners", len(next.Listeners))
	}
}

// watchPolicy polls path every interval and signals changed when its
// content differs from what was last read. Editors that write in place can
// expose a half-written file: that reload fails and the next poll, seeing
// the finished content, reloads again. Writing the file atomically (write
// a temporary file, then rename) avoids the spurious error.
func watchPolicy(ctx context.Context, path string, every time.Duration, seen *hashBox, changed chan<- struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			continue // a rename in progress; SIGHUP reports read errors
		}
		if sha256.Sum256(data) != seen.get() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}

// removePIDFile removes the PID file on a stop, if it still names us (after
// an upgrade it names the new process).
func removePIDFile(path string) {
	if path == "" {
		return
	}
	if b, err := os.ReadFile(path); err == nil && string(bytes.TrimSpace(b)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(path)
	}
}
