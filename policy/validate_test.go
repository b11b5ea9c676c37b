package policy

import (
	"strconv"
	"strings"
	"testing"
)

// TestValidation feeds invalid policies and checks every error: its line
// and the gist of its message, and that nothing else is reported.
// $CERT_A/$KEY_A and $CERT_B/$KEY_B are two valid, different TLS pairs.
func TestValidation(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := writePair(t, dir, "a")
	certB, keyB := writePair(t, dir, "b")
	expand := strings.NewReplacer("$CERT_A", certA, "$KEY_A", keyA, "$CERT_B", certB, "$KEY_B", keyB, "$DIR", dir)

	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"misspelt top-level key", `
apps:
  - name: a
    backends: {static: ["h:1"]}
sever:
  max_conns: 1
`, []string{`4: unknown key "sever" (did you mean "server"?)`}},

		{"misspelt nested key", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    health:
      pasive: {failures: 1}
`, []string{`5: apps[0].health: unknown key "pasive" (did you mean "passive"?)`}},

		{"unknown key lists known keys", `
log:
  colour: true
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: log: unknown key "colour" (known keys: access, format, level)`}},

		{"access log output relative", `
log:
  access: {enabled: true, output: logs/access.log}
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: log.access.output: "logs/access.log": write stdout, stderr or an absolute file path`}},

		{"access log bad format and negative rate", `
log:
  access:
    format: combined
    rate: -1
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`3: log.access.format`, `4: log.access.rate`}},

		{"access log misspelt key", `
log:
  access: {enabled: true, sample: 10}
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: log.access: unknown key "sample"`}},

		{"bare number duration", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    timeouts:
      connect: 250
`, []string{`5: apps[0].timeouts.connect: duration "250" has no unit; use a unit, e.g. 250ms`}},

		{"bare float duration", `
server:
  idle_timeout: 1.5
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: server.idle_timeout: duration "1.5" has no unit`}},

		{"unparseable duration", `
server:
  shutdown_timeout: 5 sec
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: server.shutdown_timeout: invalid duration "5 sec"`}},

		{"request buffer sizes", `
server:
  request_buffer: 2GiB
  body_min_rate: fast
apps:
  - name: a
    backends: {static: ["h:1"]}
    request_buffering: maybe
`, []string{`2: server.request_buffer: 2147483648 bytes is out of range; must be from 0 to 1073741824`, `3: server.body_min_rate: invalid size "fast"`, `7: apps[0].request_buffering: invalid value "maybe"; valid: on, off`}},

		{"request_buffer_total below request_buffer", `
server:
  request_buffer: 4MiB
  request_buffer_total: 1MiB
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`3: server.request_buffer_total: 1048576 is smaller than request_buffer (4194304): every body between them would get 503; raise it, or 0 for no cap`}},

		{"request_buffer over the default total", `
server:
  request_buffer: 1GiB
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: server.request_buffer_total: 268435456 is smaller than request_buffer (1073741824): every body between them would get 503; raise it, or 0 for no cap`}},

		{"response buffer sizes", `
server:
  response_buffer: 1KiB
  response_temp_dir: tmp
apps:
  - name: a
    backends: {static: ["h:1"]}
    response_buffering: maybe
`, []string{`2: server.response_buffer: 1024 is below 16KiB, the step memory is taken in: it would hold nothing; 0 turns buffering off`, `3: server.response_temp_dir: "tmp": write an absolute directory path, or leave it out for the system's`, `7: apps[0].response_buffering: invalid value "maybe"; valid: on, off`}},

		{"response totals below their buffer", `
server:
  response_buffer: 4MiB
  response_buffer_total: 1MiB
  response_temp_file: 2GiB
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`3: server.response_buffer_total: 1048576 is smaller than response_buffer (4194304): no response could fill its buffer; raise it, or 0 for no cap`, `4: server.response_temp_file_total: 1073741824 is smaller than response_temp_file (2147483648): no response could fill its file; raise it, or 0 for no cap`}},

		{"negative duration", `
server:
  write_timeout: -1s
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: server.write_timeout: -1s must not be negative`}},

		{"zero where positive required", `
server:
  idle_timeout: 0
  read_header_timeout: 0s
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: server.idle_timeout: 0s must be positive`, `3: server.read_header_timeout: 0s must be positive`}},

		{"duration of wrong type", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    timeouts: {response: [1s]}
`, []string{`4: apps[0].timeouts.response: expected a duration such as 250ms, got a list`}},

		{"bad listen addresses", `
apps:
  - name: a
    listen:
      - 127.0.0.1:80800
      - 127.0.0.1
      - "bad host!:80"
    backends: {static: ["h:1"]}
`, []string{
			`4: apps[0].listen[0]: invalid address "127.0.0.1:80800": port "80800" is not a number from 1 to 65535`,
			`5: apps[0].listen[1]: invalid address "127.0.0.1": missing port in address`,
			`6: apps[0].listen[2]: invalid address "bad host!:80": "bad host!" is neither an IP address nor a host name`,
		}},

		{"listen listed twice", `
apps:
  - name: a
    listen: [":8080", ":08080"]
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].listen[1]: :8080 is listed twice (first at line 3)`}},

		{"listen empty list", `
apps:
  - name: a
    listen: []
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].listen: empty`}},

		{"listen of wrong type", `
apps:
  - name: a
    listen: {addr: ":80"}
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].listen: expected a string or a list, got a mapping`}},

		{"backend without host, duplicate backend", `
apps:
  - name: a
    backends:
      static:
        - ":80"
        - 10.0.0.1:80
        - 10.0.0.1:0080
`, []string{
			`5: apps[0].backends.static[0]: invalid address ":80": missing host`,
			`7: apps[0].backends.static[2]: backend 10.0.0.1:80 is listed twice (first at line 6)`,
		}},

		{"enums", `
log:
  level: verbose
  format: xml
apps:
  - name: a
    balance: fastest
    backends: {static: ["h:1"]}
`, []string{
			`2: log.level: invalid value "verbose"; valid: trace, debug, info, warn, error`,
			`3: log.format: invalid value "xml"; valid: text, json`,
			`6: apps[0].balance: invalid value "fastest"; valid: least_loaded, round_robin, p2c`,
		}},

		{"yes is not a bool", `
log:
  access: yes
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: log.access: expected true or false, got the string "yes"`}},

		{"bool is not a string", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    reject: {body: true}
`, []string{`4: apps[0].reject.body: expected a string, got the boolean true (quote it if you mean the text)`}},

		{"null where a value is needed", `
apps:
  - name:
    backends: {static: ["h:1"]}
`, []string{`2: apps[0].name: expected a string, got nothing (null)`}},

		{"required name and backends", `
apps:
  - listen: 127.0.0.1:8080
  - name: b
    listen: 127.0.0.1:8081
`, []string{
			`2: apps[0]: name is required`,
			`2: apps[0]: backends is required`,
			`3: apps[1]: backends is required`,
		}},

		{"bad names", `
apps:
  - name: Shop
    backends: {static: ["h:1"]}
  - name: "a very long name that goes on and on and on and on and on and on"
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
`, []string{
			`2: apps[0].name: name "Shop": use only a-z, 0-9, '_' and '-'`,
			`4: apps[1].name: name "a very long name that goes on and on and on and on and on and on" is longer than 63 characters`,
		}},

		{"duplicate app names", `
apps:
  - name: a
    backends: {static: ["h:1"]}
  - name: a
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
`, []string{`4: apps[1]: duplicate app name "a" (first at line 2)`}},

		{"duplicate key", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    name: b
`, []string{`4: apps[0]: duplicate key "name" (first at line 2)`}},

		{"backends: both, neither, empty", `
apps:
  - name: a
    listen: 127.0.0.1:8081
    backends:
      static: ["h:1"]
      dns: {name: svc.local, port: 80}
  - name: b
    listen: 127.0.0.1:8082
    backends: {}
  - name: c
    listen: 127.0.0.1:8083
    backends: {static: []}
`, []string{
			`4: apps[0].backends: give static or dns, not both`,
			`9: apps[1].backends: give static: [host:port, ...] or dns: {name, port}`,
			`12: apps[2].backends.static: at least one backend address is required`,
		}},

		{"dns problems", `
apps:
  - name: a
    listen: 127.0.0.1:8081
    backends:
      dns: {name: svc.local, interval: 0s}
  - name: b
    listen: 127.0.0.1:8082
    backends:
      dns: {name: 10.0.0.1, port: 70000}
  - name: c
    listen: 127.0.0.1:8083
    backends:
      dns: {name: svc.local, port: 80, server: ns.local:53}
  - name: d
    listen: 127.0.0.1:8084
    backends:
      dns: {name: svc.local, port: 80, server: 127.0.0.1}
`, []string{
			`5: apps[0].backends.dns: port is required`,
			`5: apps[0].backends.dns.interval: 0s must be positive`,
			`9: apps[1].backends.dns.name: dns name "10.0.0.1" is an IP address; use static backends`,
			`9: apps[1].backends.dns.port: 70000 is out of range; must be from 1 to 65535`,
			`13: apps[2].backends.dns.server: dns server "ns.local:53": want an IP address and a port`,
			`17: apps[3].backends.dns.server: invalid address "127.0.0.1": missing port`,
		}},

		{"tls: missing file, missing key", `
apps:
  - name: a
    listen: 127.0.0.1:8443
    tls:
      cert: $DIR/nope.pem
      key: $KEY_A
    backends: {static: ["h:1"]}
  - name: b
    listen: 127.0.0.1:8444
    tls: {cert: $CERT_A}
    backends: {static: ["h:1"]}
`, []string{
			`5: apps[0].tls.cert: stat $DIR/nope.pem: no such file or directory`,
			`10: apps[1].tls: key is required`,
		}},

		{"tls: mismatched pair", `
apps:
  - name: a
    tls:
      cert: $CERT_A
      key: $KEY_B
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].tls: cannot load the certificate and key as a pair: tls: private key does not match public key`}},

		{"tls: a directory is not a file", `
apps:
  - name: a
    tls: {cert: $DIR, key: $KEY_A}
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].tls.cert: $DIR is not a regular file`}},

		{"h2c: with tls, mixed on an address, not a boolean", `
apps:
  - name: a
    tls: {cert: $CERT_A, key: $KEY_A}
    h2c: true
    backends: {static: ["h:1"]}
  - name: b
    listen: 127.0.0.1:8081
    hosts: [b.example]
    h2c: true
    backends: {static: ["h:1"]}
  - name: c
    listen: 127.0.0.1:8081
    hosts: [c.example]
    backends: {static: ["h:1"]}
  - name: d
    listen: 127.0.0.1:8082
    h2c: yes please
    backends: {static: ["h:1"]}
`, []string{
			`4: apps[0].h2c: h2c is HTTP/2 on a plain listener, but tls is given (line 3); a TLS listener offers h2 by ALPN`,
			`12: app "c": h2c false on 127.0.0.1:8081, but app "b" (line 6) has h2c true; apps sharing a listen address must agree on h2c`,
			`17: apps[3].h2c: expected true or false`,
		}},

		{"backends: tls and protocol", `
apps:
  - name: a
    backends:
      static: ["h:1"]
      tls: {ca: $KEY_A, cert: $CERT_A, server_name: "bad name"}
  - name: b
    listen: 127.0.0.1:8081
    backends:
      static: ["h:1"]
      protocol: h2
  - name: c
    listen: 127.0.0.1:8082
    backends:
      static: ["h:1"]
      protocol: h2c
      tls: {insecure_skip_verify: true, ca: $CERT_A, key: $KEY_A}
  - name: d
    listen: 127.0.0.1:8083
    backends:
      static: ["h:1"]
      protocol: http2
      tls: {cert: $CERT_A, key: $KEY_B, bogus: 1}
`, []string{
			`5: apps[0].backends.tls.ca: $KEY_A: no PEM certificate in it`,
			`5: apps[0].backends.tls.server_name: invalid dns name "bad name"`,
			`5: apps[0].backends.tls.cert: a client certificate needs its key too`,
			`10: apps[1].backends.protocol: h2 is HTTP/2 over TLS: give backends.tls too`,
			`15: apps[2].backends.protocol: h2c is HTTP/2 without TLS, but backends.tls is given (line 16)`,
			`16: apps[2].backends.tls.ca: ca is not used with insecure_skip_verify: true (line 16)`,
			`16: apps[2].backends.tls.key: a client key needs its cert too`,
			`21: apps[3].backends.protocol: invalid value "http2"; valid: http1, h2c, h2`,
			`22: apps[3].backends.tls: unknown key "bogus"`,
			`22: apps[3].backends.tls.cert: cannot load the client certificate and key as a pair`,
		}},

		{"trusted proxies", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    trusted_proxies:
      - 10.0.0.1/8
      - proxy.local
      - 10.0.0.0/8
      - 192.168.0.1
      - 192.168.0.1/32
`, []string{
			`5: apps[0].trusted_proxies[0]: CIDR "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?`,
			`6: apps[0].trusted_proxies[1]: invalid IP or CIDR "proxy.local"`,
			`9: apps[0].trusted_proxies[4]: 192.168.0.1/32 is listed twice (first at line 8)`,
		}},

		{"hosts", `
apps:
  - name: a
    hosts:
      - "*.example.com"
      - Example.com:8080
      - example.COM
      - http://x.com/
      - "bad_host!"
    backends: {static: ["h:1"]}
`, []string{
			`4: apps[0].hosts[0]: host "*.example.com": wildcards are not supported`,
			`6: apps[0].hosts[2]: host "example.com" is listed twice (first at line 5)`,
			`7: apps[0].hosts[3]: host "http://x.com/": give a host name, not a URL`,
			`8: apps[0].hosts[4]: invalid host "bad_host!"`,
		}},

		{"hosts of wrong type", `
apps:
  - name: a
    hosts: example.com
    backends: {static: ["h:1"]}
`, []string{`3: apps[0].hosts: expected a list, got the string "example.com"`}},

		{"two default apps on one listener", `
apps:
  - name: a
    listen: ":8080"
    backends: {static: ["h:1"]}
  - name: b
    listen: ":8080"
    backends: {static: ["h:1"]}
`, []string{`6: app "b": both app "a" (line 2) and app "b" have no hosts on :8080; only one app per listen address can be the default`}},

		{"same host on two apps of one listener", `
apps:
  - name: a
    listen: ":8080"
    hosts: [shop.example.com]
    backends: {static: ["h:1"]}
  - name: b
    listen: [":8080", ":9090"]
    hosts: [api.example.com, SHOP.example.com]
    backends: {static: ["h:1"]}
`, []string{`8: app "b": host "shop.example.com" is already served on :8080 by app "a" (line 4)`}},

		{"same host on two listeners is fine, inconsistent tls is not", `
apps:
  - name: a
    listen: ":8443"
    hosts: [a.com]
    tls: {cert: $CERT_A, key: $KEY_A}
    backends: {static: ["h:1"]}
  - name: b
    listen: ":8443"
    hosts: [b.com]
    tls: {cert: $CERT_B, key: $KEY_B}
    backends: {static: ["h:1"]}
  - name: c
    listen: ":8443"
    hosts: [c.com]
    backends: {static: ["h:1"]}
  - name: d
    listen: ":9443"
    hosts: [a.com]
    backends: {static: ["h:1"]}
`, []string{
			`10: app "b": tls cert "$CERT_B" on :8443, but app "a" (line 2) has tls cert "$CERT_A"`,
			`13: app "c": no tls on :8443, but app "a" (line 2) has tls cert "$CERT_A"`,
		}},

		{"two apps would both take the default listen", `
apps:
  - name: a
    hosts: [a.com]
    backends: {static: ["h:1"]}
  - name: b
    hosts: [b.com]
    backends: {static: ["h:1"]}
`, []string{`5: app "b": listen is required: app "a" (line 2) already takes the default address 127.0.0.1:8080`}},

		{"wildcard overlaps a specific address", `
apps:
  - name: a
    backends: {static: ["h:1"]}
  - name: b
    listen: 0.0.0.0:8080
    backends: {static: ["h:1"]}
`, []string{`5: listen 0.0.0.0:8080 overlaps 127.0.0.1:8080 (line 2)`}},

		{"admin on an app address", `
admin:
  listen: ":8080"
apps:
  - name: a
    listen: 127.0.0.1:8080
    backends: {static: ["h:1"]}
`, []string{`2: admin.listen :8080 conflicts with the app listen address 127.0.0.1:8080 (line 5)`}},

		{"admin empty", `
admin:
  listen: ""
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`2: admin.listen: empty address; write off to disable`}},

		{"admin allowed_hosts", `
admin:
  allowed_hosts:
    - metrics.internal
    - "*.internal"
    - http://x/
    - METRICS.internal:9901
    - ""
    - "*"
    - true
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{
			`4: admin.allowed_hosts[1]: host "*.internal": wildcards are not supported; list each host, or write "*" alone to accept every host`,
			`5: admin.allowed_hosts[2]: host "http://x/": give a host name, not a URL`,
			`6: admin.allowed_hosts[3]: host "metrics.internal" is listed twice (first at line 3)`,
			`7: admin.allowed_hosts[4]: empty host`,
			`8: admin.allowed_hosts[5]: "*" accepts every host; list nothing else with it`,
			`9: admin.allowed_hosts[6]: expected a string, got`,
		}},
		{"admin allowed_hosts not a list", `
admin: {allowed_hosts: {a: 1}}
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`1: admin.allowed_hosts: expected a list, got a mapping`}},

		{"reject", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    reject:
      status: 500
      retry_after: 1500ms
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    reject:
      status: "503"
      retry_after: 500ms
      grpc_status: 14
`, []string{
			`5: apps[0].reject.status: status 500 is not allowed; use 503 or 429`,
			`6: apps[0].reject.retry_after: 1.5s is not whole seconds`,
			`11: apps[1].reject.status: expected an integer, got the string "503"`,
			`12: apps[1].reject.retry_after: 500ms is too short; must be at least 1s`,
			`13: apps[1].reject.grpc_status: invalid value "14"; valid: unavailable, resource_exhausted`,
		}},

		{"admission", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    admission:
      mode: fast
      batch: {queue_cap: 0, parallelism: 0.5, all_or_nothing: "no"}
      threshold:
        recompute: 0s
        capacity: -1
      swich: {}
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    admission:
      batch: {parallelism: 5000, implied_queue: 1}
      threshold: {capacity: .inf}
`, []string{
			`5: apps[0].admission.mode: invalid value "fast"; valid: auto, batch, threshold, adaptive, off`,
			`6: apps[0].admission.batch.queue_cap: 0 is out of range; must be from 1 to 1048576`,
			`6: apps[0].admission.batch.parallelism: 0.5 is out of range; use 0 to learn it, or a value from 1 to 4096`,
			`6: apps[0].admission.batch.all_or_nothing: expected true or false, got the string "no"`,
			`8: apps[0].admission.threshold.recompute: 0s must be positive`,
			`9: apps[0].admission.threshold.capacity: -1 is out of range; must be at least 0`,
			`10: apps[0].admission: unknown key "swich" (did you mean "switch"?)`,
			`15: apps[1].admission.batch.parallelism: 5000 is out of range; use 0 to learn it, or a value from 1 to 4096`,
			`15: apps[1].admission.batch.implied_queue: expected true or false, got the integer 1`,
			`16: apps[1].admission.threshold.capacity: expected a finite number, got .inf`,
		}},

		{"mode switch", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    admission:
      switch:
        cpu_high: 1.5
        cpu_low: 0
        hold: 0s
        revert_after: 30
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    admission:
      switch:
        cpu_high: 0.5
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    admission:
      switch: {cpu_high: 0.7, cpu_low: 0.7}
`, []string{
			`6: apps[0].admission.switch.cpu_high: 1.5 is out of range; must be greater than 0 and at most 1`,
			`7: apps[0].admission.switch.cpu_low: 0 is out of range; must be greater than 0 and less than 1`,
			`8: apps[0].admission.switch.hold: 0s must be positive`,
			`9: apps[0].admission.switch.revert_after: duration "30" has no unit`,
			`15: apps[1].admission.switch.cpu_high: cpu_low 0.6 must be below cpu_high 0.5`,
			`20: apps[2].admission.switch.cpu_low: cpu_low 0.7 must be below cpu_high 0.7`,
		}},

		{"adaptive", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    admission:
      mode: adaptive
      adaptive:
        nreq: 0
        timeout: 0s
        alpha: 1
        err_i: 0
        adj_d: 1
        adj_i: 0
        c_i: 0.1
        rate_min: 0
        adj_lo: 0.5
        lc_thresh: 0
        burst: 10
        nerq: 5
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    admission:
      adaptive:
        err_d: -0.6
        rate_min: 10
        rate_max: 5
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    admission:
      adaptive: {initial_rate: 6000}
      fallback: {miss_windows: 0, no_timing_share: 1.5, return_ratio: 0, return_windows: 99999, enable: true}
  - name: d
    listen: 127.0.0.1:8083
    backends: {static: ["h:1"]}
    admission: {adaptive: {rule: fast}}
`, []string{
			`7: apps[0].admission.adaptive.nreq: 0 is out of range`,
			`8: apps[0].admission.adaptive.timeout: 0s`,
			`9: apps[0].admission.adaptive.alpha: 1 is out of range; must be greater than 0 and less than 1`,
			`10: apps[0].admission.adaptive.err_i: 0 is out of range`,
			`11: apps[0].admission.adaptive.adj_d: 1 is out of range`,
			`12: apps[0].admission.adaptive.adj_i: 0 is out of range`,
			`13: apps[0].admission.adaptive.c_i: 0.1 is out of range`,
			`14: apps[0].admission.adaptive.rate_min: 0 is out of range`,
			`15: apps[0].admission.adaptive.adj_lo: 0.5 is out of range`,
			`16: apps[0].admission.adaptive.lc_thresh: 0 is out of range`,
			`17: apps[0].admission.adaptive.burst: duration "10" has no unit`,
			`18: apps[0].admission.adaptive: unknown key "nerq"`,
			`24: apps[1].admission.adaptive.err_d: err_i -0.5 must be below err_d -0.6`,
			`26: apps[1].admission.adaptive.rate_max: rate_max 5 is below rate_min 10`,
			`31: apps[2].admission.adaptive.initial_rate: 6000 is outside [rate_min 0.05, rate_max 5000]; 0 means rate_max`,
			`32: apps[2].admission.fallback: unknown key "enable" (did you mean "enabled"?)`,
			`32: apps[2].admission.fallback.miss_windows: 0 is out of range`,
			`32: apps[2].admission.fallback.no_timing_share: 1.5 is out of range`,
			`32: apps[2].admission.fallback.return_windows: 99999 is out of range`,
			`32: apps[2].admission.fallback.return_ratio: 0 is out of range`,
			`36: apps[3].admission.adaptive.rule: invalid value "fast"; valid: scaled, paper`,
		}},

		{"degradation", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    degradation: {enabled: yes, header: "bad name", load: 1}
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    degradation:
      header: x_forwarded_for
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    request_id_header: X-Load
    degradation: {enabled: true, header: x_load}
`, []string{
			`4: apps[0].degradation: unknown key "load"`,
			`4: apps[0].degradation.enabled:`,
			`4: apps[0].degradation.header: invalid header name "bad name"`,
			`9: apps[1].degradation.header: X_forwarded_for is a header sentry manages itself`,
			`14: apps[2].degradation.header: X_load is also the request_id_header`,
		}},

		{"reserve", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    admission:
      reserve: maybe
      reserve_floor: 1
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    admission: {reserve_floor: -0.1}
`, []string{
			`5: apps[0].admission.reserve: expected true or false, got the string "maybe"`,
			`6: apps[0].admission.reserve_floor: 1 is out of range; must be at least 0 and less than 1`,
			`10: apps[1].admission.reserve_floor: -0.1 is out of range; must be at least 0 and less than 1`,
		}},

		{"server timing", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    server_timing: {strip: 1, keep: [cpu]}
`, []string{
			`4: apps[0].server_timing.strip: expected true or false, got the integer 1`,
			`4: apps[0].server_timing: unknown key "keep"`,
		}},

		{"sla values", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    sla:
      percentile: 100
      revenue: -0.5
      target: 1s
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    sla: {percentile: "95", revenue: .nan}
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    sla: {percentile: 0, targets: []}
`, []string{
			`5: apps[0].sla.percentile: 100 is out of range; must be greater than 0 and less than 100`,
			`6: apps[0].sla.revenue: -0.5 is out of range; must be at least 0`,
			`7: apps[0].sla: unknown key "target" (did you mean "targets"?)`,
			`11: apps[1].sla.percentile: expected a number, got the string "95"`,
			`11: apps[1].sla.revenue: expected a finite number, got .nan`,
			`15: apps[2].sla.percentile: 0 is out of range; must be greater than 0 and less than 100`,
			`15: apps[2].sla.targets: empty; give at least one band`,
		}},

		{"sla targets", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    sla:
      targets:
        - {below: 1000, target: 1s}
        - {below: 1000, target: 2s}
        - {target: 3s}
        - {below: 10000}
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    sla:
      targets:
        - target: 1s
        - below: 0
          target: 0s
        - {target: 2s, below: 5}
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    sla:
      targets: {below: 1, target: 1s}
`, []string{
			`7: apps[0].sla.targets[1].below: below 1000 is not above the previous band's 1000 (line 6); list bands by increasing rate`,
			`8: apps[0].sla.targets[2]: below is required (the arrival rate in req/s under which this band applies); only the last band leaves it out`,
			`9: apps[0].sla.targets[3]: target is required`,
			`9: apps[0].sla.targets[3].below: leave below out of the last band`,
			`15: apps[1].sla.targets[0]: below is required`,
			`16: apps[1].sla.targets[1].below: 0 is out of range; must be greater than 0`,
			`17: apps[1].sla.targets[1].target: 0s must be positive`,
			`18: apps[1].sla.targets[2].below: leave below out of the last band`,
			`23: apps[2].sla.targets: expected a list of {below: REQ/S, target: DURATION}, got a mapping`,
		}},

		{"estimator", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    estimator:
      half_life: 0s
      queue_half_life: -5s
      max_keys: 0
      alpha: 0
      fit_alpha: 1
      rate_window: 1
      rate_smoothing: 0
      refresh: 1s
      probe_interval: -1s
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    estimator: {alpha: -1, max_keys: 1000000000}
`, []string{
			`5: apps[0].estimator.half_life: 0s must be positive`,
			`6: apps[0].estimator.queue_half_life: -5s must be positive`,
			`7: apps[0].estimator.max_keys: 0 is out of range; must be from 1 to 100000000`,
			`8: apps[0].estimator.alpha: 0 is out of range; must be greater than 0 (to ignore io time, use a tiny value such as 1e-9)`,
			`9: apps[0].estimator.fit_alpha: expected true or false, got the integer 1`,
			`10: apps[0].estimator.rate_window: duration "1" has no unit`,
			`11: apps[0].estimator.rate_smoothing: 0s must be positive`,
			`12: apps[0].estimator: unknown key "refresh"`,
			`13: apps[0].estimator.probe_interval: -1s must be positive`,
			`17: apps[1].estimator.alpha: -1 is out of range; must be at least 0`,
			`17: apps[1].estimator.max_keys: 1000000000 is out of range; must be from 1 to 100000000`,
		}},

		{"estimator buckets", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    estimator:
      buckets:
        - 1ms
        - 4ms
        - 4ms
        - 2ms
        - 0s
        - 1
        - 1s
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    estimator: {buckets: []}
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    estimator: {buckets: 1ms}
`, []string{
			`8: apps[0].estimator.buckets[2]: 4ms is not above the previous edge 4ms (line 7); edges must increase`,
			`9: apps[0].estimator.buckets[3]: 2ms is not above the previous edge 4ms (line 7)`,
			`10: apps[0].estimator.buckets[4]: 0s must be positive`,
			`11: apps[0].estimator.buckets[5]: duration "1" has no unit`,
			`16: apps[1].estimator.buckets: empty; give at least one edge`,
			`20: apps[2].estimator.buckets: expected a list of durations, got the string "1ms"`,
		}},

		{"classes: the list", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes: []
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    classes: {name: gold}
  - name: c
    listen: 127.0.0.1:8082
    backends: {static: ["h:1"]}
    classes:
  - name: d
    listen: 127.0.0.1:8083
    backends: {static: ["h:1"]}
    classes: [gold]
`, []string{
			`4: apps[0].classes: empty; list at least one class, or leave classes out for one class "default"`,
			`8: apps[1].classes: expected a list of classes, got a mapping`,
			`12: apps[2].classes: empty; list at least one class`,
			`16: apps[3].classes[0]: expected a mapping, got the string "gold"`,
		}},

		{"classes: names, defaults, periods", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        period: -1s
        rules: [{path: /a}]
      - name: Silver
        rules: [{path: /b}]
      - name: gold
        default: true
      - period: 1s
      - name: bronze
        default: yes
        rules: [{path: /c}]
      - name: rest
        default: true
`, []string{
			`6: apps[0].classes[0].period: -1s must not be negative`,
			`8: apps[0].classes[1].name: name "Silver": use only a-z, 0-9, '_' and '-'`,
			`10: apps[0].classes[2].name: class name "gold" is used twice (first at line 5)`,
			`12: apps[0].classes[3]: name is required`,
			`14: apps[0].classes[4].default: expected true or false, got the string "yes"`,
			`17: apps[0].classes[5].default: class "rest" is marked default, but so is class "gold" (line 11); only one class may take unmatched requests`,
		}},

		{"classes: a class without rules", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
      - name: silver
        rules: []
      - name: bronze
        rules: [{path: /}]
  - name: b
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    classes:
      - name: gold
      - name: rest
        default: true
      - name: last
        rules: [{path: /}]
`, []string{
			`5: apps[0].classes[0]: class "gold" has no rules, so no request could reach it; give it rules, or make it the default class (the default class is "bronze", the last one, since none is marked default)`,
			`6: apps[0].classes[1]: class "silver" has no rules`,
			`14: apps[1].classes[0]: class "gold" has no rules, so no request could reach it; give it rules, or make it the default class (the default class is "rest" (line 16))`,
		}},

		{"classes: paths", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        rules:
          - path: /a
            path_prefix: /b
            path_regexp: ^/c
          - path: api/x
          - path_prefix: "/search?q="
          - path_glob: /static/[/*.css
          - path_glob: /a b/**
          - path_regexp: "^/item/[0-9+$"
          - path_regexp: ""
          - path: ""
          - path: [/a]
      - name: rest
`, []string{
			`8: apps[0].classes[0].rules[0].path_prefix: path is already given (line 7); a rule takes at most one of path, path_prefix, path_glob and path_regexp`,
			`9: apps[0].classes[0].rules[0].path_regexp: path is already given (line 7)`,
			`10: apps[0].classes[0].rules[1].path: "api/x" must start with /`,
			`11: apps[0].classes[0].rules[2].path_prefix: "/search?q=" has a query (?); paths are matched without the query string`,
			`12: apps[0].classes[0].rules[3].path_glob: "/static/[/*.css": syntax error in segment "["`,
			`13: apps[0].classes[0].rules[4].path_glob: "/a b/**" has a space, control character or #`,
			`14: apps[0].classes[0].rules[5].path_regexp: invalid regexp "^/item/[0-9+$": missing closing ]`,
			`15: apps[0].classes[0].rules[6].path_regexp: empty regexp`,
			`16: apps[0].classes[0].rules[7].path: empty path`,
			`17: apps[0].classes[0].rules[8].path: expected a string, got a list`,
		}},
		{"grpc conditions", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        rules:
          - {grpc_service: shop.Cart, grpc_method: "Add*"}
          - grpc_service: /shop.Cart/Add
          - grpc_method: "Get["
          - grpc_service: ""
          - {grpc_method: [Get]}
          - grpc_service: "a b"
      - name: rest
`, []string{
			`8: apps[0].classes[0].rules[1].grpc_service: "/shop.Cart/Add" has a '/'; give the service (pkg.Service) and the method apart, without slashes`,
			`9: apps[0].classes[0].rules[2].grpc_method: "Get[": syntax error in pattern`,
			`10: apps[0].classes[0].rules[3].grpc_service: empty name`,
			`11: apps[0].classes[0].rules[4].grpc_method: expected a string, got a list`,
			`12: apps[0].classes[0].rules[5].grpc_service: "a b" has a space or control character`,
		}},

		{"classes: methods, hosts, networks, key", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        rules:
          - methods: [GET, get, "G T", true]
          - methods: []
          - methods: GET
          - hosts: ["*.Example.com", "a.com:80", "x*.y", "*.", http://a.com/, a.com., a.COM, A.com]
          - networks: [10.0.0.0/8, 10.0.0.1/8, 10.0.0.0/8, host.local]
          - networks:
          - {key: /k}
          - {path: /, key: ""}
          - {}
          -
      - name: rest
`, []string{
			`7: apps[0].classes[0].rules[0].methods[1]: GET is listed twice (first at line 7)`,
			`7: apps[0].classes[0].rules[0].methods[2]: "G T" is not a method name`,
			`7: apps[0].classes[0].rules[0].methods[3]: expected a string, got the boolean true`,
			`8: apps[0].classes[0].rules[1].methods: empty list; give at least one entry, or leave methods out`,
			`9: apps[0].classes[0].rules[2].methods: expected a list, got the string "GET"`,
			`10: apps[0].classes[0].rules[3].hosts[1]: host "a.com:80": give the host without a port`,
			`10: apps[0].classes[0].rules[3].hosts[2]: host "x*.y": the only wildcard is a leading *.`,
			`10: apps[0].classes[0].rules[3].hosts[3]: host "*.": remove the trailing dot`,
			`10: apps[0].classes[0].rules[3].hosts[4]: host "http://a.com/": give a host name, not a URL`,
			`10: apps[0].classes[0].rules[3].hosts[5]: host "a.com.": remove the trailing dot`,
			`10: apps[0].classes[0].rules[3].hosts[7]: host "a.com" is listed twice (first at line 10)`,
			`11: apps[0].classes[0].rules[4].networks[1]: CIDR "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?`,
			`11: apps[0].classes[0].rules[4].networks[2]: 10.0.0.0/8 is listed twice (first at line 11)`,
			`11: apps[0].classes[0].rules[4].networks[3]: invalid IP or CIDR "host.local"`,
			`12: apps[0].classes[0].rules[5].networks: empty list; give at least one entry, or leave networks out`,
			`13: apps[0].classes[0].rules[6]: a rule needs at least one condition (path, path_prefix, path_glob, path_regexp, methods, hosts, headers, cookies, networks, grpc_service or grpc_method)`,
			`14: apps[0].classes[0].rules[7].key: empty key; leave key out to key requests by their path`,
			`15: apps[0].classes[0].rules[8]: a rule needs at least one condition`,
			`16: apps[0].classes[0].rules[9]: a rule needs at least one condition`,
		}},

		{"classes: headers and cookies", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        rules:
          - headers:
              - {name: X-Tier, value: gold}
              - {name: "X Tier"}
              - {value: gold}
              - {name: X-A, value: a, regexp: a}
              - {name: User-Agent, regexp: "bot("}
              - {name: X-B, value: ""}
              - {name: X-C, regexp: ""}
              - {name: X-D, valeu: d}
              - X-E
          - cookies:
              - {name: session}
              - {name: "a b"}
              - {value: premium}
              - {name: plan, value: ""}
          - headers: []
          - cookies: {name: session}
      - name: rest
`, []string{
			`9: apps[0].classes[0].rules[0].headers[1].name: invalid header name "X Tier"`,
			`10: apps[0].classes[0].rules[0].headers[2]: name is required (the header's name)`,
			`11: apps[0].classes[0].rules[0].headers[3]: give value or regexp, not both`,
			`12: apps[0].classes[0].rules[0].headers[4].regexp: invalid regexp "bot(": missing closing )`,
			`13: apps[0].classes[0].rules[0].headers[5].value: empty value; leave value out to require only that the header is present`,
			`14: apps[0].classes[0].rules[0].headers[6].regexp: empty regexp; leave regexp out`,
			`15: apps[0].classes[0].rules[0].headers[7]: unknown key "valeu" (known keys: name, regexp, value)`,
			`16: apps[0].classes[0].rules[0].headers[8]: expected a mapping, got the string "X-E"`,
			`19: apps[0].classes[0].rules[1].cookies[1].name: "a b" is not a cookie name`,
			`20: apps[0].classes[0].rules[1].cookies[2]: name is required (the cookie's name)`,
			`21: apps[0].classes[0].rules[1].cookies[3].value: empty value; leave value out to require only that the cookie is set`,
			`22: apps[0].classes[0].rules[2].headers: empty list; give at least one entry, or leave headers out`,
			`23: apps[0].classes[0].rules[3].cookies: expected a list of {name: ..., ...}, got a mapping`,
		}},

		{"classes: too many", "apps:\n  - name: a\n    backends: {static: [\"h:1\"]}\n    classes:\n" + strings.Repeat("      - {name: c, rules: [{path: /}]}\n", 65),
			[]string{`4: apps[0].classes: 65 classes; at most 64`}},

		{"classes and the other sections all report", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    classes:
      - name: gold
        rules: [{path: x}]
      - name: rest
    sla: {percentile: 101}
    estimator: {alpha: -1}
    admission: {mode: on}
`, []string{
			`6: apps[0].classes[0].rules[0].path: "x" must start with /`,
			`8: apps[0].sla.percentile: 101 is out of range`,
			`9: apps[0].estimator.alpha: -1 is out of range`,
			`10: apps[0].admission.mode: invalid value "on"`,
		}},

		{"integer and size ranges", `
server:
  max_conns: 99999999999999999999
  max_header_bytes: 100
apps:
  - name: a
    backends: {static: ["h:1"]}
    max_conns_per_backend: 0
    max_body_bytes: 10mb
`, []string{
			`2: server.max_conns: expected an integer, got the number 99999999999999999999`,
			`3: server.max_header_bytes: 100 bytes is out of range; must be from 1024 to 16777216`,
			`7: apps[0].max_conns_per_backend: 0 is out of range; must be from 1 to 1048576`,
			`8: apps[0].max_body_bytes: invalid size "10mb"`,
		}},

		{"request id header", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    request_id_header: X Request
`, []string{`4: apps[0].request_id_header: invalid header name "X Request"`}},

		{"active health", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    health:
      active:
        path: healthz
        interval: 1s
        timeout: 2s
        rise: 0
`, []string{
			`6: apps[0].health.active.path: path "healthz" must start with /`,
			`8: apps[0].health.active: timeout 2s is longer than interval 1s`,
			`9: apps[0].health.active.rise: 0 is out of range; must be from 1 to 1000`,
		}},

		{"passive health", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    health:
      passive: {failures: -1, cooldown: 0s}
`, []string{
			`5: apps[0].health.passive.failures: -1 is out of range; must be from 0 to 1000`,
			`5: apps[0].health.passive.cooldown: 0s must be positive`,
		}},

		{"apps of wrong type", `
apps: {name: a}
`, []string{`1: apps: expected a list of apps, got a mapping`}},

		{"app of wrong type", `
apps: [web]
`, []string{`1: apps[0]: expected a mapping, got the string "web"`}},

		{"no apps", `
apps: []
log: {level: info}
`, []string{`1: apps: at least one app is required`}},

		{"apps missing", `
log: {level: info}
`, []string{`1: apps is required`}},

		{"empty file", ``, []string{`1: the policy is empty`}},

		{"comments only", `
# nothing here
`, []string{`1: the policy is empty`}},

		{"root is a list", `
- name: a
`, []string{`1: expected a mapping, got a list`}},

		{"key that is not a word", `
? [a, b]
: c
apps: [{name: a, backends: {static: ["h:1"]}}]
`, []string{`1: keys must be plain words, got a list`}},

		{"syntax error", `
apps:
  - name: a
    backends: {static: ["h:1"]
`, []string{`3: invalid YAML: did not find expected ',' or '}'`}},

		{"tab indentation", "apps:\n\t- name: a\n", []string{`2: invalid YAML: found character that cannot start any token`}},

		{"second document", `
apps: [{name: a, backends: {static: ["h:1"]}}]
---
apps: []
`, []string{`3: a second YAML document`}},

		{"unknown alias", `
apps: [*web]
`, []string{`1: invalid YAML: unknown anchor 'web' referenced`}},

		{"merge of a non-mapping", `
apps:
  - <<: [1]
    name: a
    backends: {static: ["h:1"]}
`, []string{`2: apps[0]: merge (<<) needs a mapping or a list of mappings, got the integer 1`}},

		{"merge that includes itself", `
apps:
  - &app
    name: a
    backends: {static: ["h:1"]}
    <<: *app
`, []string{`5: apps[0]: merge (<<) includes itself`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := expand.Replace(strings.TrimPrefix(tc.src, "\n"))
			s, err := Parse("t.yaml", []byte(src))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if s != nil {
				t.Errorf("Parse returned a snapshot with its errors")
			}
			es := asErrors(t, err)
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = expand.Replace(w)
			}
			matchErrors(t, es, want)
			for _, e := range es {
				if e.File != "t.yaml" {
					t.Errorf("error %q has File %q, want t.yaml", e.Msg, e.File)
				}
			}
		})
	}
}

// TestThreeErrors is the acceptance case: a misspelt key, a bad duration and
// a bad address give exactly three FILE:LINE:COLUMN errors, in line order,
// and nothing that follows from them; the column is the key's for an
// unknown key, the value's for a bad value.
func TestThreeErrors(t *testing.T) {
	src := `apps:
  - name: shop
    listen: 127.0.0.1:99999
    backends:
      static: [10.0.0.1:80, 10.0.0.2:80]
    balanse: p2c
    timeouts:
      connect: 250
`
	_, err := Parse("/etc/sentry/policy.yaml", []byte(src))
	es := asErrors(t, err)
	if len(es) != 3 {
		t.Fatalf("got %d errors, want 3:\n%v", len(es), err)
	}
	want := []string{
		`/etc/sentry/policy.yaml:3:13: apps[0].listen: invalid address "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`,
		`/etc/sentry/policy.yaml:6:5: apps[0]: unknown key "balanse" (did you mean "balance"?)`,
		`/etc/sentry/policy.yaml:8:16: apps[0].timeouts.connect: duration "250" has no unit; use a unit, e.g. 250ms or 250s`,
	}
	for i, w := range want {
		if got := es[i].Error(); got != w {
			t.Errorf("error %d:\n got %s\nwant %s", i, got, w)
		}
	}
	if got, w := err.Error(), strings.Join(want, "\n"); got != w {
		t.Errorf("Errors.Error():\n%s\nwant:\n%s", got, w)
	}
}

// TestErrorsSorted checks that errors come out in line order even when
// found out of order (cross-checks run after decoding).
func TestErrorsSorted(t *testing.T) {
	src := `apps:
  - name: a
    backends: {static: ["h:1"]}
  - name: a
    listen: 127.0.0.1:8081
    backends: {static: ["h:1"]}
    timeouts: {connect: 5}
log: {level: loud}
`
	_, err := Parse("t.yaml", []byte(src))
	es := asErrors(t, err)
	if len(es) != 3 {
		t.Fatalf("got %d errors, want 3:\n%v", len(es), err)
	}
	for i := 1; i < len(es); i++ {
		if es[i-1].Line > es[i].Line {
			t.Errorf("errors not sorted by line:\n%v", err)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "p.yaml", Line: 3, Column: 5, Msg: "bad"}, "p.yaml:3:5: bad"},
		{Error{File: "p.yaml", Line: 3, Msg: "bad"}, "p.yaml:3: bad"},
		{Error{File: "<flags>", Msg: "-backend: bad"}, "<flags>: -backend: bad"},
		{Error{Line: 7, Column: 1, Msg: "bad"}, "7:1: bad"},
		{Error{Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
	es := Errors{{File: "f", Line: 1, Column: 3, Msg: "a"}, {File: "f", Line: 2, Msg: "b"}}
	if got := es.Error(); got != "f:1:3: a\nf:2: b" {
		t.Errorf("Errors.Error() = %q", got)
	}
}

// TestBillionLaughs: merge keys that double at every level must not
// expand: each merged mapping is walked once.
func TestBillionLaughs(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-l0: &l0 {name: a}\n")
	for i := 1; i <= 60; i++ {
		b.WriteString("x-l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " {<<: [*l" + strconv.Itoa(i-1) + ", *l" + strconv.Itoa(i-1) + "]}\n")
	}
	b.WriteString("apps:\n  - <<: *l60\n    backends: {static: [\"h:1\"]}\n")
	s, err := parse("t.yaml", []byte(b.String()), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if s.Apps[0].Name != "a" {
		t.Errorf("name = %q", s.Apps[0].Name)
	}
}

// TestNodeBudget: aliases that make the walk larger than the budget stop
// it with one error instead of running on.
func TestNodeBudget(t *testing.T) {
	src := "x-app: &app {name: a, hosts: [a, b, c, d, e, f, g, h, i, j], backends: {static: [\"h:1\"]}}\napps: [" +
		strings.Repeat("*app, ", 200) + "*app]\n"
	_, err := parse("t.yaml", []byte(src), 1000)
	if err == nil || err.Error() != "t.yaml: policy is too large or too deeply aliased; stopped reading" {
		t.Fatalf("want only a too-large error, got %v", err)
	}
	// The same document is fine with the real budget.
	_, err = Parse("t.yaml", []byte(src))
	if err == nil || strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "duplicate app name") {
		t.Fatalf("want only duplicate names, got %v", err)
	}
}

func TestPeriodMustLeaveTimeWithinSLA(t *testing.T) {
	_, err := Parse("p.yaml", []byte(`apps:
  - name: a
    backends: {static: [127.0.0.1:9000]}
    classes:
      - name: gold
        period: 100ms
        rules: [{path_prefix: /buy/}]
      - name: bronze
        period: 500ms
        default: true
    sla:
      targets: [{below: 100, target: 500ms}, {target: 2s}]
`))
	if err == nil {
		t.Fatal("a period equal to the smallest SLA target was accepted")
	}
	if !strings.Contains(err.Error(), "p.yaml:8:") {
		t.Errorf("error lacks the class line: %v", err)
	}
	if !strings.Contains(err.Error(), "classes[1].period: 500ms leaves no time") {
		t.Errorf("unexpected error: %v", err)
	}
}

// TestBackendTLSSNIWithoutVerification: server_name goes with
// insecure_skip_verify (it is the SNI a TLS router or a multi-name
// backend needs even when nothing is verified); ca does not.
func TestBackendTLSSNIWithoutVerification(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    backends:
      static: ["10.0.0.1:443"]
      tls: {insecure_skip_verify: true, server_name: backend.internal}
`)
	if bt := s.Apps[0].Backends.TLS; bt == nil || !bt.InsecureSkipVerify || bt.ServerName != "backend.internal" {
		t.Fatalf("backends.tls = %+v", bt)
	}
}
