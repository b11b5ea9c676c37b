package policy

import (
	"bytes"
	"fmt"
	"strings"

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
	return dump(s, nil)
}

// DumpExtension is Dump followed by one more top-level key, key, holding
// v as yaml.v3 encodes it, with comment (lines without their "# ") above
// it. key must be an extension key ("x-" and more), which the decoder
// reads and ignores (topFields' "x-*"), so the document is still a valid
// policy and its policy part is Dump's to the byte: checked again, it
// dumps to Dump(s). The admin listener's /config writes the runtime
// overrides in force this way (package adminapi).
func DumpExtension(s *Snapshot, key, comment string, v any) ([]byte, error) {
	if !strings.HasPrefix(key, "x-") || len(key) < 3 {
		return nil, fmt.Errorf("policy: extension key %q does not begin with x-", key)
	}
	var val yaml.Node
	if err := val.Encode(v); err != nil {
		return nil, err
	}
	k := strNode(key)
	k.HeadComment = comment
	return dump(s, []*yaml.Node{k, &val})
}

func dump(s *Snapshot, extra []*yaml.Node) ([]byte, error) {
	d := newDecoder("", "", 0)
	root := emit(d.topFields(s, &meta{}))
	root.Content = append(root.Content, extra...)
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
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
