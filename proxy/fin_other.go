//go:build !linux

package proxy

// The FIN watch (fin_linux.go) needs epoll: elsewhere a client's FIN
// while its request is relayed is seen only when its connection is next
// read.
func (c *drainConn) watchFIN()   { c.fin.tried.Store(true) }
func (c *drainConn) unwatchFIN() {}
