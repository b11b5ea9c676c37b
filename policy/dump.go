package policy

import (
	"encoding"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

// Dump writes the snapshot in force as YAML, for an operator to read what
// sentry runs with after defaults and normalisation (`sentry check -dump`,
// the admin listener's /config; nginx -T and Envoy's /config_dump answer
// the same need).
//
// Decision: it is the snapshot itself, walked by reflection, not the
// policy file's schema written back: every field a request is served with
// appears, including the defaults the file left out and what validation
// derived (listeners, partitions from the host name), under the field's
// Go name in snake_case -- which is the policy key for nearly every field
// (read_header_timeout, max_conns_per_backend, ...); where the two differ
// (log.access's mapping is access_log, request_buffering: off is
// request_buffering_off) the docs' table for the section says what the
// key sets. Durations are written as "250ms", addresses and prefixes as
// text. It is for reading, not meant to be fed back as a policy. What
// could hold a credential is masked: a URL's password and query.
// Fields dropped: Hash (the source's digest, a change detector) and
// App.Index (the app's position); a listener names its apps rather than
// repeating them.
func Dump(s *Snapshot) ([]byte, error) {
	n := dumpValue(reflect.ValueOf(s), "")
	return yaml.Marshal(n)
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	textType     = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	stringerType = reflect.TypeOf((*fmt.Stringer)(nil)).Elem()
)

// dumpValue turns v into a yaml.Node. field is v's Go field name ("" at
// the top, in lists and maps), for the redaction of URLs.
func dumpValue(v reflect.Value, field string) *yaml.Node {
	scalar := func(s, tag string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: tag} }
	null := scalar("null", "!!null")
	if !v.IsValid() {
		return null
	}
	if v.Type() == durationType {
		return scalar(time.Duration(v.Int()).String(), "!!str")
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return null
		}
		if a, ok := v.Interface().(*App); ok && field == "listener" {
			return scalar(a.Name, "!!str") // a listener names its apps; they are dumped once, under apps
		}
		return dumpValue(v.Elem(), field)
	}
	if v.Type().Implements(textType) && v.Kind() != reflect.Struct || v.Kind() == reflect.Struct && v.Type().Implements(textType) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err == nil {
			return scalar(string(b), "!!str")
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		return scalar(fmt.Sprint(v.Bool()), "!!bool")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar(fmt.Sprint(v.Int()), "!!int")
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar(fmt.Sprint(v.Uint()), "!!int")
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		switch {
		case math.IsInf(f, 1):
			return scalar(".inf", "!!float")
		case math.IsInf(f, -1):
			return scalar("-.inf", "!!float")
		case math.IsNaN(f):
			return scalar(".nan", "!!float")
		}
		t := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(t, ".") {
			t += ".0" // so that it reads back as a float, without a tag
		}
		return scalar(t, "!!float")
	case reflect.String:
		s := v.String()
		if field == "URL" {
			s = redactURL(s)
		}
		return scalar(s, "!!str")
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return null // not [] : for some fields (admin.allowed_hosts) nil and empty differ
		}
		n := &yaml.Node{Kind: yaml.SequenceNode}
		elem := ""
		if field == "listener" {
			elem = field // a listener's apps, by name
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, dumpValue(v.Index(i), elem))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			n.Content = append(n.Content, scalar(fmt.Sprint(k), "!!str"), dumpValue(v.MapIndex(k), ""))
		}
		return n
	case reflect.Struct:
		t := v.Type()
		n := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() || f.Name == "Hash" || t == reflect.TypeOf(App{}) && f.Name == "Index" {
				continue
			}
			switch f.Type.Kind() {
			case reflect.Func, reflect.Chan, reflect.UnsafePointer:
				continue
			}
			name := f.Name
			if t == reflect.TypeOf(Listener{}) && (name == "Apps" || name == "Default") {
				name = "listener"
			}
			n.Content = append(n.Content, scalar(snake(f.Name), "!!str"), dumpValue(v.Field(i), name))
		}
		if len(n.Content) == 0 && v.Type().Implements(stringerType) {
			return scalar(v.Interface().(fmt.Stringer).String(), "!!str")
		}
		return n
	}
	if v.Type().Implements(stringerType) {
		return scalar(v.Interface().(fmt.Stringer).String(), "!!str")
	}
	return scalar(fmt.Sprint(v.Interface()), "!!str")
}

// redactURL masks a URL's password and query, which may carry a token.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL, not shown)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "xxxxx"
	}
	return u.Redacted()
}

// snake turns a Go field name into snake_case: ReadHeaderTimeout →
// read_header_timeout, TLS → tls, RequestIDHeader → request_id_header.
func snake(name string) string {
	var b strings.Builder
	r := []rune(name)
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
