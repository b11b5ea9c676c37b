// Package tls13 is a TLS 1.3 record layer for connections whose handshake
// crypto/tls has done: the event loops (package proxy/evloop) serve
// HTTP/1.1 and HTTP/2 over TLS on their own sockets, sealing and opening
// records themselves, instead of a goroutine per connection reading
// through a *tls.Conn (see "Engines" in proxy/doc.go for why).
//
// # Structure
//
//   - Tap is the net.Conn a server's handshake runs over; Take turns the
//     finished handshake into Secrets and the ciphertext already read.
//   - State is the record layer itself (RFC 8446 §5): Read opens what
//     the peer sent, Seal seals ours. It does no I/O: the caller reads
//     into RawSpace and writes what Seal appended.
//   - Conn is a blocking net.Conn over a State, for a connection the loops
//     hand to a goroutine (fasthttp, an upgrade).
//   - SelfTest runs the whole path against crypto/tls once per process.
//
// # Taking a connection over from crypto/tls
//
// After a handshake the record layer needs the suite, both application
// traffic secrets, both sequence numbers and whatever crypto/tls read
// past the client's Finished. crypto/tls exports only the suite. The
// secrets come from the key log: TapConfig gives each TLS 1.3 handshake
// on a Tap a copy of the listener's Config (GetConfigForClient) whose
// KeyLogWriter is that Tap, which keeps the four traffic secrets
// (CLIENT_/SERVER_HANDSHAKE_TRAFFIC_SECRET, CLIENT_/SERVER_TRAFFIC_SECRET_0)
// and refuses a log with two client randoms or a secret twice. The
// copy's session ticket keys stay the listener's (crypto/tls takes the
// first Config's when the copy sets none), so resumption works across
// connections as before.
//
// The rest the Tap learns by being the connection itself:
//
//   - Reading, it gives crypto/tls at most the rest of the record
//     crypto/tls is reading, never a byte of the next one. crypto/tls
//     reads record by record and stops at the client's Finished, so it
//     opens no record under the client's application key -- the read
//     sequence number is 0 -- and what the Tap read from the socket past
//     that record (often the first request, sent with the Finished) is
//     the leftover, opened first.
//   - Both ways it keeps the protected records (outer type
//     application_data) that pass, a few KB. Take opens each with the
//     key the secrets give: those crypto/tls read must all open under the
//     client's handshake key (else crypto/tls read past the handshake);
//     those it wrote must open under our handshake key and then under our
//     application key, the latter carrying handshake messages only
//     (session tickets). Their count is the write sequence number,
//     proved record by record rather than assumed -- a wrong one would
//     reuse an AES-GCM nonce.
//
// This holds in every shape crypto/tls's TLS 1.3 server handshake takes:
// without client certificates Go sends its
// ticket in its first flight, right after its Finished and under the
// application key, before reading the client's Finished; with them it
// sends the ticket after reading the client's certificate; a
// HelloRetryRequest adds plaintext records only; a resumed handshake
// sends no certificate; a client that offers no PSK mode gets no ticket.
// TLS 1.2, a suite the layer lacks, or anything Take cannot prove
// (ErrUnsupported) leaves the connection with crypto/tls: Release makes
// the Tap pass everything through, the bytes it holds first. Client
// does the same on a client, for tests and tools that must send records
// crypto/tls cannot (KeyUpdates, empty or broken records).
//
// Decision: documented APIs only. The alternative, reading crypto/tls's
// unexported fields (halfConn.seq, trafficSecret, rawInput) by
// reflection, is shorter, but a Go release that kept those names and
// changed their meaning could leave a stale write sequence number, with
// only a start-up self-test between that and nonce reuse. The Tap costs a
// Config copy per TLS 1.3 handshake, a record at a time to crypto/tls
// during the handshake, and one AEAD open per protected handshake record
// -- nothing after it. SelfTest still runs the full, resumed,
// HelloRetryRequest and client-certificate shapes against Go's client
// once per process: it catches a Go whose key log or record order the
// Tap no longer follows, which would otherwise fail every connection
// (Take refusing keeps them all on crypto/tls, safely but slowly).
//
// # The record layer
//
// Keys and IVs come from HKDF-Expand-Label (§7.1, §7.3), the nonce is
// the IV XOR the sequence number, the record header is the additional
// data. Suites: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305
// (golang.org/x/crypto).
//
// Reading: an inner application_data record is plaintext, close_notify is
// io.EOF, the peer's other alerts are a PeerAlert (errors.Is ErrAlert),
// a KeyUpdate updates the read key (and, when it asks, makes the next
// Seal send ours; several asks while we are silent get one answer). A
// handshake message may come in fragments over several records (§5.1)
// and is put together; the only one a client may send here is a
// KeyUpdate, which must end its record (a key change), and no other
// record may come between its fragments. Every failure is sticky and
// names the alert it calls for (§6.2), which Alert seals under the
// current write key: bad_record_mac (a record that does not
// authenticate), record_overflow (more than 2^14+256 bytes of ciphertext
// or 2^14+1 of inner plaintext, §5.4), decode_error, illegal_parameter,
// protocol_version, unexpected_message. The peer's own alert gets no
// answer.
//
// Records without application data -- empty application_data records,
// KeyUpdates -- are allowed, but at most MaxUseless (16) in a row, as
// crypto/tls's maxUselessRecords: each costs an AEAD open and a KeyUpdate
// a key derivation, and a loop serves many connections, so one client
// must not keep it busy with them. The next one ends the connection with
// unexpected_message.
//
// Buffered is everything held and not yet read, ciphertext and plaintext
// alike. A Read that fills the caller's buffer can leave a record's
// plaintext opened in the State with its ciphertext gone from the raw
// buffer; a caller that waits for its socket while Buffered is not 0
// waits for bytes it already has, and epoll never reports them again.
// The loops read until Buffered is 0 or only part of a record is left.
//
// Sealing: records carry at most 2^14 bytes; the write key is updated on
// our own after 2^24 records (§5.5). After close_notify or an alert
// nothing more is sealed.
//
// Sealing and opening a record allocate nothing once the buffers exist
// (the benchmarks, TestRecordPathAllocs); key updates and the handshake
// hand-over do.
package tls13
