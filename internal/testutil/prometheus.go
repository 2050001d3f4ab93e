package testutil

import (
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// StartPrometheus runs the Prometheus server bin with config over the TSDB
// folder data (which may hold backfilled blocks) on a free loopback port
// until the test ends, and returns its URL once /-/ready answers. Its log
// is shown when the test fails.
func StartPrometheus(t testing.TB, bin, config, data string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf := &LockedBuffer{}
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+data, "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logf.String())
		}
	})
	u := "http://" + addr
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	Eventually(t, time.Minute, "Prometheus to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready:\n%s", logf.String())
		default:
		}
		resp, err := client.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return u
}
