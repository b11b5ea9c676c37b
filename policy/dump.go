package policy

import (
	"bytes"

	"gopkg.in/yaml.v3"
)

// dumpHeader opens every dump. It says what the document is, so that an
// operator who finds one in a ticket or a backup knows what it holds.
const dumpHeader = `# The policy as sentry runs it, with every default filled in: a valid
# policy file, in the policy's own keys (docs/policy.md). Relative file
# names are written absolute; a webhook URL's password and query are
# masked (xxxxx).
`

// Dump writes the snapshot in force as a policy file (YAML), for an
// operator to read what sentry runs with after defaults and normalisation
// (`sentry check -dump`, the admin listener's /config; nginx -T and
// `caddy adapt` answer the same need). Fed back to Parse, it gives a
// snapshot that dumps to the same bytes.
//
// Decision: the dump is written by the decoder's own key tables (each
// field's get, keys.go), so it speaks the policy's vocabulary and cannot
// name a key the decoder does not read. Every key that has a value is
// written, defaults included; an optional section that is off (tls,
// health.active, a webhook, a partition, a class's terminate) and an
// optional value left empty are left out, as writing them would turn them
// on. What Parse derives and no key sets is not written: the listeners
// (they follow from the apps' listen addresses), the estimator's refresh
// interval, the source's hash. Values are written in the policy's own
// forms: durations as "250ms", sizes as "1MiB", enums by name
// (request_buffering: off, grpc_status: unavailable), log.access as its
// mapping. partition.index_from_hostname is kept as written, so that one
// dump serves every replica, with the index in force in a comment.
func Dump(s *Snapshot) ([]byte, error) {
	d := newDecoder("", "", 0)
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{emit(d.topFields(s, &meta{}))}}
	var b bytes.Buffer
	b.WriteString(dumpHeader)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
