package promapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds one query when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// maxResponseBytes caps what one answer may take: an instant query an
// expectation makes returns a few series, not a whole TSDB.
const maxResponseBytes = 64 << 20

// Options configure New.
type Options struct {
	// URL is the server's base URL, such as http://127.0.0.1:9090; a path
	// is kept, for a server behind --web.route-prefix or a proxy.
	URL string
	// Client sends the requests; nil means http.DefaultClient. Queries are
	// bounded by Timeout whatever the client's own settings.
	Client *http.Client
	// Timeout bounds each query; zero means DefaultTimeout.
	Timeout time.Duration
}

// Client queries one Prometheus server. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	hc      *http.Client
	timeout time.Duration
}

// New checks the URL and returns a client; it does not contact the server.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("prometheus url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("prometheus url %q: want http:// or https:// and a host", opts.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("prometheus url %q: want the server's base URL, without a query or fragment", opts.URL)
	}
	c := &Client{base: u, hc: opts.Client, timeout: opts.Timeout}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return c, nil
}

// URL returns the server's base URL with any password masked.
func (c *Client) URL() string { return c.base.Redacted() }

// Sample is one element of a query result.
type Sample struct {
	// Labels are the element's labels, __name__ included when the result
	// kept it.
	Labels map[string]string
	Value  float64
}

// Error is what the server answered when it refused a query: its error
// type (bad_data, execution, timeout, canceled, unavailable, internal) and
// message, with the HTTP status.
type Error struct {
	Status  int
	Type    string
	Message string
}

// Error formats the server's answer as Prometheus words it.
func (e *Error) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return e.Type + ": " + e.Message
}

// response is the API's JSON envelope.
type response struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorElem struct {
	Metric map[string]string  `json:"metric"`
	Value  [2]json.RawMessage `json:"value"`
}

// Query evaluates an instant query at the server's current time. A vector
// result gives one sample per element; a scalar gives one sample without
// labels. Range vectors and strings are errors: a probe needs values at one
// instant. Errors name the server and the query, and wrap *Error when the
// server refused the query.
func (c *Client) Query(ctx context.Context, query string) ([]Sample, error) {
	out, err := c.query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: query %s: %w", c.URL(), query, err)
	}
	return out, nil
}

func (c *Client) query(ctx context.Context, query string) ([]Sample, error) {
	d, err := c.post(ctx, "api/v1/query", url.Values{"query": {query}})
	if err != nil {
		return nil, err
	}
	return decodeResult(d)
}

// QueryAt evaluates an instant query at ts, as a rule evaluation at ts
// does; results are as Query's.
func (c *Client) QueryAt(ctx context.Context, query string, ts time.Time) ([]Sample, error) {
	d, err := c.post(ctx, "api/v1/query", url.Values{"query": {query}, "time": {apiTime(ts)}})
	if err == nil {
		var out []Sample
		if out, err = decodeResult(d); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("prometheus %s: query %s at %s: %w", c.URL(), query, ts.UTC().Format(time.RFC3339), err)
}

// Series is one element of a range query's result.
type Series struct {
	Labels map[string]string
	Points []Point
}

// Point is one value of a range query's result series.
type Point struct {
	// T is the evaluation timestamp, in milliseconds since the epoch.
	T int64
	V float64
}

// QueryRange evaluates query at start, start+step, … up to end, as
// /api/v1/query_range does: each step's values are those of the instant
// query at that time. Errors are as Query's.
func (c *Client) QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]Series, error) {
	form := url.Values{"query": {query}, "start": {apiTime(start)}, "end": {apiTime(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	d, err := c.post(ctx, "api/v1/query_range", form)
	if err == nil {
		var out []Series
		if out, err = decodeMatrix(d); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("prometheus %s: query_range %s from %s to %s: %w", c.URL(), query, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), err)
}

// apiTime writes t as the API's Unix seconds with milliseconds.
func apiTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// post sends one form to an API endpoint and returns the answer's data.
func (c *Client) post(ctx context.Context, path string, form url.Values) (queryData, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.JoinPath(path).String(), strings.NewReader(form.Encode()))
	if err != nil {
		return queryData{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		// The transport's error already names the method and URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			return queryData{}, ue.Err
		}
		return queryData{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return queryData{}, fmt.Errorf("read answer: %w", err)
	}
	if len(body) > maxResponseBytes {
		return queryData{}, fmt.Errorf("answer larger than %d MiB", maxResponseBytes>>20)
	}
	return decodeEnvelope(resp.StatusCode, body)
}

// decodeBody reads the API's JSON envelope of an instant query.
func decodeBody(status int, body []byte) ([]Sample, error) {
	d, err := decodeEnvelope(status, body)
	if err != nil {
		return nil, err
	}
	return decodeResult(d)
}

// decodeEnvelope reads the API's JSON envelope.
func decodeEnvelope(status int, body []byte) (queryData, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil || r.Status == "" {
		// Not the API: a proxy's page, a wrong path, another server.
		return queryData{}, &Error{Status: status, Message: "not a Prometheus API answer: " + snippet(body)}
	}
	if r.Status != "success" {
		return queryData{}, &Error{Status: status, Type: r.ErrorType, Message: r.Error}
	}
	var d queryData
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return queryData{}, fmt.Errorf("decode answer: %w", err)
	}
	return d, nil
}

type matrixElem struct {
	Metric map[string]string    `json:"metric"`
	Values [][2]json.RawMessage `json:"values"`
}

// decodeMatrix turns the result of a range query into series. A range
// query always answers a matrix, whatever the expression's type.
func decodeMatrix(d queryData) ([]Series, error) {
	if d.ResultType != "matrix" {
		return nil, fmt.Errorf("a range query answered a %q, not a matrix", d.ResultType)
	}
	var elems []matrixElem
	if err := json.Unmarshal(d.Result, &elems); err != nil {
		return nil, fmt.Errorf("decode matrix: %w", err)
	}
	out := make([]Series, 0, len(elems))
	for _, e := range elems {
		s := Series{Labels: e.Metric, Points: make([]Point, 0, len(e.Values))}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		for _, pair := range e.Values {
			ts, err := sampleTime(pair[0])
			if err != nil {
				return nil, fmt.Errorf("decode matrix series %v: %w", e.Metric, err)
			}
			v, err := sampleValue(pair)
			if err != nil {
				return nil, fmt.Errorf("decode matrix series %v: %w", e.Metric, err)
			}
			s.Points = append(s.Points, Point{T: ts, V: v})
		}
		out = append(out, s)
	}
	return out, nil
}

// sampleTime reads the API's Unix seconds (with up to three decimals) as
// milliseconds.
func sampleTime(raw json.RawMessage) (int64, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e15 {
		return 0, fmt.Errorf("timestamp %s is not a number of seconds", raw)
	}
	return int64(math.Round(f * 1000)), nil
}

// decodeResult turns the result of an instant query into samples.
func decodeResult(d queryData) ([]Sample, error) {
	switch d.ResultType {
	case "vector":
		var elems []vectorElem
		if err := json.Unmarshal(d.Result, &elems); err != nil {
			return nil, fmt.Errorf("decode vector: %w", err)
		}
		out := make([]Sample, 0, len(elems))
		for _, e := range elems {
			v, err := sampleValue(e.Value)
			if err != nil {
				return nil, fmt.Errorf("decode vector element %v: %w", e.Metric, err)
			}
			if e.Metric == nil {
				e.Metric = map[string]string{}
			}
			out = append(out, Sample{Labels: e.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var pair [2]json.RawMessage
		if err := json.Unmarshal(d.Result, &pair); err != nil {
			return nil, fmt.Errorf("decode scalar: %w", err)
		}
		v, err := sampleValue(pair)
		if err != nil {
			return nil, fmt.Errorf("decode scalar: %w", err)
		}
		return []Sample{{Labels: map[string]string{}, Value: v}}, nil
	case "matrix":
		return nil, errors.New("the query returns a range vector; a probe needs an instant vector (drop the [range] or wrap it in a function such as max_over_time)")
	case "string":
		return nil, errors.New("the query returns a string; a probe needs numbers")
	}
	return nil, fmt.Errorf("unknown result type %q", d.ResultType)
}

// sampleValue reads [unix seconds, "value"]; the value is a string so that
// NaN and ±Inf survive JSON.
func sampleValue(pair [2]json.RawMessage) (float64, error) {
	var s string
	if err := json.Unmarshal(pair[1], &s); err != nil {
		return 0, fmt.Errorf("value %s is not a string", pair[1])
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q is not a number", s)
	}
	return v, nil
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return "(empty body)"
	}
	if r := []rune(s); len(r) > 120 {
		return string(r[:120]) + "…"
	}
	return s
}

// formatLabels writes labels as {a="1",b="2"}, sorted, for details.
func formatLabels(ls map[string]string) string {
	names := make([]string, 0, len(ls))
	for k := range ls {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	if n := ls["__name__"]; n != "" {
		b.WriteString(n)
	}
	b.WriteByte('{')
	first := true
	for _, k := range names {
		if k == "__name__" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strconv.Quote(ls[k]))
	}
	b.WriteByte('}')
	return b.String()
}
