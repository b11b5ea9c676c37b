package h2srv

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// strictDecoder is a client's HPACK decoder that holds the server to RFC
// 7541 §4.2 as nghttp2 does: once the server has acknowledged a
// SETTINGS_HEADER_TABLE_SIZE below the table size in force, the next
// header block must begin with a Dynamic Table Size Update, the first
// one no larger than the smallest size set since, none larger than the
// setting. x/net's Decoder (its allowed size set to the setting) decodes
// the rest; it checks an update against that limit, not that one came.
type strictDecoder struct {
	dec     *hpack.Decoder
	inForce uint32   // the table size the last update set (4096 at first)
	setting uint32   // SETTINGS_HEADER_TABLE_SIZE acknowledged
	expect  bool     // an update is owed
	least   uint32   // the smallest setting since the last block
	sent    []int64  // SETTINGS sent, not yet acknowledged: the table size, -1 without one
	updates []uint32 // the updates seen, in order
}

func newStrictDecoder() *strictDecoder {
	return &strictDecoder{dec: hpack.NewDecoder(4096, nil), inForce: 4096, setting: 4096, least: 4096}
}

// ack applies the oldest SETTINGS_HEADER_TABLE_SIZE not yet acknowledged.
func (d *strictDecoder) ack() {
	if len(d.sent) == 0 {
		return
	}
	s := d.sent[0]
	d.sent = d.sent[1:]
	if s < 0 {
		return
	}
	v := uint32(s)
	d.setting = v
	d.dec.SetAllowedMaxDynamicTableSize(v)
	if v < d.inForce {
		d.expect = true
		d.least = min(d.least, v)
	}
}

// block checks and decodes one complete header block.
func (d *strictDecoder) block(b []byte) ([]hpack.HeaderField, error) {
	var sizes []uint32
	for p := b; len(p) > 0 && p[0]&0xe0 == 0x20; {
		v, n, err := readInt(p, 5)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, uint32(v))
		p = p[n:]
	}
	if d.expect {
		if len(sizes) == 0 {
			return nil, fmt.Errorf("no dynamic table size update after SETTINGS_HEADER_TABLE_SIZE %d", d.setting)
		}
		if sizes[0] > d.least {
			return nil, fmt.Errorf("first table size update %d, larger than the smallest setting %d", sizes[0], d.least)
		}
	}
	if len(sizes) > 2 {
		return nil, fmt.Errorf("%d table size updates in one block", len(sizes))
	}
	for _, v := range sizes {
		if v > d.setting {
			return nil, fmt.Errorf("table size update %d above the setting %d", v, d.setting)
		}
		d.inForce = v
	}
	d.updates = append(d.updates, sizes...)
	d.expect, d.least = false, d.setting
	return d.dec.DecodeFull(b)
}

// readInt reads an HPACK integer with an n-bit prefix (RFC 7541 §5.1).
func readInt(p []byte, n uint) (v uint64, used int, err error) {
	max := uint64(1)<<n - 1
	v = uint64(p[0]) & max
	if v < max {
		return v, 1, nil
	}
	var m uint
	for i := 1; i < len(p) && i < 8; i++ {
		v += uint64(p[i]&0x7f) << m
		if p[i]&0x80 == 0 {
			return v, i + 1, nil
		}
		m += 7
	}
	return 0, 0, fmt.Errorf("bad integer")
}

// strictOut reads the server's output through d: SETTINGS acks apply the
// client's settings, header blocks (HEADERS and CONTINUATION) are
// checked and decoded. It returns the decoded blocks in order.
func (cl *client) strictOut(d *strictDecoder) [][]hpack.HeaderField {
	cl.t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(cl.c.TakeOutput(nil)))
	var blocks [][]hpack.HeaderField
	var frag []byte
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			return blocks
		}
		if err != nil {
			cl.t.Fatalf("server output: %v", err)
		}
		end := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				d.ack()
			}
		case *http2.HeadersFrame:
			frag = append(frag[:0], f.HeaderBlockFragment()...)
			end = f.HeadersEnded()
		case *http2.ContinuationFrame:
			frag = append(frag, f.HeaderBlockFragment()...)
			end = f.HeadersEnded()
		}
		if end {
			hf, err := d.block(frag)
			if err != nil {
				cl.t.Fatalf("header block on stream %d: %v", f.Header().StreamID, err)
			}
			blocks = append(blocks, hf)
		}
	}
}

// settingTable sends SETTINGS_HEADER_TABLE_SIZE v (d remembers it until
// the server acknowledges it).
func (cl *client) settingTable(d *strictDecoder, v uint32) {
	cl.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: v})
	d.sent = append(d.sent, int64(v))
}

// settingsOther sends a SETTINGS frame without the table size (its
// acknowledgement changes nothing for d).
func (cl *client) settingsOther(d *strictDecoder, s ...http2.Setting) {
	cl.fr.WriteSettings(s...)
	d.sent = append(d.sent, -1)
}

// answer responds 200 to the stream of the request just fed.
func (cl *client) answer() {
	cl.t.Helper()
	evs := cl.events()
	if len(evs) != 1 || evs[0].Kind != EvRequest {
		cl.t.Fatalf("events %+v", evs)
	}
	cl.c.Headers(200)
	cl.c.Field([]byte("Content-Type"), []byte("text/plain"))
	cl.c.EndHeaders(evs[0].S, true)
	cl.c.Release(evs[0].S)
}

// TestTableSizeUpdate: a client that lowers SETTINGS_HEADER_TABLE_SIZE
// (h2load --header-table-size=0, any nghttp2 client told to) is sent a
// Dynamic Table Size Update at the start of the next header block (RFC
// 7541 §4.2): the smallest size set since the last block, then nothing
// more while the setting does not go below it again.
func TestTableSizeUpdate(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings []uint32 // SETTINGS_HEADER_TABLE_SIZE frames before the first request
		later    []uint32 // after the first answer
		want     []uint32 // the updates sent, in order
	}{
		{"zero", []uint32{0}, nil, []uint32{0}},
		{"1024", []uint32{1024}, nil, []uint32{1024}},
		{"lowered twice in one interval", []uint32{1024, 2048}, nil, []uint32{1024}},
		{"down and up in one interval", []uint32{0, 4096}, nil, []uint32{0}},
		{"raised: no update owed", []uint32{8192}, nil, nil},
		{"lowered again later", []uint32{1024}, []uint32{512}, []uint32{1024, 512}},
		{"raised later", []uint32{1024}, []uint32{4096}, []uint32{1024}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			d := newStrictDecoder()
			cl.buf.WriteString(Preface)
			cl.settingsOther(d)
			for _, v := range c.settings {
				cl.settingTable(d, v)
			}
			cl.get(1, true)
			if err := cl.feed(); err != nil {
				t.Fatal(err)
			}
			cl.answer()
			for _, v := range c.later {
				cl.settingTable(d, v)
			}
			cl.get(3, true)
			cl.feed()
			cl.answer()
			cl.get(5, true)
			cl.feed()
			cl.answer()
			blocks := cl.strictOut(d)
			if len(blocks) != 3 {
				t.Fatalf("%d header blocks, want 3", len(blocks))
			}
			for i, b := range blocks {
				if len(b) != 2 || b[0].Value != "200" || b[1].Value != "text/plain" {
					t.Errorf("block %d: %v", i, b)
				}
			}
			if fmt.Sprint(d.updates) != fmt.Sprint(c.want) {
				t.Errorf("updates %v, want %v", d.updates, c.want)
			}
		})
	}
}

// TestTableSizeUpdateQueuedBlocks: a header block made before the
// client's SETTINGS but written after its acknowledgement (trailers
// waiting behind data held by flow control) carries the update, and so
// does the 431 the server answers itself.
func TestTableSizeUpdateQueuedBlocks(t *testing.T) {
	t.Run("trailers", func(t *testing.T) {
		cl := newClient(t, Config{})
		d := newStrictDecoder()
		cl.buf.WriteString(Preface)
		cl.settingsOther(d, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		cl.get(1, true)
		cl.feed()
		s := cl.events()[0].S
		cl.c.Headers(200)
		cl.c.EndHeaders(s, false)
		cl.c.WriteData(s, []byte("0123456789"), false)
		cl.c.Trailers()
		cl.c.Field([]byte("grpc-status"), []byte("0"))
		if !cl.c.EndTrailers(s) || cl.c.Pending(s) != 9 {
			t.Fatalf("trailers not queued behind %d bytes", cl.c.Pending(s))
		}
		if n := len(cl.strictOut(d)); n != 1 {
			t.Fatalf("%d blocks before the window opens", n)
		}
		cl.settingTable(d, 0)
		cl.fr.WriteWindowUpdate(1, 100)
		cl.feed()
		blocks := cl.strictOut(d)
		if len(blocks) != 1 || len(blocks[0]) != 1 || blocks[0][0].Value != "0" || fmt.Sprint(d.updates) != "[0]" {
			t.Errorf("trailers %v, updates %v", blocks, d.updates)
		}
		cl.c.Release(s)
	})
	t.Run("431", func(t *testing.T) {
		cl := newClient(t, Config{MaxHeaderListSize: 200})
		d := newStrictDecoder()
		cl.buf.WriteString(Preface)
		cl.settingsOther(d)
		cl.settingTable(d, 0)
		cl.get(1, true, "x-big", string(bytes.Repeat([]byte("b"), 150)))
		cl.feed()
		blocks := cl.strictOut(d)
		if len(blocks) != 1 || blocks[0][0].Value != "431" || fmt.Sprint(d.updates) != "[0]" {
			t.Errorf("blocks %v, updates %v", blocks, d.updates)
		}
	})
}
