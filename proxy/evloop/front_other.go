//go:build !linux

package evloop

import "context"

// Front is a front end of event loops, which exist on Linux only;
// elsewhere package proxy never starts one and fasthttp serves every
// connection.
type Front struct{}

// Shutdown does nothing: there are no loops.
func (ff *Front) Shutdown(context.Context) {}

// Counts is zero: there are no loops.
func (ff *Front) Counts() (served, handed uint64) { return 0, 0 }

// Conns is zero: there are no loops.
func (ff *Front) Conns() int64 { return 0 }

// IllegalTransitions is zero: there are no loops.
func (ff *Front) IllegalTransitions() uint64 { return 0 }
