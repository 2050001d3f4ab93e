package testutil

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// PrometheusBin is where Debian's package (scripts/setup-prometheus)
// installs the server.
const PrometheusBin = "/usr/bin/prometheus"

// NeedPrometheus fails the test without the server: `make test` installs
// it, and a skipped end-to-end check would leave CI green unchecked.
func NeedPrometheus(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(PrometheusBin); err != nil {
		tb.Fatalf("%s: %v; this test needs the Prometheus server: run scripts/setup-prometheus (as root) to install it from Debian's packages", PrometheusBin, err)
	}
}

// StartPrometheus runs the server with config, keeping its TSDB in data,
// on a free loopback port until the test ends, and returns its URL once
// /-/ready answers (within the given time). Its log goes to
// prometheus.log beside config and is printed if the test failed.
func StartPrometheus(tb testing.TB, config, data string, within time.Duration) string {
	tb.Helper()
	NeedPrometheus(tb)
	addr := FreeAddr(tb)
	logPath := filepath.Join(filepath.Dir(config), "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(PrometheusBin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--log.level=info")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		tb.Fatalf("start %s: %v", PrometheusBin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	printLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if tb.Failed() {
			tb.Logf("prometheus log:\n%s", printLog())
		}
	})
	url := "http://" + addr
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	Eventually(tb, within, "Prometheus to be ready", func() bool {
		select {
		case <-exited:
			tb.Fatalf("prometheus exited before it was ready:\n%s", printLog())
		default:
		}
		resp, err := client.Get(url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
