package proxy

import (
	"time"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// gresp.go: the goroutine driver's (gdrive.go) response side -- the
// backend's head and body to the client (into the stream's h2 core,
// h2core.go), response buffering for a client slower than its backend,
// and sentry's own replies. What reaches the client last waits until the
// exchange is recorded (Done), as on the loops and the fasthttp path.

// writeHead carries out WriteHead: the head is k bytes of d.buf; the
// measured time ends now (Relay), the head goes to the client as HEADERS,
// and the body bytes that came with it follow (Body).
func (d *gdriver) writeHead(k int) exchange.Action {
	ex := &d.ex
	ex.Relay(time.Now())
	st := d.cur
	_, rh := ex.Response()
	d.chunked, d.ct = rh.Chunked, pipeline.ChunkTracker{}
	if ex.NoBody() {
		d.holdHead()
	} else if !st.coreHead(ex, d.rid) {
		return ex.Abort(pipeline.OutClientGone)
	}
	rest := d.buf[k:d.n]
	n, act := ex.Body(rest, false)
	switch act {
	case exchange.Forward, exchange.Finish:
		return d.forward(rest[:n], act)
	}
	return act
}

// forward passes body bytes b on as DATA (a chunked body decoded), with
// END_STREAM at Finish, or into the response buffer; Forward means "read
// on". The read buffer is free again after it.
func (d *gdriver) forward(b []byte, act exchange.Action) exchange.Action {
	ex := &d.ex
	st := d.cur
	d.n = 0
	if d.chunked && len(b) > 0 {
		d.dec, _, _, _ = d.ct.Decode(d.dec[:0], b)
		b = d.dec
	}
	end := act == exchange.Finish
	if d.held {
		return act // (no body goes: the head goes alone at Finish)
	}
	if !d.buffering && len(b) > 0 && !end && ex.MayBuffer() && d.bud.On() {
		// The client takes it now, or the buffer does.
		queued, ok := st.coreTry(b)
		if !ok {
			return ex.Abort(pipeline.OutClientGone)
		}
		if queued {
			return act
		}
		d.buffering = true
		d.rb.Start(d.bud, respbuf.OSFiles{})
	}
	if d.buffering {
		// (At Finish the rest goes from rb: unbuffer.)
		if !d.hold(st, b) || !d.push(st) {
			return ex.Abort(pipeline.OutClientGone)
		}
		return act
	}
	if end {
		d.last = b // (it goes with the end, at Finish)
		return act
	}
	if len(b) > 0 && !st.coreData(b, false) {
		return ex.Abort(pipeline.OutClientGone)
	}
	ex.ReadAgain(time.Now()) // a write that waited held the idle deadline off
	return act
}

// holdHead keeps the head of a response without a body (its fields
// copied into d.arena) for Finish, where it goes, with END_STREAM, after
// the exchange is recorded: as coreHead writes it.
func (d *gdriver) holdHead() {
	ex := &d.ex
	_, rh := ex.Response()
	d.held, d.status = true, rh.Status
	d.arena, d.spans = d.arena[:0], d.spans[:0]
	ex.PutRespFields((*heldHead)(d), d.rid)
	fs, ar := d.fields[:0], d.arena
	for _, sp := range d.spans {
		fs = append(fs, gfield{Name: ar[sp.n0:sp.v0], Value: ar[sp.v0:sp.v1]})
	}
	d.fields = fs
}

// fieldSpan is where a held field's name (n0:v0) and value (v0:v1) are in
// the driver's arena: cut once every field is in, since the arena may
// move as it grows.
type fieldSpan struct{ n0, v0, v1 int }

// heldHead is the driver as the exchange.FieldSink that copies a head's
// fields into its arena (holdHead).
type heldHead gdriver

func (h *heldHead) Field(name, value []byte) {
	n0 := len(h.arena)
	h.arena = append(h.arena, name...)
	v0 := len(h.arena)
	h.arena = append(h.arena, value...)
	h.spans = append(h.spans, fieldSpan{n0, v0, len(h.arena)})
}

// hold puts b in the response buffer; when the buffer's limits refuse
// part of it, the client takes from the buffer at its pace until the rest
// fits (the response then goes as unbuffered). False: the client went.
func (d *gdriver) hold(st *ownStream, b []byte) bool {
	for len(b) > 0 {
		k := d.rb.Write(b)
		if b = b[k:]; len(b) == 0 {
			break
		}
		if len(d.pend) == 0 && d.rb.Len() == 0 {
			// Nothing ahead of it: the rest goes at the client's pace.
			if !st.coreData(b, false) {
				return false
			}
			break
		}
		if !d.sendBuffered(st, false) {
			return false
		}
		d.ex.ReadAgain(time.Now())
	}
	return true
}

// next is the next piece of the buffered body for the client (empty:
// none); false if the buffer's file failed.
func (d *gdriver) next() ([]byte, bool) {
	if len(d.pend) > 0 || d.rb.Len() == 0 {
		return d.pend, true
	}
	if d.out == nil {
		d.out = make([]byte, gbufSize)
	}
	n, err := d.rb.Read(d.out)
	if err != nil {
		return nil, false
	}
	d.pend = d.out[:n]
	return d.pend, true
}

// push passes buffered pieces to the client while it takes them without
// a wait. False: the client went.
func (d *gdriver) push(st *ownStream) bool {
	for {
		p, ok := d.next()
		if !ok {
			return false
		}
		if len(p) == 0 {
			return true
		}
		queued, ok := st.coreTry(p)
		if !ok {
			return false
		}
		if !queued {
			return true
		}
		d.pend = nil
	}
}

// sendBuffered passes buffered pieces to the client, waiting for it as
// coreData does: all of them (all), or one. False: the client went.
func (d *gdriver) sendBuffered(st *ownStream, all bool) bool {
	for {
		p, ok := d.next()
		if !ok {
			return false
		}
		if len(p) == 0 {
			return true
		}
		if !st.coreData(p, false) {
			return false
		}
		d.pend = nil
		if !all {
			return true
		}
	}
}

// unbuffer sends the rest of a buffered response, and its end, once the
// backend's part is over.
func (d *gdriver) unbuffer(st *ownStream) {
	ok := d.sendBuffered(st, true)
	d.stopBuffering()
	if ok {
		st.coreData(nil, true)
	} else {
		st.coreReset(h2srv.InternalError)
	}
}

// stopBuffering gives the response buffer back.
func (d *gdriver) stopBuffering() {
	if d.buffering {
		d.rb.Close()
		d.buffering, d.pend = false, nil
	}
}

// reply writes the core's Reply (sentry's own answer) and completes the
// exchange.
func (d *gdriver) reply(st *ownStream) {
	ex := &d.ex
	r := ex.Reply()
	body := r.Body
	if ex.HeadRequest() {
		body = nil
	}
	fs := d.replyFields(r, ex.ID())
	// Recorded before its bytes go out (as on the loops and the fasthttp
	// path): a client that has the answer finds it in the metrics and the
	// access log.
	ex.Done(time.Now())
	if st.coreReply(r.Status, fs, body) {
		st.coreDrain()
	}
}

// replyFields lists the fields of r as every driver writes them
// (pipeline.AppendReplyFields), with the request ID. Valid until the
// next call.
func (d *gdriver) replyFields(r *pipeline.Reply, id []byte) []gfield {
	d.fields, d.num = pipeline.AppendReplyFields(d.fields[:0], d.num, r, d.httpDate(), d.rid, id)
	return d.fields
}

// httpDate is the Date field's value, made once a second.
func (d *gdriver) httpDate() []byte {
	now := time.Now()
	if s := now.Unix(); s != d.dateSec || d.date == nil {
		d.dateSec = s
		d.date = now.UTC().AppendFormat(d.date[:0], http1Date)
	}
	return d.date
}

const http1Date = "Mon, 02 Jan 2006 15:04:05 GMT"
