package main

import (
	"net"
	"os"
	"strconv"
)

// sdNotify sends state to systemd's notification socket (sd_notify(3)):
// "READY=1" once the listeners are up, "RELOADING=1"/"READY=1" around a
// reload, "STOPPING=1" when draining starts. Without NOTIFY_SOCKET (not
// started by systemd with Type=notify) it does nothing. Errors are
// ignored: a missed notification must never stop the proxy. The unit
// sets NotifyAccess=all, so a process started by an upgrade can tell
// systemd it is the main process now (MAINPID, sent with READY=1).
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

// sdReady tells systemd this process is up and is the service's main
// process.
func sdReady() { sdNotify("READY=1\nMAINPID=" + strconv.Itoa(os.Getpid())) }
