package collbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/nccl"
)

// The rendezvous wire format. Every message is a frame:
//
//	magic   4 bytes  "GCRV"
//	version 1 byte   rvVersion
//	type    1 byte   msgHello … msgReport
//	length  4 bytes  big-endian payload length, at most maxPayload
//	payload length bytes
//
// A rank sends hello (JSON: nranks, rank, what it runs on); rank 0
// answers welcome (the 128-byte ncclUniqueId) once every rank has said
// hello, or reject (a UTF-8 reason). After the benchmark each rank sends
// report (JSON: its timings and wrong-element counts).
const (
	rvMagic    = "GCRV"
	rvVersion  = 1
	headerLen  = 10
	maxPayload = 1 << 20
)

type msgType uint8

const (
	msgHello   msgType = 1
	msgWelcome msgType = 2
	msgReject  msgType = 3
	msgReport  msgType = 4
)

// message is one frame.
type message struct {
	Type    msgType
	Payload []byte
}

// errProtocol marks a frame that is not ours or is malformed.
var errProtocol = errors.New("not a gpuchaos rendezvous message")

func writeMessage(w io.Writer, m message) error {
	if len(m.Payload) > maxPayload {
		return fmt.Errorf("message of %d bytes is over the %d-byte limit", len(m.Payload), maxPayload)
	}
	buf := make([]byte, headerLen, headerLen+len(m.Payload))
	copy(buf, rvMagic)
	buf[4] = rvVersion
	buf[5] = byte(m.Type)
	binary.BigEndian.PutUint32(buf[6:], uint32(len(m.Payload)))
	_, err := w.Write(append(buf, m.Payload...))
	return err
}

// readMessage reads one frame. A frame with another magic, version or type,
// or a length over maxPayload, is an error wrapping errProtocol; the
// payload is not read then.
func readMessage(r io.Reader) (message, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return message{}, err
	}
	if string(h[:4]) != rvMagic {
		return message{}, fmt.Errorf("%w: magic %q", errProtocol, h[:4])
	}
	if h[4] != rvVersion {
		return message{}, fmt.Errorf("%w: protocol version %d, this gpuchaos speaks %d", errProtocol, h[4], rvVersion)
	}
	t := msgType(h[5])
	if t < msgHello || t > msgReport {
		return message{}, fmt.Errorf("%w: message type %d", errProtocol, t)
	}
	n := binary.BigEndian.Uint32(h[6:])
	if n > maxPayload {
		return message{}, fmt.Errorf("%w: payload of %d bytes is over the %d-byte limit", errProtocol, n, maxPayload)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return message{}, fmt.Errorf("read %d-byte payload: %w", n, err)
	}
	return message{Type: t, Payload: p}, nil
}

// RankInfo says where a rank runs.
type RankInfo struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	// GPU is the GPU's index in PCI bus order (nvidia-smi's index).
	GPU         int    `json:"gpu"`
	CUDAOrdinal int    `json:"cuda_ordinal"`
	Name        string `json:"name"`
	PCIBusID    string `json:"pci_bus_id"`
}

// hello is the payload of msgHello.
type hello struct {
	NRanks int      `json:"nranks"`
	Rank   int      `json:"rank"`
	Info   RankInfo `json:"info"`
}

// decodeHello parses and checks the shape of a hello payload.
func decodeHello(p []byte) (hello, error) {
	var h hello
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return hello{}, fmt.Errorf("%w: hello: %v", errProtocol, err)
	}
	if h.NRanks < 2 || h.Rank < 0 {
		return hello{}, fmt.Errorf("%w: hello with nranks %d, rank %d", errProtocol, h.NRanks, h.Rank)
	}
	return h, nil
}

// RankReport is what a rank measured, sent to rank 0 at the end.
type RankReport struct {
	Rank    int          `json:"rank"`
	Results []RankResult `json:"results"`
	// Error is why the rank stopped early, if it did.
	Error string `json:"error,omitempty"`
}

// RankResult is one rank's measurement of one operation at one size.
type RankResult struct {
	Op    Op     `json:"op"`
	Bytes uint64 `json:"bytes"`
	// Seconds is the GPU time of one timed iteration on this rank.
	Seconds float64 `json:"seconds"`
	// Wrong counts wrong output elements in the checks before and after
	// the timed loop.
	Wrong uint64 `json:"wrong"`
}

func decodeReport(p []byte) (RankReport, error) {
	var r RankReport
	if err := json.Unmarshal(p, &r); err != nil {
		return RankReport{}, fmt.Errorf("%w: report: %v", errProtocol, err)
	}
	return r, nil
}

// Server is rank 0's side of the rendezvous: it admits ranks 1…n−1,
// hands them the communicator id, and gathers their reports. Its methods
// are called from one goroutine, in order: Admit, Gather, Close.
type Server struct {
	ln      net.Listener
	nranks  int
	timeout time.Duration
	conns   []net.Conn // by rank; [0] is unused
}

// Listen opens rank 0's rendezvous on addr (HOST:PORT; port 0 picks one)
// for a clique of nranks. timeout bounds each wait: for every rank to
// arrive in Admit, and for the id to reach each.
func Listen(addr string, nranks int, timeout time.Duration) (*Server, error) {
	if nranks < 2 {
		return nil, fmt.Errorf("rendezvous needs at least 2 ranks, not %d", nranks)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("rendezvous timeout %s: must be above 0", timeout)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: listen on %s: %w", addr, err)
	}
	return &Server{ln: ln, nranks: nranks, timeout: timeout, conns: make([]net.Conn, nranks)}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// arrival is a connection that sent a hello (or failed to).
type arrival struct {
	conn net.Conn
	h    hello
	err  error
}

// Admit waits until every rank 1…n−1 has said hello, then sends each the
// id and returns what each runs on, by rank ([0] is empty). A hello with
// the wrong nranks, a rank out of range or a rank already taken is
// rejected with the reason, and the wait goes on. When the timeout passes
// or ctx ends first, every waiting rank is told why and the error names
// the ranks that never arrived. Admit stops listening when it returns.
func (s *Server) Admit(ctx context.Context, id nccl.UniqueID) ([]RankInfo, error) {
	deadline := time.Now().Add(s.timeout)
	arrivals := make(chan arrival)
	done := make(chan struct{})
	var (
		mu      sync.Mutex
		pending = map[net.Conn]bool{}
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return // the listener was closed
			}
			mu.Lock()
			pending[c] = true
			mu.Unlock()
			wg.Go(func() {
				_ = c.SetDeadline(deadline)
				a := arrival{conn: c}
				m, err := readMessage(c)
				switch {
				case err != nil:
					a.err = err
				case m.Type != msgHello:
					a.err = fmt.Errorf("%w: expected hello, got message type %d", errProtocol, m.Type)
				default:
					a.h, a.err = decodeHello(m.Payload)
				}
				select {
				case arrivals <- a:
				case <-done:
				}
			})
		}
	})
	defer func() {
		close(done)
		_ = s.ln.Close()
		mu.Lock()
		for c := range pending {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	infos := make([]RankInfo, s.nranks)
	joined := 1
	for joined < s.nranks {
		var cause error
		select {
		case a := <-arrivals:
			mu.Lock()
			delete(pending, a.conn)
			mu.Unlock()
			if reason := s.vet(a); reason != "" {
				_ = a.conn.SetWriteDeadline(time.Now().Add(time.Second))
				_ = writeMessage(a.conn, message{Type: msgReject, Payload: []byte(reason)})
				_ = a.conn.Close()
				continue
			}
			s.conns[a.h.Rank] = a.conn
			infos[a.h.Rank] = a.h.Info
			infos[a.h.Rank].Rank = a.h.Rank
			joined++
			continue
		case <-timer.C:
			cause = fmt.Errorf("did not join within %s", s.timeout)
		case <-ctx.Done():
			cause = fmt.Errorf("had not joined when the wait was cancelled: %w", context.Cause(ctx))
		}
		missing := s.missing()
		err := fmt.Errorf("rendezvous on %s: %s of %d %s", s.Addr(), rankList(missing), s.nranks, cause)
		s.rejectAll(fmt.Sprintf("rank 0 gave up: %s of %d %s", rankList(missing), s.nranks, cause))
		return nil, err
	}
	for r := 1; r < s.nranks; r++ {
		_ = s.conns[r].SetWriteDeadline(time.Now().Add(s.timeout))
		if err := writeMessage(s.conns[r], message{Type: msgWelcome, Payload: id[:]}); err != nil {
			s.rejectAll("rank 0 could not reach every rank")
			return nil, fmt.Errorf("rendezvous: send the id to rank %d: %w", r, err)
		}
	}
	return infos, nil
}

// vet returns why an arrival cannot join, or "".
func (s *Server) vet(a arrival) string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.h.NRanks != s.nranks:
		return fmt.Sprintf("rank 0 runs %d ranks but rank %d was started with --nranks %d", s.nranks, a.h.Rank, a.h.NRanks)
	case a.h.Rank == 0:
		return "rank 0 is the one serving this rendezvous; another process also claims rank 0"
	case a.h.Rank >= s.nranks:
		return fmt.Sprintf("rank %d is out of range: the ranks are 0 to %d", a.h.Rank, s.nranks-1)
	case s.conns[a.h.Rank] != nil:
		return fmt.Sprintf("rank %d has already joined from %s", a.h.Rank, s.conns[a.h.Rank].RemoteAddr())
	}
	return ""
}

func (s *Server) missing() []int {
	var out []int
	for r := 1; r < s.nranks; r++ {
		if s.conns[r] == nil {
			out = append(out, r)
		}
	}
	return out
}

// rejectAll tells every admitted rank why the run is off and drops it.
func (s *Server) rejectAll(reason string) {
	for r, c := range s.conns {
		if c == nil {
			continue
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = writeMessage(c, message{Type: msgReject, Payload: []byte(reason)})
		_ = c.Close()
		s.conns[r] = nil
	}
}

// rankList writes "rank 3" or "ranks 1, 2 and 5".
func rankList(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	switch len(parts) {
	case 0:
		return "no rank"
	case 1:
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// Gather reads one report from every admitted rank and returns them by
// rank ([0] is empty). Start it right after Admit, beside rank 0's own
// benchmark: it waits for as long as ctx lives, so the caller bounds it
// (the ranks finish together, since their last collective synchronises
// them, so a short grace after rank 0's own end is enough). As soon as a
// rank hangs up without a report, or reports an error, failed is called
// (from Gather's goroutines, at most once per rank) so that rank 0 can
// stop waiting on collectives that will never complete. A rank that sends
// no report is named in the error; the others' reports are still
// returned.
func (s *Server) Gather(ctx context.Context, failed func(rank int, err error)) ([]RankReport, error) {
	reports := make([]RankReport, s.nranks)
	errs := make([]error, s.nranks)
	var wg sync.WaitGroup
	for r := 1; r < s.nranks; r++ {
		c := s.conns[r]
		if c == nil {
			errs[r] = fmt.Errorf("rank %d: not admitted", r)
			continue
		}
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Time{})
			stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
			defer stop()
			m, err := readMessage(c)
			switch {
			case err != nil && ctx.Err() != nil:
				errs[r] = fmt.Errorf("rank %d sent no report: %w", r, context.Cause(ctx))
			case err != nil:
				errs[r] = fmt.Errorf("rank %d hung up without a report: %w", r, err)
			case m.Type != msgReport:
				errs[r] = fmt.Errorf("rank %d: %w: expected a report, got message type %d", r, errProtocol, m.Type)
			default:
				rep, err := decodeReport(m.Payload)
				if err == nil && rep.Rank != r {
					err = fmt.Errorf("report names rank %d", rep.Rank)
				}
				if err != nil {
					errs[r] = fmt.Errorf("rank %d: %w", r, err)
					break
				}
				reports[r] = rep
				if rep.Error != "" && failed != nil {
					failed(r, errors.New(rep.Error))
				}
				return
			}
			if failed != nil {
				failed(r, errs[r])
			}
		})
	}
	wg.Wait()
	return reports, errors.Join(errs...)
}

// Abort tells every admitted rank that the run is off, with the reason;
// their Watch reports it. Safe to call while Gather runs.
func (s *Server) Abort(reason string) {
	for _, c := range s.conns {
		if c == nil {
			continue
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = writeMessage(c, message{Type: msgReject, Payload: []byte(reason)})
	}
}

// Close drops every connection and the listener.
func (s *Server) Close() error {
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	for r, c := range s.conns {
		if c != nil {
			_ = c.Close()
			s.conns[r] = nil
		}
	}
	return err
}

// Client is a rank's side of the rendezvous with rank 0.
type Client struct {
	conn     net.Conn
	rank     int
	timeout  time.Duration
	reported atomic.Bool // the report has been sent
}

// dialRetry is the pause between attempts to reach rank 0, which may not
// be listening yet.
const dialRetry = 200 * time.Millisecond

// Join connects to rank 0 at addr, retrying until the timeout (rank 0 may
// start later), says hello as rank of nranks, and waits for the
// communicator id. Rank 0 answers once every rank has arrived, so the
// wait for the answer may take up to its own timeout; Join allows the
// timeout again plus a few seconds for it. A refusal comes back as an
// error with rank 0's reason.
func Join(ctx context.Context, addr string, nranks, rank int, info RankInfo, timeout time.Duration) (*Client, nccl.UniqueID, error) {
	if rank < 1 || rank >= nranks {
		return nil, nccl.UniqueID{}, fmt.Errorf("rendezvous: rank %d cannot join a clique of %d (ranks 1 to %d join; rank 0 serves)", rank, nranks, nranks-1)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		conn    net.Conn
		lastErr error
		d       net.Dialer
	)
	for {
		c, err := d.DialContext(dctx, "tcp", addr)
		if err == nil {
			conn = c
			break
		}
		lastErr = err
		select {
		case <-dctx.Done():
			if ctx.Err() != nil {
				return nil, nccl.UniqueID{}, fmt.Errorf("rendezvous: reach rank 0 at %s: %w", addr, context.Cause(ctx))
			}
			return nil, nccl.UniqueID{}, fmt.Errorf("rendezvous: rank 0 at %s did not answer within %s: %w", addr, timeout, lastErr)
		case <-time.After(dialRetry):
		}
	}
	cl := &Client{conn: conn, rank: rank, timeout: timeout}
	id, err := cl.hello(ctx, nranks, info)
	if err != nil {
		_ = conn.Close()
		return nil, nccl.UniqueID{}, err
	}
	return cl, id, nil
}

func (cl *Client) hello(ctx context.Context, nranks int, info RankInfo) (nccl.UniqueID, error) {
	var id nccl.UniqueID
	info.Rank = cl.rank
	p, err := json.Marshal(hello{NRanks: nranks, Rank: cl.rank, Info: info})
	if err != nil {
		return id, err
	}
	_ = cl.conn.SetDeadline(time.Now().Add(cl.timeout + 5*time.Second))
	stop := context.AfterFunc(ctx, func() { _ = cl.conn.SetDeadline(time.Now()) })
	defer stop()
	if err := writeMessage(cl.conn, message{Type: msgHello, Payload: p}); err != nil {
		return id, fmt.Errorf("rendezvous: say hello to rank 0 at %s: %w", cl.conn.RemoteAddr(), err)
	}
	m, err := readMessage(cl.conn)
	switch {
	case err != nil && ctx.Err() != nil:
		return id, fmt.Errorf("rendezvous: wait for rank 0: %w", context.Cause(ctx))
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		// A reset is a hang-up too: closing a socket with our hello
		// still unread makes the kernel send RST instead of FIN.
		return id, fmt.Errorf("rendezvous: rank 0 at %s hung up before sending the communicator id", cl.conn.RemoteAddr())
	case err != nil:
		return id, fmt.Errorf("rendezvous: wait for rank 0 at %s: %w", cl.conn.RemoteAddr(), err)
	case m.Type == msgReject:
		return id, fmt.Errorf("rendezvous: rank 0 refused rank %d: %s", cl.rank, m.Payload)
	case m.Type != msgWelcome || len(m.Payload) != nccl.UniqueIDBytes:
		return id, fmt.Errorf("rendezvous: %w: expected the %d-byte id, got type %d with %d bytes", errProtocol, nccl.UniqueIDBytes, m.Type, len(m.Payload))
	}
	copy(id[:], m.Payload)
	return id, nil
}

// SendReport sends the rank's results to rank 0.
func (cl *Client) SendReport(ctx context.Context, r RankReport) error {
	r.Rank = cl.rank
	p, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_ = cl.conn.SetWriteDeadline(time.Now().Add(cl.timeout))
	stop := context.AfterFunc(ctx, func() { _ = cl.conn.SetWriteDeadline(time.Now()) })
	defer stop()
	cl.reported.Store(true)
	if err := writeMessage(cl.conn, message{Type: msgReport, Payload: p}); err != nil {
		return fmt.Errorf("rendezvous: send results to rank 0: %w", err)
	}
	return nil
}

// Watch calls aborted with rank 0's reason if rank 0 calls the run off
// (Server.Abort) or goes away before this rank has sent its report. It
// returns at once; the watching ends with Close. Call it once, after
// Join.
func (cl *Client) Watch(aborted func(err error)) {
	go func() {
		m, err := readMessage(cl.conn)
		if cl.reported.Load() {
			return // the run is over: rank 0 hanging up is expected now
		}
		switch {
		case err == nil && m.Type == msgReject:
			aborted(fmt.Errorf("rank 0 called the run off: %s", m.Payload))
		case err == nil:
			aborted(fmt.Errorf("rendezvous: %w: unexpected message type %d from rank 0", errProtocol, m.Type))
		case errors.Is(err, net.ErrClosed):
			// Close was called.
		default:
			aborted(fmt.Errorf("lost rank 0: %w", err))
		}
	}()
}

// Close hangs up.
func (cl *Client) Close() error { return cl.conn.Close() }
