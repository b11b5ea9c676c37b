package classify

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSplitGRPCPath(t *testing.T) {
	for _, c := range []struct {
		p, svc, meth string
		ok           bool
	}{
		{"/helloworld.Greeter/SayHello", "helloworld.Greeter", "SayHello", true},
		{"/Greeter/SayHello", "Greeter", "SayHello", true},
		{"/a/b", "a", "b", true},
		{"/a.B/", "", "", false},
		{"//C", "", "", false},
		{"/a.B/C/", "", "", false},
		{"/a/b/C", "", "", false},
		{"a.B/C", "", "", false},
		{"/", "", "", false},
		{"", "", "", false},
		{"/a.B", "", "", false},
	} {
		svc, meth, ok := SplitGRPCPath([]byte(c.p))
		if ok != c.ok || string(svc) != c.svc || string(meth) != c.meth {
			t.Errorf("SplitGRPCPath(%q) = %q, %q, %v; want %q, %q, %v", c.p, svc, meth, ok, c.svc, c.meth, c.ok)
		}
	}
}

// FuzzSplitGRPCPath: a split puts the path back together exactly, with two
// non-empty names free of '/'; a refusal means no such split exists.
func FuzzSplitGRPCPath(f *testing.F) {
	for _, s := range []string{"/pkg.Svc/M", "/a/b/c", "//", "/x/", "", "/\xff/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		svc, meth, ok := SplitGRPCPath([]byte(p))
		parts := strings.Split(p, "/")
		possible := len(parts) == 3 && parts[0] == "" && parts[1] != "" && parts[2] != ""
		if ok != possible {
			t.Fatalf("SplitGRPCPath(%q) ok=%v, want %v", p, ok, possible)
		}
		if ok && "/"+string(svc)+"/"+string(meth) != p {
			t.Fatalf("SplitGRPCPath(%q) = %q, %q: does not rebuild the path", p, svc, meth)
		}
	})
}

// TestGRPCConditions: grpc_service is the full "pkg.Service", grpc_method
// the bare method; exact or path.Match pattern ('*' spans dots but never
// '/'); both must hold in one rule; a path not of gRPC's form matches
// neither; the default key is the path.
func TestGRPCConditions(t *testing.T) {
	c, err := Compile([]ClassConfig{
		{Name: "write", Rules: []Rule{{GRPCService: "shop.Cart", GRPCMethod: "Add*"}}},
		{Name: "health", Rules: []Rule{{GRPCService: "grpc.health.v1.Health"}}},
		{Name: "reflect", Rules: []Rule{{GRPCService: "grpc.reflection.*", Key: "/reflection"}}},
		{Name: "get", Rules: []Rule{{GRPCMethod: "Get"}}},
		{Name: "rest", Default: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ path, class, key string }{
		{"/shop.Cart/AddItem", "write", "/shop.Cart/AddItem"},
		{"/shop.Cart/Add", "write", "/shop.Cart/Add"},
		{"/shop.Cart/RemoveItem", "rest", "/shop.Cart/RemoveItem"},
		{"/shop.Cart/AddItem/x", "rest", "/shop.Cart/AddItem/x"},
		{"/shop.CartX/AddItem", "rest", "/shop.CartX/AddItem"},
		{"/grpc.health.v1.Health/Check", "health", "/grpc.health.v1.Health/Check"},
		{"/grpc.health.v1.Health/Watch?x=1", "health", "/grpc.health.v1.Health/Watch"},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "reflect", "/reflection"},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "reflect", "/reflection"},
		{"/any.Svc/Get", "get", "/any.Svc/Get"},
		{"/any.Svc/GetAll", "rest", "/any.Svc/GetAll"},
		{"/Get", "rest", "/Get"},
	} {
		for _, filtered := range []bool{true, false} {
			cc := *c
			cc.filtered = filtered
			ci, key := cc.Classify(&fakeReq{method: "POST", path: x.path}, netip.Addr{})
			if cc.Class(ci).Name != x.class || string(key) != x.key {
				t.Errorf("%s (filtered %v): class %s key %q, want %s %q", x.path, filtered, cc.Class(ci).Name, key, x.class, x.key)
			}
		}
	}
	for _, bad := range []Rule{{GRPCService: "a/b"}, {GRPCMethod: "[x"}, {GRPCService: "a b"}, {GRPCMethod: "M\x00"}} {
		if _, err := Compile([]ClassConfig{{Name: "a", Rules: []Rule{bad}}, {Name: "d"}}); err == nil {
			t.Errorf("rule %+v compiled", bad)
		}
	}
}
