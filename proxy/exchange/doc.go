// Package exchange is sentry's exchange core: one request and its
// response, from the decision to the access record, without I/O. A
// driver (the event loops, package proxy/evloop) feeds it events and
// carries out the actions it returns.
package exchange
