package classify

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strings"
)

// gRPC conditions (Rule.GRPCService, Rule.GRPCMethod) read the request
// path as gRPC names it: "/" Service "/" Method, where Service is the
// fully qualified service name ("pkg.Service", "helloworld.Greeter",
// or a bare "Greeter" without a package) and Method the bare method name
// ("SayHello").

// SplitGRPCPath splits a path of the form "/Service/Method" (the query,
// if any, already cut) into its service and method. ok is false unless
// the path starts with '/' and holds exactly one more '/', with a
// non-empty name on each side: "/a.B/C" splits, "/a.B/", "//C",
// "/a.B/C/" and "/a/b/C" do not. The results alias p.
func SplitGRPCPath(p []byte) (service, method []byte, ok bool) {
	if len(p) < 4 || p[0] != '/' {
		return nil, nil, false
	}
	rest := p[1:]
	i := bytes.IndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 || bytes.IndexByte(rest[i+1:], '/') >= 0 {
		return nil, nil, false
	}
	return rest[:i], rest[i+1:], true
}

// CheckGRPCPattern checks a grpc_service or grpc_method value: a name
// compared exactly, or a path.Match pattern (`*`, `?`, `[...]`, `\`) when
// it has one of those characters. It must not be empty, hold '/' (the
// path's separator: a service is matched whole, dots and all, and '*'
// spans dots) nor a space or control character.
func CheckGRPCPattern(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("%q has a space or control character", s)
		}
	}
	if strings.IndexByte(s, '/') >= 0 {
		return fmt.Errorf("%q has a '/'; give the service (pkg.Service) and the method apart, without slashes", s)
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Errorf("%q: syntax error in pattern (see Go's path.Match)", s)
	}
	return nil
}

// grpcPattern compiles a checked grpc_service or grpc_method value.
func grpcPattern(s string) (globSeg, error) {
	if err := CheckGRPCPattern(s); err != nil {
		return globSeg{}, err
	}
	return globSeg{pat: s, literal: !strings.ContainsAny(s, `*?[\`)}, nil
}
