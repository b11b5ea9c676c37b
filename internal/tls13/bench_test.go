package tls13

import (
	"crypto/tls"
	"testing"
)

// The per-record path -- sealing a response, opening a request -- does
// not allocate once its buffers exist: the benchmarks report it, and
// TestRecordPathAllocs holds it at 0.

func benchSealOpen(b *testing.B, suite uint16, size int) {
	cli, srv := pair(b, suite)
	p := make([]byte, size)
	buf := make([]byte, size)
	wire := make([]byte, 0, 2*MaxRecord)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	for b.Loop() {
		wire = cli.Seal(wire[:0], p)
		if n := sealOpen(srv, wire, buf); n != size {
			b.Fatalf("opened %d of %d", n, size)
		}
	}
}

// sealOpen moves wire into st and reads the plaintext out into buf.
func sealOpen(st *State, wire, buf []byte) int {
	got := 0
	for {
		n, err := st.Read(buf[got:])
		if err != nil {
			panic(err)
		}
		got += n
		if n > 0 {
			continue
		}
		if len(wire) == 0 {
			return got
		}
		m := copy(st.RawSpace(), wire)
		st.Filled(m)
		wire = wire[m:]
	}
}

func BenchmarkRecordAES128Small(b *testing.B) { benchSealOpen(b, tls.TLS_AES_128_GCM_SHA256, 128) }
func BenchmarkRecordAES128Full(b *testing.B) {
	benchSealOpen(b, tls.TLS_AES_128_GCM_SHA256, MaxPlaintext)
}
func BenchmarkRecordChaChaSmall(b *testing.B) {
	benchSealOpen(b, tls.TLS_CHACHA20_POLY1305_SHA256, 128)
}

// TestRecordPathAllocs: sealing and opening records, small and full,
// empty ones among them, allocate nothing in every suite.
func TestRecordPathAllocs(t *testing.T) {
	for _, suite := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256} {
		for _, size := range []int{1, 128, MaxPlaintext} {
			cli, srv := pair(t, suite)
			p := make([]byte, size)
			buf := make([]byte, size)
			wire := make([]byte, 0, 2*MaxRecord)
			allocs := testing.AllocsPerRun(100, func() {
				wire = cli.SealEmpty(wire[:0])
				wire = cli.Seal(wire, p)
				if n := sealOpen(srv, wire, buf); n != size {
					t.Fatalf("opened %d of %d", n, size)
				}
			})
			if allocs != 0 {
				t.Errorf("%s, %d bytes: %v allocs per record", tls.CipherSuiteName(suite), size, allocs)
			}
		}
	}
}
