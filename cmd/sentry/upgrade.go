package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

// cmdUpgrade is `sentry upgrade`: a binary upgrade that waits for its
// outcome, as `sentry reload` does for a policy. It sends SIGUSR2 to the
// running sentry and waits for the new process to be ready: the PID file
// naming a new, live process (written once it serves), or the new
// process answering on the admin port with the old one as its parent. A
// failure -- the new binary or the policy on disk refused, the new
// process killed after -upgrade-timeout -- is read from the old
// process's /last-upgrade, with the new process's own reason when it
// gave one. Exit 0: the new process is ready; 1: it failed, or the
// policy is invalid (nothing is signalled), or no outcome came within
// -timeout; 2: usage.
//
// The policy (to validate it first, and to find the admin port) is
// -config, or else the file the running process was started with, read
// from its command line (/proc/PID/cmdline and cwd), or its quick
// policy's -admin. Without an admin listener only a success can be seen
// (in the PID file); a failure then shows as the timeout.
func cmdUpgrade(args []string) int {
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	pidfile := fs.String("pidfile", "", "`FILE` holding the running sentry's PID")
	pid := fs.Int("pid", 0, "the running sentry's `PID` (instead of -pidfile)")
	config := fs.String("config", "", "policy `FILE` the new process will load (default: the running process's -config)")
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the new process (more than the running sentry's -upgrade-timeout)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || (*pidfile == "") == (*pid == 0) {
		fmt.Fprintln(os.Stderr, "usage: sentry upgrade (-pidfile FILE | -pid PID) [-config FILE] [-timeout D]")
		return 2
	}
	old := *pid
	if *pidfile != "" {
		var err error
		if old, err = readPID(*pidfile); err != nil {
			fmt.Fprintf(os.Stderr, "sentry upgrade: reading %s: %v\n", *pidfile, err)
			return 1
		}
	}
	if !processAlive(old) {
		fmt.Fprintf(os.Stderr, "sentry upgrade: no process %d\n", old)
		return 1
	}
	admin, cfg, note := runningAdmin(old, *config)
	if cfg != "" {
		if _, err := policy.Load(cfg); err != nil {
			printPolicyErrors(os.Stderr, err)
			fmt.Fprintf(os.Stderr, "sentry upgrade: %s is invalid: the new process would refuse it; nothing was signalled\n", cfg)
			return 1
		}
	}
	if admin == "" {
		fmt.Fprintf(os.Stderr, "sentry upgrade: %s; only a success can be confirmed (in the PID file)\n", note)
	}
	var before upgradeReport
	beforeErr := errors.New("no admin listener")
	if admin != "" {
		beforeErr = getJSON("http://"+admin+"/last-upgrade", &before)
	}
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		fmt.Fprintf(os.Stderr, "sentry upgrade: signalling PID %d: %v\n", old, err)
		return 1
	}
	ready := func(nw int) int {
		msg := fmt.Sprintf("sentry upgrade: PID %d replaced PID %d and is ready", nw, old)
		// What the new process restored, from its own /last-upgrade.
		for i := 0; admin != "" && i < 20; i++ {
			var now upgradeReport
			if getJSON("http://"+admin+"/last-upgrade", &now) == nil && now.PID == nw {
				l := now.Learned
				msg += fmt.Sprintf("; learned state: %s", l.Source)
				if l.Source != "none" {
					msg += fmt.Sprintf(" (%d apps, %d items left out)", l.Apps, l.Ignored)
				} else if l.Why != "" {
					msg += " (" + l.Why + ")"
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Println(msg)
		return 0
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if *pidfile != "" {
			if p, err := readPID(*pidfile); err == nil && p != old && processAlive(p) {
				return ready(p)
			}
		}
		if admin != "" && beforeErr == nil {
			var now upgradeReport
			if getJSON("http://"+admin+"/last-upgrade", &now) == nil {
				switch {
				case now.PID != old && now.Parent == old && processAlive(now.PID):
					return ready(now.PID)
				case now.PID == old && now.Seq > before.Seq && now.State == "failed":
					fmt.Fprintf(os.Stderr, "sentry upgrade: the new process failed; PID %d keeps serving: %s\n", old, now.Error)
					return 1
				}
			}
		}
		if !processAlive(old) {
			if *pidfile != "" {
				if p, err := readPID(*pidfile); err == nil && p != old && processAlive(p) {
					return ready(p)
				}
			}
			fmt.Fprintf(os.Stderr, "sentry upgrade: PID %d exited and no new process took over\n", old)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "sentry upgrade: no new process ready within %v (PID %d's log says why)\n", *timeout, old)
	return 1
}

// readPID reads a PID file.
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err == nil && n <= 0 {
		err = fmt.Errorf("bad PID %d", n)
	}
	return n, err
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	i := bytes.LastIndexByte(b, ')') // pid (comm) STATE ...
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// runningAdmin finds the running sentry's admin address: from the policy
// file config, or else from the command line the process was started
// with. cfg is the policy file found ("" for a quick policy); note says
// why there is no admin address.
func runningAdmin(pid int, config string) (admin, cfg, note string) {
	if config == "" {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return "", "", "the running process's command line is not readable (pass -config)"
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		flags := runFlags(args)
		config = flags["config"]
		if config == "" {
			switch a := flags["admin"]; {
			case flags["backend"] == "":
				return "", "", "the running process's policy was not found (pass -config)"
			case a == "off":
				return "", "", "the running process has no admin listener"
			case a == "":
				return "127.0.0.1:9901", "", ""
			default:
				return a, "", ""
			}
		}
		if !filepath.IsAbs(config) {
			if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
				config = filepath.Join(cwd, config)
			}
		}
	}
	snap, err := policy.Load(config)
	if err != nil || snap.Admin.Listen == "" {
		return "", config, "the policy has no admin listener"
	}
	return snap.Admin.Listen, config, ""
}

// runFlags picks -config, -admin and -backend out of a `sentry run`
// command line (the forms the flag package takes: -f v, -f=v, --f).
func runFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "config", "admin", "backend":
			if !hasVal && i+1 < len(args) {
				i++
				val = args[i]
			}
			out[name] = val
		}
	}
	return out
}
