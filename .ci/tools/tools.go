//go:build tools

// Package tools pins the suites' tools (see go.mod).
package tools

import _ "github.com/summerwind/h2spec/cmd/h2spec"
