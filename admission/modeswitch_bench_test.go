package admission

import "testing"

// BenchmarkSwitched measures the dispatch overhead of Switched over calling
// the chosen Admitter directly:
//
//	go test -run '^$' -bench Switched -benchtime 300ms -cpu 1,2 ./admission
func BenchmarkSwitched(b *testing.B) {
	var inner Admitter = verdictAdmitter(Admit)
	run := func(b *testing.B, a Admitter) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := &Request{Class: 1}
			for pb.Next() {
				if a.Admit(req).Verdict != Admit {
					b.Error("rejected")
					return
				}
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, inner) })
	for _, mode := range []Mode{ModeBatch, ModeThreshold, ModeOff} {
		s, err := NewSwitch(SwitchConfig{Mode: mode})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("mode="+mode.String(), func(b *testing.B) {
			run(b, &Switched{Batch: inner, Threshold: inner, Switch: s})
		})
	}
}
