package collbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuchaos/gpuchaos/internal/node/nccl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testID() nccl.UniqueID {
	var id nccl.UniqueID
	for i := range id {
		id[i] = byte(i*13 + 5)
	}
	return id
}

// joinResult is what one rank's Join gave.
type joinResult struct {
	rank int
	cl   *Client
	id   nccl.UniqueID
	err  error
}

// joinAll starts one Join per rank in ranks, each claiming nranks[i].
func joinAll(ctx context.Context, addr string, ranks, nranks []int, timeout time.Duration) []joinResult {
	out := make([]joinResult, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			cl, id, err := Join(ctx, addr, nranks[i], r, RankInfo{Host: fmt.Sprintf("host%d", r), GPU: r}, timeout)
			out[i] = joinResult{r, cl, id, err}
		})
	}
	wg.Wait()
	return out
}

func closeAll(rs []joinResult) {
	for _, r := range rs {
		if r.cl != nil {
			_ = r.cl.Close()
		}
	}
}

// TestRendezvousHappyPath: four ranks meet, get the same id, and their
// reports come back to rank 0 by rank.
func TestRendezvousHappyPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := Listen("127.0.0.1:0", 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	var infos []RankInfo
	var admitErr error
	done := make(chan struct{})
	go func() { infos, admitErr = srv.Admit(ctx, testID()); close(done) }()
	joins := joinAll(ctx, srv.Addr(), []int{3, 1, 2}, []int{4, 4, 4}, 10*time.Second)
	defer closeAll(joins)
	<-done
	if admitErr != nil {
		t.Fatal(admitErr)
	}
	for _, j := range joins {
		if j.err != nil {
			t.Fatalf("rank %d: %v", j.rank, j.err)
		}
		if j.id != testID() {
			t.Errorf("rank %d got a different id", j.rank)
		}
		if infos[j.rank].Rank != j.rank || infos[j.rank].Host != fmt.Sprintf("host%d", j.rank) {
			t.Errorf("rank %d's info arrived as %+v", j.rank, infos[j.rank])
		}
	}
	gdone := make(chan struct{})
	var reports []RankReport
	var gatherErr error
	go func() { reports, gatherErr = srv.Gather(ctx, nil); close(gdone) }()
	for _, j := range joins {
		rep := RankReport{Results: []RankResult{{Op: AllReduce, Bytes: 1 << 20, Seconds: float64(j.rank) * 1e-3, Wrong: uint64(j.rank)}}}
		if err := j.cl.SendReport(ctx, rep); err != nil {
			t.Fatal(err)
		}
	}
	<-gdone
	if gatherErr != nil {
		t.Fatal(gatherErr)
	}
	for r := 1; r < 4; r++ {
		if reports[r].Rank != r || len(reports[r].Results) != 1 || reports[r].Results[0].Wrong != uint64(r) {
			t.Errorf("report of rank %d = %+v", r, reports[r])
		}
	}
}

// TestRendezvousRefusals: a rank that is wrong in some way is refused
// with the reason, and the wait goes on for the right one.
func TestRendezvousRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		bad       []int // rank, nranks of the bad joiner
		wantClErr string
	}{
		{"wrong nranks", []int{1, 3}, "rank 0 runs 2 ranks but rank 1 was started with --nranks 3"},
		{"rank out of range", []int{5, 2}, ""}, // refused by Join itself
		{"second rank 0", []int{0, 2}, ""},     // likewise
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			srv, err := Listen("127.0.0.1:0", 2, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = srv.Close() }()
			done := make(chan error, 1)
			go func() { _, err := srv.Admit(ctx, testID()); done <- err }()
			bad := joinAll(ctx, srv.Addr(), []int{tc.bad[0]}, []int{tc.bad[1]}, 5*time.Second)
			closeAll(bad)
			if bad[0].err == nil {
				t.Fatal("the bad rank joined")
			}
			if tc.wantClErr != "" && !strings.Contains(bad[0].err.Error(), tc.wantClErr) {
				t.Errorf("bad rank's error %q lacks %q", bad[0].err, tc.wantClErr)
			}
			good := joinAll(ctx, srv.Addr(), []int{1}, []int{2}, 5*time.Second)
			defer closeAll(good)
			if good[0].err != nil || good[0].id != testID() {
				t.Fatalf("the right rank 1 after the refusal: %v", good[0].err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRendezvousDuplicateRank: the second process claiming a rank is
// refused, naming the first one's address; the first keeps its place.
func TestRendezvousDuplicateRank(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := Listen("127.0.0.1:0", 3, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	done := make(chan error, 1)
	go func() { _, err := srv.Admit(ctx, testID()); done <- err }()
	// The first rank 1 speaks the protocol by hand, so the test knows
	// its hello went out first.
	first, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }()
	p, _ := json.Marshal(hello{NRanks: 3, Rank: 1})
	if err := writeMessage(first, message{Type: msgHello, Payload: p}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // Admit reads and registers it
	dup := joinAll(ctx, srv.Addr(), []int{1}, []int{3}, 5*time.Second)
	closeAll(dup)
	want := "rank 1 has already joined from " + first.LocalAddr().String()
	if dup[0].err == nil || !strings.Contains(dup[0].err.Error(), want) {
		t.Fatalf("duplicate rank 1: err = %v; want %q", dup[0].err, want)
	}
	r2 := joinAll(ctx, srv.Addr(), []int{2}, []int{3}, 5*time.Second)
	defer closeAll(r2)
	if r2[0].err != nil {
		t.Fatal(r2[0].err)
	}
	_ = first.SetDeadline(time.Now().Add(5 * time.Second))
	m, err := readMessage(first)
	if err != nil || m.Type != msgWelcome || !bytes.Equal(m.Payload, func() []byte { id := testID(); return id[:] }()) {
		t.Fatalf("the first rank 1 got %+v, %v; want the id", m, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRendezvousMissingRank: rank 2 of 4 never comes. Rank 0 fails within
// its timeout naming it; the ranks that did come are told why.
func TestRendezvousMissingRank(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const timeout = 600 * time.Millisecond
	srv, err := Listen("127.0.0.1:0", 4, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := srv.Admit(ctx, testID()); done <- err }()
	joins := joinAll(ctx, srv.Addr(), []int{1, 3}, []int{4, 4}, 5*time.Second)
	defer closeAll(joins)
	err = <-done
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Errorf("Admit took %s; timeout %s", took, timeout)
	}
	if err == nil || !strings.Contains(err.Error(), "rank 2 of 4 did not join within 600ms") {
		t.Fatalf("Admit error = %v; want rank 2 named", err)
	}
	for _, j := range joins {
		if j.err == nil || !strings.Contains(j.err.Error(), "rank 0 gave up: rank 2 of 4 did not join") {
			t.Errorf("rank %d: err = %v; want rank 0's reason", j.rank, j.err)
		}
	}
}

func TestRendezvousNoneArrive(t *testing.T) {
	t.Parallel()
	srv, err := Listen("127.0.0.1:0", 4, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	_, err = srv.Admit(t.Context(), testID())
	if err == nil || !strings.Contains(err.Error(), "ranks 1, 2 and 3 of 4 did not join") {
		t.Fatalf("Admit error = %v", err)
	}
}

// TestRendezvousRankZeroAbsent: nobody listens; Join retries, then fails
// naming the address and the timeout.
func TestRendezvousRankZeroAbsent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a port nobody listens on
	start := time.Now()
	_, _, err = Join(t.Context(), addr, 2, 1, RankInfo{}, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "rank 0 at "+addr+" did not answer within 500ms") {
		t.Fatalf("Join error = %v", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Errorf("Join gave up after %s; want about 500ms of retries", took)
	}
}

// TestRendezvousRankZeroSilent: something listens but never answers.
func TestRendezvousRankZeroSilent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(300 * time.Millisecond)
			_ = c.Close() // hangs up without a word
		}
	})
	_, _, err = Join(t.Context(), ln.Addr().String(), 2, 1, RankInfo{}, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "hung up before sending the communicator id") {
		t.Fatalf("Join error = %v", err)
	}
}

// TestRendezvousLateRankZero: a rank that starts first waits for rank 0.
func TestRendezvousLateRankZero(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	res := make(chan joinResult, 1)
	go func() { res <- joinAll(t.Context(), addr, []int{1}, []int{2}, 5*time.Second)[0] }()
	time.Sleep(500 * time.Millisecond)
	srv, err := Listen(addr, 2, 5*time.Second)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer func() { _ = srv.Close() }()
	if _, err := srv.Admit(t.Context(), testID()); err != nil {
		t.Fatal(err)
	}
	j := <-res
	defer closeAll([]joinResult{j})
	if j.err != nil || j.id != testID() {
		t.Fatalf("late rank 0: %v", j.err)
	}
}

// TestRendezvousFailures: a rank that hangs up mid-run is reported to
// rank 0 at once through the failed callback, and rank 0 calling the run
// off reaches the other ranks' Watch.
func TestRendezvousFailures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := Listen("127.0.0.1:0", 3, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	done := make(chan error, 1)
	go func() { _, err := srv.Admit(ctx, testID()); done <- err }()
	joins := joinAll(ctx, srv.Addr(), []int{1, 2}, []int{3, 3}, 5*time.Second)
	defer closeAll(joins)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	watched := make(chan error, 1)
	joins[1].cl.Watch(func(err error) { watched <- err })

	failedRank := make(chan int, 2)
	gdone := make(chan error, 1)
	go func() {
		_, err := srv.Gather(ctx, func(rank int, _ error) { failedRank <- rank })
		gdone <- err
	}()
	_ = joins[0].cl.Close() // rank 1 dies without a report
	select {
	case r := <-failedRank:
		if r != 1 {
			t.Errorf("failed callback for rank %d; want 1", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no failed callback for a rank that hung up")
	}
	srv.Abort("rank 1 failed")
	select {
	case err := <-watched:
		if err == nil || !strings.Contains(err.Error(), "rank 0 called the run off: rank 1 failed") {
			t.Errorf("Watch got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 2's Watch heard nothing")
	}
	// Rank 2 still reports (with its error); Gather names rank 1 only.
	if err := joins[1].cl.SendReport(ctx, RankReport{Error: "aborted"}); err != nil {
		t.Fatal(err)
	}
	err = <-gdone
	if err == nil || !strings.Contains(err.Error(), "rank 1 hung up without a report") || strings.Contains(err.Error(), "rank 2") {
		t.Errorf("Gather error = %v", err)
	}
	if r := <-failedRank; r != 2 {
		t.Errorf("a report with an error must call failed for rank 2, got %d", r)
	}
}

// TestGatherCancelled: Gather ends when its context does, naming the
// ranks that had not reported.
func TestGatherCancelled(t *testing.T) {
	t.Parallel()
	srv, err := Listen("127.0.0.1:0", 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	done := make(chan error, 1)
	go func() { _, err := srv.Admit(t.Context(), testID()); done <- err }()
	joins := joinAll(t.Context(), srv.Addr(), []int{1}, []int{2}, 5*time.Second)
	defer closeAll(joins)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("grace over")) })
	_, err = srv.Gather(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 1 sent no report: grace over") {
		t.Fatalf("Gather error = %v", err)
	}
}

func TestListenAndJoinArguments(t *testing.T) {
	t.Parallel()
	if _, err := Listen("127.0.0.1:0", 1, time.Second); err == nil {
		t.Error("Listen with 1 rank succeeded")
	}
	if _, err := Listen("127.0.0.1:0", 2, 0); err == nil {
		t.Error("Listen with no timeout succeeded")
	}
	if _, err := Listen("256.0.0.1:0", 2, time.Second); err == nil {
		t.Error("Listen on a bad address succeeded")
	}
	if _, _, err := Join(t.Context(), "127.0.0.1:1", 2, 0, RankInfo{}, time.Second); err == nil || !strings.Contains(err.Error(), "rank 0 serves") {
		t.Errorf("Join as rank 0: %v", err)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []message{
		{Type: msgHello, Payload: []byte(`{"nranks":2,"rank":1,"info":{"rank":1,"host":"a","gpu":0,"cuda_ordinal":0,"name":"","pci_bus_id":""}}`)},
		{Type: msgWelcome, Payload: bytes.Repeat([]byte{7}, 128)},
		{Type: msgReject, Payload: nil},
		{Type: msgReport, Payload: []byte(`{}`)},
	} {
		var b bytes.Buffer
		if err := writeMessage(&b, m); err != nil {
			t.Fatal(err)
		}
		got, err := readMessage(&b)
		if err != nil || got.Type != m.Type || !bytes.Equal(got.Payload, m.Payload) && len(m.Payload) > 0 {
			t.Errorf("round trip of type %d: %+v, %v", m.Type, got, err)
		}
	}
	bad := []struct {
		name string
		in   []byte
	}{
		{"http", []byte("GET / HTTP/1.1\r\n\r\n")},
		{"version 2", []byte("GCRV\x02\x01\x00\x00\x00\x00")},
		{"type 9", []byte("GCRV\x01\x09\x00\x00\x00\x00")},
		{"huge", []byte("GCRV\x01\x01\x7f\xff\xff\xff")},
	}
	for _, tc := range bad {
		if _, err := readMessage(bytes.NewReader(tc.in)); !errors.Is(err, errProtocol) {
			t.Errorf("%s: err = %v; want errProtocol", tc.name, err)
		}
	}
	if err := writeMessage(&bytes.Buffer{}, message{Type: msgReport, Payload: make([]byte, maxPayload+1)}); err == nil {
		t.Error("an oversized message was written")
	}
	for _, p := range []string{`{"nranks":1,"rank":0}`, `{"nranks":2,"rank":-1}`, `{"nranks":2,"rank":1,"extra":1}`, `[]`} {
		if _, err := decodeHello([]byte(p)); !errors.Is(err, errProtocol) {
			t.Errorf("decodeHello(%s) = %v; want errProtocol", p, err)
		}
	}
}

// FuzzReadMessage: the decoder never panics, never accepts more than the
// limit, and what it accepts writes back to the same bytes.
func FuzzReadMessage(f *testing.F) {
	var b bytes.Buffer
	_ = writeMessage(&b, message{Type: msgHello, Payload: []byte(`{"nranks":4,"rank":2,"info":{}}`)})
	f.Add(b.Bytes())
	f.Add([]byte("GCRV\x01\x02\x00\x00\x00\x80" + strings.Repeat("x", 128)))
	f.Add([]byte("GCRV\x01\x04\x00\x00\x00\x02{}"))
	f.Add([]byte("GCRV"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		m, err := readMessage(r)
		if err != nil {
			return
		}
		if len(m.Payload) > maxPayload {
			t.Fatalf("accepted a %d-byte payload", len(m.Payload))
		}
		var out bytes.Buffer
		if err := writeMessage(&out, m); err != nil {
			t.Fatal(err)
		}
		consumed := len(data) - r.Len()
		if !bytes.Equal(out.Bytes(), data[:consumed]) {
			t.Fatalf("re-encoding differs: % x vs % x", out.Bytes(), data[:consumed])
		}
		if m.Type == msgHello {
			if h, err := decodeHello(m.Payload); err == nil && (h.NRanks < 2 || h.Rank < 0) {
				t.Fatalf("decodeHello accepted %+v", h)
			}
		}
		if m.Type == msgReport {
			_, _ = decodeReport(m.Payload)
		}
	})
}
