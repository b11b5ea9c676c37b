package scenario

import "syscall"

// sysProcAttr puts a peer in its own process group (so stop can kill its
// children too) and kills it if the runner dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process group a peer leads (only ever one the
// runner started, by its id).
func killGroup(pid int) {
	if pid > 1 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
