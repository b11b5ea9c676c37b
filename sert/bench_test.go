package sert

import (
	"testing"
	"time"
)

// BenchmarkRequestPath is what the proxy does per request of a terminating
// class: look the class up, count, read the threshold, check the method,
// and race the latch. It must not allocate.
func BenchmarkRequestPath(b *testing.B) {
	c, err := New(Config{Params: DefaultParams(), Classes: []*ClassConfig{
		{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}}})
	if err != nil {
		b.Fatal(err)
	}
	method := []byte("GET")
	b.ReportAllocs()
	for b.Loop() {
		cl := c.Class(0)
		cl.Arrive()
		var l Latch
		if cl.TerminableBytes(method) && cl.Terminable("HEAD") && cl.Remaining(time.Second) > 0 && l.Disarm() {
			_ = Sample(time.Second, cl.Threshold(), l.Terminated())
		}
	}
}

func TestRequestPathAllocs(t *testing.T) {
	c, err := New(Config{Params: DefaultParams(), Classes: []*ClassConfig{
		{Name: "search", Lower: 500 * time.Millisecond, Upper: 15 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	method := []byte("GET")
	a := testing.AllocsPerRun(1000, func() {
		cl := c.Class(0)
		cl.Arrive()
		cl.Reject()
		cl.Terminate()
		cl.Reclaim(time.Second)
		var l Latch
		if cl.TerminableBytes(method) && cl.Terminable("HEAD") && cl.Remaining(time.Second) > 0 && l.Terminate() {
			_ = Sample(time.Second, cl.Threshold(), l.Terminated())
		}
	})
	if a != 0 {
		t.Fatalf("request path allocates %v per op", a)
	}
}
