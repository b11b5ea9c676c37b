// Package evloop holds what sentry's event loops are made of, apart from
// HTTP: the state machine of an exchange (State, its transitions and
// String) and the loop's interface to the kernel (Sys, with RawSys the
// real one) and to time (Clock). It imports nothing of sentry, so it
// cannot depend on the request path; package proxy imports it.
//
// # Design
//
// A loop is one goroutine around its own epoll set. It owns every
// connection it accepted and every backend connection it dialled, and
// never blocks: each socket is non-blocking, and RawSys makes its reads
// and writes as raw system calls (the Go scheduler is not told), polls
// epoll without blocking first and blocks in epoll_wait only when nothing
// is ready. Where an exchange on a client connection is, is one State:
//
//	idle ──serve──> admitting ──park──> parked
//	 ^                │    ^                 │
//	 │                │    └─────resume──────┤
//	 │                │ bind                 │ client gone (abort)
//	 │                v                      v
//	 │         connecting ⇄ sending         idle
//	 │           (connected; retry: bind again, another backend)
//	 │                         │ response head
//	 │                         v
//	 │                      relaying
//	 │                         │
//	 └── respond (reject, 502, 504), abort, finish ── from any busy state
//
// The loop changes a State only through one function that asks Legal.
// Decision: an illegal transition is a bug; under test it panics, so the
// bug is found where it happens; in production it is counted
// (sentry_evloop_illegal_transitions_total) and the new state taken, so
// that one wrong exchange does not take down the loop and every
// connection on it.
//
// # Locks
//
// None here. A loop's state is its goroutine's alone; the one thing other
// goroutines touch is its eventfd (a batch run's wake-up), guarded in
// package proxy by the loop's efdMu, which is never held while the loop
// takes another lock.
//
// # Usage
//
// Package proxy's loop (proxy/evloop_*_linux.go) holds a Sys and a Clock
// (RawSys{} and time.Now in production) and an evloop.State per client
// connection. Its tests replace Sys and Clock with scripted ones and drive
// the exchange logic through the scripts in proxy/testdata/evloop
// (TestEvloopScripts), printing each syscall and each State transition.
//
// What is not here yet: the exchange logic itself (accept, read, the
// pipeline's calls, relay, timers) is still in package proxy; moving it
// needs the small interface through which the loop calls the pipeline.
package evloop
