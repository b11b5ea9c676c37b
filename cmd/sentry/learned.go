package main

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/learned"
)

// Learned state across processes (package learned): what a binary
// upgrade hands to the new process, and the state file.

// takeLearned is everything d has learned, now: per app of the policy in
// force, the admission stack's state and the backends' health.
func takeLearned(d *daemon) *learned.Document {
	now := time.Now()
	b := thisBuild()
	doc := learned.New(now, learned.Origin{PID: os.Getpid(), Version: b.Version, Commit: b.Commit})
	adm := d.ctl.Export(now)
	health := d.proxy.BackendHealth()
	for _, ac := range d.proxy.Snapshot().Apps {
		st, ok := adm[ac.Name]
		if !ok {
			continue
		}
		doc.Apps = append(doc.Apps, learned.App{Name: ac.Name, Admission: st, Backends: health[ac.Name]})
	}
	return doc
}

// restoreLearned gives d, before it serves, what doc says was learned:
// every app of doc that the policy has. Each item left out is logged
// with why (package learned: never fatal).
func restoreLearned(d *daemon, doc *learned.Document, source string, log hclog.Logger) learnedReport {
	rep := learnedReport{Source: source}
	now := time.Now()
	log = log.Named("learned")
	have := map[string]bool{}
	for _, ac := range d.proxy.Snapshot().Apps {
		have[ac.Name] = true
	}
	for _, a := range doc.Apps {
		if !have[a.Name] {
			log.Warn("learned state ignored: the app is not in the policy", "app", a.Name, "source", source)
			rep.Ignored++
			continue
		}
		ignored, err := d.ctl.Restore(a.Name, a.Admission, now)
		if err != nil {
			ignored = append(ignored, err.Error())
		}
		applied, ign, _ := d.proxy.RestoreBackendHealth(a.Name, a.Backends)
		ignored = append(ignored, ign...)
		for _, why := range ignored {
			log.Warn("learned state ignored", "app", a.Name, "item", why, "source", source)
		}
		rep.Apps++
		rep.Ignored += len(ignored)
		keys := 0
		for _, c := range a.Admission.Estimator.Classes {
			keys += len(c.Keys)
		}
		log.Info("learned state restored", "app", a.Name, "source", source, "keys", keys,
			"parallelism", a.Admission.Parallelism, "backends", applied, "ignored", len(ignored))
	}
	return rep
}

// offerLearned prepares the handover of the learned state to the process
// an upgrade is about to start: a Unix socket pair whose one end goes to
// the new process as an inherited file (learned.HandoverFile), and whose
// other end the returned Giver serves.
func offerLearned(upg *tableflip.Upgrader, d *daemon) (*learned.Giver, error) {
	syscall.ForkLock.RLock() // no exec between the socketpair and close-on-exec
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "learned-state"), os.NewFile(uintptr(fds[1]), "learned-state-child")
	defer ours.Close()
	defer theirs.Close() // AddFile keeps a copy for the new process
	conn, err := net.FileConn(ours)
	if err != nil {
		return nil, err
	}
	if err := upg.AddFile(learned.HandoverFile, theirs); err != nil {
		conn.Close()
		return nil, err
	}
	return learned.NewGiver(conn, func() *learned.Document { return takeLearned(d) }, d.ctl.OwnInflight, peerInflight(d), 0), nil
}

// peerInflight applies the upgrade peer's in-flight reports (nil: none).
func peerInflight(d *daemon) func(map[string]int64) {
	return func(m map[string]int64) {
		for _, ac := range d.proxy.Snapshot().Apps {
			d.ctl.SetPeerInflight(ac.Name, m[ac.Name])
		}
	}
}

// askLearned is the new process's side: the state its parent offers, if
// it offers one. t is nil when there is no handover to follow.
func askLearned(upg *tableflip.Upgrader) (t *learned.Taker, doc *learned.Document, why string) {
	f, err := upg.File(learned.HandoverFile)
	switch {
	case err != nil:
		return nil, nil, "the handover file: " + err.Error()
	case f == nil:
		return nil, nil, "the previous process offered no learned state (a sentry without the handover)"
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, nil, "the handover socket: " + err.Error()
	}
	t, doc, err = learned.Request(conn, learned.RequestTimeout)
	if err != nil {
		return t, nil, err.Error()
	}
	return t, doc, ""
}
