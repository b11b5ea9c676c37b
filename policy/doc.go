// Package policy reads sentry's policy file: the YAML schema, strict
// decoding, defaults, validation and the immutable Snapshot the rest of
// sentry reads.
//
// # Pipeline
//
// Parse turns bytes into a *Snapshot in four steps, and either returns a
// complete, valid snapshot or none at all:
//
//  1. yaml.v3 parses the bytes into a yaml.Node tree (one document only).
//     A syntax error is reported as one Error at the line yaml gives.
//  2. The decoder walks the tree section by section, starting from a
//     snapshot filled with every default (defaultSnapshot, defaultApp), and
//     overwrites what the file sets. Each section is a table of keys (see
//     "One table per section"); an unknown key, a duplicate key, a missing
//     required key, a value of the wrong kind, a bad duration, address or
//     enum, or a value out of range is reported with its line and column,
//     and decoding goes on. Starting from the defaults, rather
//     than filling zeros afterwards, lets an explicit 0 mean 0
//     (write_timeout: 0 is "no timeout", failures: 0 is "passive checks
//     off"). Values that a library will run are checked against what the
//     library accepts, field by field so each error has its line: class
//     rules (classify), the estimator settings (estimator), the admission
//     modes (batchac, thresholdac, the admission mode switch). Each app's
//     classes then go through classify.Compile and its estimator settings
//     through estimator.New, as a backstop, so that whatever the field
//     checks miss still fails the policy and not the reload that applies
//     it.
//  3. finish checks what spans sections and apps — unique app names, one
//     default listen address, one default app and unique hosts per address,
//     identical TLS per address, no wildcard/specific address overlap, the
//     admin address free — and derives Snapshot.Listeners.
//  4. If anything was reported, Parse returns Errors, sorted by line, and
//     no snapshot. An Error carries its file, line, column, message and,
//     for a misspelt key or enum value, the word it most likely meant
//     (Suggest), which `sentry check -format json` reports apart.
//
// Every problem in a file is reported in one pass. A section that failed is
// marked in a side table (meta), so that cross-checks skip it instead of
// piling follow-on errors onto the real one: a misspelt key, a bad duration
// and a bad address give exactly three errors.
//
// # Why a node walker, not Decoder.KnownFields
//
// The design notes suggest decoding into structs with yaml.v3's
// Decoder.KnownFields(true). That catches unknown keys, but its messages
// speak Go ("cannot unmarshal !!int `250` into time.Duration", "field helth
// not found in type policy.appFile"), and once a value has decoded its line
// is gone, so a bad address, a port of 80800 or a duplicate host found by
// validation could not be placed. Walking the yaml.Node tree keeps the line
// and column of every key and value, lets each message say what to write
// instead (use a unit, e.g. 250ms; did you mean "health"?), and handles
// unions such as listen (a string or a list) without custom unmarshalers.
// YAML anchors, aliases and merge keys (<<) are supported; the walk is
// bounded (nodeBudget) so a hostile file cannot expand exponentially.
//
// # One table per section
//
// Each section of the policy is one key table, a []field built by a
// method such as rejectFields bound to the section's value. A row is one
// key and says three things: how its value is read (set, which checks it
// and reports at the value's line and column), how the value in force is
// written back (get), and what it accepts (kind: a duration of at least
// 1ms, an integer in a range, one of some names, a list, a section of its
// own, and whether it is required). Three readers walk the same rows:
//
//   - the decoder (mapping): unknown keys, the did-you-mean hint, missing
//     required keys and each value;
//   - Dump (`sentry check -dump`, the admin /config): the policy in force
//     as a policy file, in the policy's own keys and value forms, every
//     default filled in, so that it can be read back (dump.go);
//   - Schema (`sentry schema`, docs/policy.schema.json): the JSON Schema
//     editors and CI use, with each key's type, range, enum and default
//     (jsonschema.go).
//
// Decision: one source of truth, the decoder's own tables, and no second
// list of names. A dump walked from the snapshot's Go fields speaks Go
// (RequestBufferingOff, GRPCStatus 14), and a schema written by hand
// drifts from the keys the decoder reads; either is wrong the day a key is
// added. A rule that ties keys together (static or dns, err_i below err_d)
// stays code after the table's mapping, in the section's decode method,
// where it can name both lines; the schema does not say it, and the docs
// do. Tests hold the three together without reading the tables: the
// every-key policy (the dump of testdata/every-key.yaml, which turns each
// optional section on) sets every key of the tables and of
// docs/policy.md, and round-trips byte for byte and to the same snapshot;
// every example round-trips; and the schema is checked against Parse key
// by key with an independent JSON Schema validator: the same keys, every
// value the decoder accepts accepted, no type error the schema lets
// through, the same required keys.
//
// # Adding a section
//
// A section is a struct in snapshot.go (with its defaults in defaultApp or
// defaultSnapshot), its key table (xxxFields), and, when some of its keys
// are checked together, a decode method that runs d.mapping on the table
// and then those checks; one row of its parent's table hooks it in (see
// appFields). A key of a common kind is one row made by a helper
// (durationField, intField, enumField, textField, section, optional ...);
// a key with its own form writes its set, get and kind out. Run
// `go run ./cmd/sentry schema > docs/policy.schema.json` and document the
// key in docs/policy.md: the tests say what is missing. Rules that tie two
// sections of an app together go at the end of (*decoder).app.
// Defaults taken from a library are written out in full (see tuning.go),
// so that a snapshot shows the values in use rather than zeros. A value
// whose zero a library reads as "use the default" is refused as 0 in the
// file (estimator.alpha: 0 is an error, not 1), so that what is written is
// what runs.
//
// # The one input besides the file
//
// partition.index_from_hostname reads the host name (os.Hostname) while
// the policy is decoded, so that one file serves every replica of a
// StatefulSet (sentry-2 → index 2) and an unusable name is a FILE:LINE
// error like any other, on load and on every reload. Decision: the host
// name, not an environment variable, because it is what a StatefulSet pod
// always has; provisioning.go holds both sections, and the tests inject the
// name (parseWith).
//
// # Hostile files
//
// A policy file may be huge or written to hurt. Messages never echo a long
// value: every quoted value longer than 64 bytes is cut to 64 bytes
// followed by …(N bytes), whoever built the message (clipValues, applied
// to every error once). The whole-policy checks are linear in the number
// of apps: names, hosts and addresses are looked up in maps, and the
// overlap check compares an address only with the wildcards of its port
// (overlapping; TestOverlapCheckLinear counts its comparisons).
//
// # Snapshots
//
// A Snapshot is never modified after Parse, Load or FromFlags returns it.
// The proxy keeps the current one in an atomic.Pointer[Snapshot]; a reload
// parses the new file completely and swaps the pointer only on success, so
// a bad file leaves the running policy untouched. State learned at run time
// (estimates, backend health) is keyed by stable names (app name, backend
// address), not by snapshot pointers, so it survives a reload.
//
// Usage:
//
//	snap, err := policy.Load("/etc/sentry/policy.yaml")
//	if err != nil {
//		// err is a policy.Errors: one "FILE:LINE:COLUMN: message" per line.
//		log.Fatal(err)
//	}
//	current.Store(snap)
//
// The file format is documented key by key in docs/policy.md; annotated
// examples are in deploy/examples.
package policy
