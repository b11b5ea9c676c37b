//go:build linux

package evloop

import (
	"fmt"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/proxy/exchange/exchangetest"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// TestStreamReplyMatchesText: the HEADERS a stream's answer gets from
// replyFields are the ones the loops once made by parsing the HTTP/1.1
// answer they had written (appendReply) and dropping what h2 forbids --
// for every kind of answer: plain, gRPC's form, with Retry-After and a
// verdict or without, for HEAD, when closing.
func TestStreamReplyMatchesText(t *testing.T) {
	a := exchangetest.App(t, &exchangetest.Control{})
	l := &eventLoop{now: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	l.nowNs = l.now.UnixNano()
	id := []byte("0123456789abcdef0000000000000001")
	n := 0
	for _, o := range []pipeline.Outcome{pipeline.OutRejected, pipeline.OutNoBackend, pipeline.OutBackendFailed,
		pipeline.OutBackendTimeout, pipeline.OutBackendBusy, pipeline.OutTerminated, pipeline.OutBadRequest} {
		for _, grpc := range []bool{false, true} {
			for _, closing := range []bool{false, true} {
				r := pipeline.ReplyFor(a, o, admission.Decision{Verdict: admission.RejectTest, RetryAfter: 1500 * time.Millisecond}, grpc)
				text := l.appendReply(nil, &r, a.ReqID, id, closing, false)
				var rh pipeline.RawHead
				if pipeline.ParseResponseHead(text, &rh) != pipeline.HeadOK {
					t.Fatalf("%q does not parse", text)
				}
				var want []string
				for i := 0; i < rh.NFields; i++ {
					switch rh.Kinds[i] {
					case pipeline.KindConnection, pipeline.KindTransferEncoding, pipeline.KindUpgrade, pipeline.KindHopByHop:
						continue
					}
					f := &rh.Fields[i]
					want = append(want, fmt.Sprintf("%s: %s", f.Name.Of(text), f.Value.Of(text)))
				}
				var got []string
				for _, f := range l.replyFields(&r, a.ReqID, id) {
					got = append(got, fmt.Sprintf("%s: %s", f.Name, f.Value))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) || rh.Status != r.Status || string(text[rh.N:]) != string(r.Body) {
					t.Errorf("%v grpc=%v: fields\n%q\nthe text's\n%q", o, grpc, got, want)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no answer checked")
	}
}
