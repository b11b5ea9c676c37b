// Package conformance runs suites nobody here wrote against the real
// sentry binary.
package conformance
