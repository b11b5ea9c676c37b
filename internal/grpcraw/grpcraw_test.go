package grpcraw

import "testing"

func TestCodec(t *testing.T) {
	in := []byte("hello")
	b, err := Codec{}.Marshal(&in)
	if err != nil || string(b) != "hello" {
		t.Fatalf("Marshal = %q, %v", b, err)
	}
	out := []byte("old contents")
	if err := (Codec{}).Unmarshal([]byte("world"), &out); err != nil || string(out) != "world" {
		t.Fatalf("Unmarshal = %q, %v", out, err)
	}
	if _, err := (Codec{}).Marshal("not bytes"); err == nil {
		t.Error("Marshal of a string did not fail")
	}
	if err := (Codec{}).Unmarshal(nil, new(string)); err == nil {
		t.Error("Unmarshal into a string did not fail")
	}
}
