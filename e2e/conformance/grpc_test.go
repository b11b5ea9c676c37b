package conformance

import (
	"debug/buildinfo"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const grpcModule = "google.golang.org/grpc"

// interopCases are the test cases of grpc-go's interop client
// (interop/client/client.go, --test_case) that its interop server
// supports, all run through sentry. The ORCA cases need the client's test
// load-balancing policy, given to every case by service config as grpc-go's
// own interop_test.sh does.
var interopCases = []string{
	"empty_unary",
	"large_unary",
	"client_streaming",
	"server_streaming",
	"ping_pong",
	"empty_stream",
	"timeout_on_sleeping_server",
	"cancel_after_begin",
	"cancel_after_first_response",
	"status_code_and_message",
	"special_status_message",
	"custom_metadata",
	"unimplemented_method",
	"unimplemented_service",
	"orca_per_rpc",
	"orca_oob",
	"rpc_soak",
	"channel_soak",
}

// interopSkipped are the client's other cases and why none can run here
// (grpc-go's interop_test.sh leaves out the same ones).
var interopSkipped = map[string]string{
	"compute_engine_creds":               "needs a GCE metadata server's OAuth token (runs on GCP only)",
	"service_account_creds":              "needs a Google service account key and Google's token endpoint",
	"jwt_token_creds":                    "needs a Google service account key",
	"per_rpc_creds":                      "needs a Google service account key and Google's OAuth endpoint",
	"oauth2_auth_token":                  "needs a Google service account key and Google's OAuth endpoint",
	"google_default_credentials":         "needs Google default credentials (GCP)",
	"compute_engine_channel_credentials": "needs GCE's compute engine credentials (GCP)",
	"pick_first_unary":                   "needs several server addresses resolved for one channel; the interop server is one process behind one sentry address",
}

func grpcInstall(version string) string {
	return fmt.Sprintf("GOBIN=DIR1 go install %[1]s/interop/client@%[2]s && GOBIN=DIR2 go install %[1]s/interop/server@%[2]s "+
		"(separate directories: both are named after their package), then set SENTRY_GRPC_INTEROP_CLIENT=DIR1/client and SENTRY_GRPC_INTEROP_SERVER=DIR2/server", grpcModule, version)
}

// goModGRPC is the grpc-go version and module directory go.mod requires.
func goModGRPC(t *testing.T) (version, dir string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", grpcModule)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", grpcModule, err)
	}
	version, dir, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	return version, dir
}

// interopTool finds the interop client or server named by env, built from
// the grpc-go version go.mod requires.
func interopTool(t *testing.T, env, version string) string {
	t.Helper()
	bin := tool(t, env, grpcInstall(version))
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		missing(t, fmt.Sprintf("%s=%s: not a Go binary: %v", env, bin, err), grpcInstall(version))
	}
	if bi.Main.Path != grpcModule || bi.Main.Version != version {
		missing(t, fmt.Sprintf("%s=%s is built from %s %s, not %s %s (go.mod's)", env, bin, bi.Main.Path, bi.Main.Version, grpcModule, version), grpcInstall(version))
	}
	return bin
}

// TestInteropCasesListed: every case of the interop client of go.mod's
// grpc-go version is either run (interopCases) or skipped with a reason
// (interopSkipped), so a grpc-go upgrade that adds a case cannot leave it
// out unseen. Read from the client's source in the module cache.
func TestInteropCasesListed(t *testing.T) {
	version, dir := goModGRPC(t)
	src := filepath.Join(dir, "interop", "client", "client.go")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("%s %s's source not in the module cache (go mod download): %v", grpcModule, version, err)
	}
	i := strings.Index(string(b), "switch *testCase {")
	if i < 0 {
		t.Fatalf("%s: no switch on *testCase", src)
	}
	known := map[string]bool{}
	for _, c := range interopCases {
		known[c] = true
	}
	for c := range interopSkipped {
		known[c] = true
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^\tcase "([a-z_0-9]+)":`).FindAllStringSubmatch(string(b[i:]), -1) {
		n++
		if !known[m[1]] {
			t.Errorf("the interop client of %s %s has case %q, neither run nor skipped here", grpcModule, version, m[1])
		}
		delete(known, m[1])
	}
	if n == 0 {
		t.Fatalf("%s: no cases found", src)
	}
	for c := range known {
		t.Errorf("case %q is listed here but the interop client of %s %s has no such case", c, grpcModule, version)
	}
}

// TestGRPCInterop runs grpc-go's own interop client through sentry to
// grpc-go's own interop server, every case the server supports, with
// sentry in front over h2 (TLS, on both drivers) and h2c, and relaying to
// the server over h2c (backends.protocol: h2c). Every case must pass.
func TestGRPCInterop(t *testing.T) {
	version, _ := goModGRPC(t)
	client := interopTool(t, "SENTRY_GRPC_INTEROP_CLIENT", version)
	server := interopTool(t, "SENTRY_GRPC_INTEROP_SERVER", version)
	t.Logf("interop client and server: %s %s", grpcModule, version)
	be := startInteropServer(t, server)
	for _, f := range fronts {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{backendProtocol: "h2c"})
			s.checkDriver(t)
			before := s.metric(t, "sentry_requests_total", be)
			for _, c := range interopCases {
				t.Run(c, func(t *testing.T) {
					args := []string{
						"--server_host=127.0.0.1", "--server_port=" + s.port(), "--test_case=" + c,
						`--service_config_json={"loadBalancingConfig": [{"test_backend_metrics_load_balancer": {}}]}`,
						// The soak cases' bounds per call (1 s) and in all
						// (10 s) are latency targets for a quiet machine;
						// here they prove only that every call succeeds.
						"--soak_per_iteration_max_acceptable_latency_ms=10000", "--soak_overall_timeout_seconds=90",
					}
					if f.tls() {
						args = append(args, "--use_tls", "--use_test_ca", "--ca_file="+s.ca)
					}
					stdout, stderr, err := run(t, 2*time.Minute, "", client, args...)
					if err != nil {
						t.Errorf("%s over %s: %v\nstdout:\n%s\nstderr:\n%s", c, f, err, tail(stdout, 4000), tail(stderr, 4000))
					}
				})
			}
			if got := s.metric(t, "sentry_requests_total", be) - before; got < float64(len(interopCases)) {
				t.Errorf("sentry relayed %v requests to the interop server for %d cases: the cases did not go through sentry", got, len(interopCases))
			}
		})
	}
}

// startInteropServer runs the interop server on a free port and waits
// until it accepts. (It listens on every interface: it has no flag for
// the host.)
func startInteropServer(t *testing.T, bin string) string {
	t.Helper()
	addr := freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	out := newSyncBuffer()
	cmd := exec.Command(bin, "--port="+port)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("interop server output:\n%s", tail(out.String(), 4000))
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("interop server did not accept on %s within 15s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
