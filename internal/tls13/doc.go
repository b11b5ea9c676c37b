// Package tls13 is a TLS 1.3 record layer for connections whose handshake
// crypto/tls has done: the event loops (package proxy/evloop) serve
// HTTP/1.1 over TLS on their own sockets, sealing and opening records
// themselves, instead of a goroutine per connection reading through a
// *tls.Conn (see "TLS and HTTP/2" in proxy/doc.go for why).
//
// Extract takes the record state out of a finished server-side
// *tls.Conn: the suite, both application traffic secrets, both sequence
// numbers, and the ciphertext crypto/tls had read past the handshake.
// crypto/tls exports none of it, so Extract reads unexported fields by
// reflection (read-only); SelfTest checks the result against crypto/tls
// at start-up, and a failure keeps every connection on crypto/tls.
// Decision: reflection rather than Config.KeyLogWriter for the secrets,
// because the sequence numbers and the buffered ciphertext need it
// anyway, and a per-connection KeyLogWriter needs a Config clone per
// handshake (GetConfigForClient).
//
// State is the record layer (RFC 8446 §5): keys and IVs by
// HKDF-Expand-Label (§7.1, §7.3), the nonce the IV XOR the sequence
// number, the record header as additional data. Reading, an inner
// application_data record is plaintext, close_notify is io.EOF, any other
// alert or a record that fails to authenticate ends the connection, a
// KeyUpdate updates the read key (and, when it asks, makes the next Seal
// send ours and update the write key), a NewSessionTicket or any other
// handshake message from the client is a protocol error; records longer
// than 2^14+256 bytes of ciphertext or 2^14 of plaintext are refused
// (§5.4). Sealing, records carry at most 2^14 bytes, and the write key is
// updated on our own after 2^24 records (§5.5). Suites: AES-128-GCM,
// AES-256-GCM, ChaCha20-Poly1305 (golang.org/x/crypto). A handshake
// message split across records is refused (clients do not split the
// 5-byte KeyUpdate).
//
// Conn is a blocking net.Conn over a State, for a connection the loops
// hand to a goroutine (fasthttp, an upgrade).
package tls13
